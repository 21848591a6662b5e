"""Mean rank: ranks from a hand-built score table (ties, top-1, grouping), and ranking with a
tiny random Llama against one-prompt-at-a-time forward passes."""

import pytest
import torch
from tokenizers import Tokenizer, decoders, models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from knowflow.data.people import OcrPeopleConfig, generate
from knowflow.evaluation.loglik import score_naive
from knowflow.evaluation.rank import (
    grouped_stats,
    rank_candidates,
    rank_stats,
    ranks_from_scores,
    summarize,
)

TABLE = [
    [-1.0, -2.0, -3.0],  # correct 0: best -> 0
    [-1.0, -2.0, -3.0],  # correct 2: worst -> 2
    [-2.0, -1.0, -2.0, -0.5],  # correct 0: two higher, one tie -> 2.5
    [-1.0, -1.0, -1.0, -1.0],  # all tied -> chance (K - 1) / 2 = 1.5
    [-0.1, -5.0],  # correct 1 -> 1
]
CORRECT = [0, 2, 0, 3, 1]


def test_ranks_from_hand_built_table():
    ranks = ranks_from_scores(TABLE, CORRECT)
    assert ranks == [0, 2, 2.5, 1.5, 1]
    stats = rank_stats(ranks, [len(r) for r in TABLE])
    assert stats.mean_rank == pytest.approx(7 / 5)
    assert stats.top1 == pytest.approx(1 / 5)  # a tie is never top-1
    assert stats.n == 5 and stats.n_candidates == pytest.approx(16 / 5)
    groups = grouped_stats(["a", "a", "b", "b", "a"], ranks, [3, 3, 4, 4, 2])
    assert list(groups) == ["a", "b"]
    assert groups["a"].mean_rank == pytest.approx(1.0) and groups["a"].top1 == pytest.approx(1 / 3)
    assert groups["b"].mean_rank == pytest.approx(2.0) and groups["b"].n_candidates == 4


def test_ranks_are_order_invariant_and_reject_bad_input():
    # permuting the candidates (and the correct index with them) never changes the rank
    for row, c in zip(TABLE, CORRECT, strict=True):
        perm = list(reversed(range(len(row))))
        assert ranks_from_scores([[row[p] for p in perm]], [perm.index(c)]) == \
            ranks_from_scores([row], [c])
    with pytest.raises(ValueError):
        ranks_from_scores([[0.0, 1.0]], [2])
    with pytest.raises(ValueError):
        ranks_from_scores([[0.0, float("nan")]], [0])
    with pytest.raises(ValueError):
        ranks_from_scores([[0.0, 1.0]], [0, 1])
    assert rank_stats([], []).n == 0


@pytest.fixture(scope="module")
def tokenizer():
    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>",
                                   pad_token="<|end|>")


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, initializer_range=0.2,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(cfg).eval()


def test_ranking_with_tiny_random_llama(model, tokenizer):
    data = generate(OcrPeopleConfig(pairs_per_family=3, people_per_family=6, seed=1))
    items = [it for it in data.eval_items][:12]
    prompts = [tokenizer(it.prompt)["input_ids"] for it in items]
    conts = [it.continuations(with_suffix=True) for it in items]
    correct = [it.correct for it in items]
    ranks = rank_candidates(model, tokenizer, prompts, conts, correct, batch_size=5)
    for it, r_full, r_first in zip(items, ranks.full, ranks.first, strict=True):
        k = len(it.candidates)
        assert 0 <= r_full <= k - 1 and 0 <= r_first <= k - 1
        assert 2 * r_full == int(2 * r_full)  # whole or half ranks only
    # against a plain forward pass, one prompt and candidate at a time
    for p, cs, full, first in zip(prompts[:4], conts[:4], ranks.full_scores[:4],
                                  ranks.first_scores[:4], strict=True):
        for c, s_full, s_first in zip(cs, full, first, strict=True):
            assert s_full == pytest.approx(score_naive(model, tokenizer, p, c)[0], abs=1e-4)
            first_tok = tokenizer.decode(tokenizer(c, add_special_tokens=False)["input_ids"][:1])
            assert s_first == pytest.approx(score_naive(model, tokenizer, p, first_tok)[0],
                                            abs=1e-4)
    table = summarize([(it.family, it.kind) for it in items], ranks,
                      [len(it.candidates) for it in items], name="/".join)
    assert all(0 <= row["mean_rank"] <= 2 and 0 <= row["top1_first_token"] <= 1
               for row in table.values())
    assert sum(row["n"] for row in table.values()) == len(items)


def test_first_token_fallback_pass_gives_the_same_scores(model, tokenizer, monkeypatch):
    """Where a first token does not round-trip through decode, a separate prompt pass scores
    it; both paths agree."""
    from knowflow.evaluation import rank

    data = generate(OcrPeopleConfig(pairs_per_family=3, people_per_family=6, seed=2))
    items = list(data.eval_items)[:6]
    args = ([tokenizer(it.prompt)["input_ids"] for it in items],
            [it.continuations() for it in items], [it.correct for it in items])
    joint = rank_candidates(model, tokenizer, *args, batch_size=4)
    monkeypatch.setattr(rank, "_first_token_texts", lambda *a: None)
    apart = rank_candidates(model, tokenizer, *args, batch_size=3)
    assert joint.full == apart.full and joint.first == apart.first
    for a, b in zip(joint.first_scores, apart.first_scores, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_one_token_candidates_have_equal_full_and_first_scores(model, tokenizer):
    prompts = [tokenizer(t)["input_ids"] for t in ("Bo Ka likes", "Mi Tu speaks", "X")]
    conts = [["a", "b", "c"], ["d", "e"], ["f", "gh"]]  # byte tokens: one each but "gh"
    ranks = rank_candidates(model, tokenizer, prompts, conts, [0, 1, 1])
    assert ranks.full_scores[:2] == ranks.first_scores[:2]
    assert ranks.full_scores[2][0] == ranks.first_scores[2][0]
    assert ranks.full_scores[2][1] < ranks.first_scores[2][1]  # "gh" scores two tokens
    for p, cs, row in zip(prompts, conts, ranks.full_scores, strict=True):
        for c, s in zip(cs, row, strict=True):
            assert s == pytest.approx(score_naive(model, tokenizer, p, c)[0], abs=1e-4)
