"""`lens.scorer`'s trie strategy against the unmodified model run one prompt at a time."""

import pytest
import torch

from helpers import byte_tokenizer
from knowflow.evaluation.loglik import score_naive
from knowflow.lens import _trie
from knowflow.lens._trie import ancestors, build_trie, pieces
from knowflow.lens.scorer import score_continuations


def score_trie(model, tok, prompts, conts, chunk, monkeypatch):
    """Each prompt's one continuation by the trie strategy, `chunk` trie nodes per pass."""
    if chunk:
        monkeypatch.setattr(_trie, "CHUNK", chunk)
    got = score_continuations(model, tok, prompts, [[c] for c in conts], strategy="trie")
    return [s[0] for s in got]


SEQS = [[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 4], [7, 8], [1, 2, 3], [1, 6]]


def test_trie_holds_each_sequence_once_per_distinct_prefix():
    trie, paths = build_trie(SEQS)
    distinct = {tuple(s[:k]) for s in SEQS for k in range(1, len(s) + 1)}
    assert len(trie.tokens) == len(distinct)                 # 9 nodes for 17 tokens
    for seq, path in zip(SEQS, paths, strict=True):
        assert [trie.tokens[x] for x in path] == seq
        assert [trie.depth[x] for x in path] == list(range(len(seq)))
        assert [trie.parent[x] for x in path] == [-1] + path[:-1]
    assert paths[0] == paths[2]                    # a repeated sequence costs nothing
    assert all(p < x for x, p in enumerate(trie.parent))     # depth-first: parents first


@pytest.mark.parametrize("size", [1, 2, 3, 4, 9])
def test_pieces_attend_exactly_to_ancestors_and_self(size):
    trie, _ = build_trie(SEQS)
    n = len(trie.tokens)
    for start in range(0, n, size):
        end = min(n, start + size)
        for rows in (None, [x for x in range(start, end) if x % 2 == 0], []):
            covered = []
            for p in pieces(trie, start, end, rows):
                for x in range(p.first, p.last):
                    seen = {int(k) for k, keep in zip(p.keys, p.keep[x - p.first],
                                                      strict=True) if keep}
                    assert seen == set(ancestors(trie, x)) | {x}
                    covered.append(x)
            assert covered == (list(range(start, end)) if rows is None else rows)


@pytest.fixture(scope="module")
def lm(make_tiny_llama):
    tok = byte_tokenizer()
    return make_tiny_llama(tok, layers=3), tok


def _prompts(tok):
    texts = ["Paris is in France. Rome is in Italy. Where is Rome?",
             "Paris is in France. Where is Rome?",
             "Paris is in France. Rome is in Italy. Where is Rome?",   # repeated
             "Rome is in Italy. Where is Rome?",
             "Paris is in France. Rome",                               # a prefix of the first
             "Where is Rome?"]
    return [tok(t)["input_ids"] for t in texts], [" Italy", " France", " Italy", " It",
                                                  " is in Italy", "!"]


@pytest.mark.parametrize("chunk", [5, 37, 10_000])
def test_trie_scores_equal_one_prompt_at_a_time(lm, chunk, monkeypatch):
    model, tok = lm
    prompts, conts = _prompts(tok)
    got = score_trie(model, tok, prompts, conts, chunk, monkeypatch)
    assert model._knowflow_trie_ok is True                   # the trie ran, no fallback
    ref = [score_naive(model, tok, p, c) for p, c in zip(prompts, conts, strict=True)]
    assert [n for _, n in got] == [n for _, n in ref]
    assert [s for s, _ in got] == pytest.approx([s for s, _ in ref], abs=1e-4)
    assert len({round(s, 3) for s, _ in got}) >= 4           # the prompts differ in score


@pytest.mark.parametrize("chunk", [7, 64, None])
def test_ablated_prompts_score_as_one_prompt_at_a_time(lm, chunk, monkeypatch):
    """Sentence subsets as the attribution draws them: many chains, cut by chunks, a mask
    drawn twice, the same continuation after each."""
    model, tok = lm
    sentences = ["Paris is in France. ", "Rome is in Italy. ", "Oslo is in Norway. ",
                 "Bern is in Switzerland. ", "Lima is in Peru. "]
    gen = torch.Generator().manual_seed(0)
    masks = (torch.rand(12, len(sentences), generator=gen) < 0.5).tolist()
    masks += [masks[0], [True] * len(sentences), [False] * len(sentences)]
    texts = ["Context: " + "".join(s for s, k in zip(sentences, m, strict=True) if k) +
             "\nWhere is Rome? A:" for m in masks]
    prompts = [tok(t)["input_ids"] for t in texts]
    got = score_trie(model, tok, prompts, [" Italy."] * len(prompts), chunk, monkeypatch)
    assert model._knowflow_trie_ok is True
    ref = [score_naive(model, tok, p, " Italy.") for p in prompts]
    assert [s for s, _ in got] == pytest.approx([s for s, _ in ref], abs=1e-4)
    assert len({round(s, 3) for s, _ in got}) >= 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_trie_scores_on_a_gpu_equal_one_prompt_at_a_time(make_tiny_llama, monkeypatch):
    tok = byte_tokenizer()
    model = make_tiny_llama(tok, layers=3).cuda()
    prompts, conts = _prompts(tok)
    got = score_trie(model, tok, prompts, conts, 16, monkeypatch)
    assert model._knowflow_trie_ok is True
    ref = [score_naive(model, tok, p, c)[0] for p, c in zip(prompts, conts, strict=True)]
    assert [s for s, _ in got] == pytest.approx(ref, abs=1e-3)


class _IgnoresMasks(torch.nn.Module):
    """A model that drops any 4D attention mask (so it attends causally over the trie)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def forward(self, input_ids=None, attention_mask=None, cache=None, **kwargs):
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = None
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                          **kwargs)


def test_a_model_ignoring_tree_masks_falls_back_to_plain_scoring(make_tiny_llama, monkeypatch):
    tok = byte_tokenizer()
    model = _IgnoresMasks(make_tiny_llama(tok, seed=1))
    prompts, conts = _prompts(tok)
    got = score_trie(model, tok, prompts, conts, 16, monkeypatch)
    assert model._knowflow_trie_ok is False
    ref = [score_naive(model.inner, tok, p, c)[0] for p, c in zip(prompts, conts, strict=True)]
    assert [s for s, _ in got] == pytest.approx(ref, abs=1e-4)
