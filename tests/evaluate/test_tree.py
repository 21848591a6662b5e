"""`evaluate.tree`: candidates scored in the prompt's own pass (a 4D mask keeps each candidate
to itself) give the scores of the two-pass scorer and of one full forward per candidate."""

import pytest
import torch

from conftest import assert_scores_match_naive, byte_tokenizer, tiny_llama
from knowflow.evaluate import loglik
from knowflow.evaluate.batching import Prefix, encode_prompts, forward
from knowflow.evaluate.tree import score_batch_tree, tree_layout, tree_length

PROMPTS = ["Context: the capital is Lyon. Q: capital? A:", "Q: who wrote it? A:",
           "Context: x. Q: y? A:"]
CANDS = [[" Lyon", " Paris", " St Etienne"], [" Hugo", " V"], [" a", " bb", " ccc", " dddd"]]


@pytest.fixture(scope="module")
def setup():
    tok = byte_tokenizer()
    model = tiny_llama(tok)
    seqs = encode_prompts(tok, PROMPTS, [True] * len(PROMPTS))
    conts = [[tok(c, add_special_tokens=False)["input_ids"] for c in cs] for cs in CANDS]
    return tok, model, seqs, conts


def test_layout_feeds_each_candidate_but_its_last_token():
    fed, spans, width = tree_layout([[[5, 6, 7], [8], [9, 10]]])
    assert fed == [[5, 6, 9]] and spans == [[(0, 2), (2, 2), (2, 3)]] and width == 3


@pytest.mark.parametrize("share", [False, True])
def test_tree_scores_match_the_two_pass_scorer_and_a_full_forward(setup, share):
    tok, model, seqs, conts = setup
    prefix = Prefix.build(model, seqs, share=share)
    tree = score_batch_tree(model, seqs, conts, prefix, tok.pad_token_id)
    two = loglik._score_batch_cached(model, seqs, conts, prefix, tok.pad_token_id)
    assert_scores_match_naive(model, tok, seqs, CANDS, tree, two)
    assert [lp for row in tree for lp, _ in row] == pytest.approx(
        [lp for row in two for lp, _ in row], abs=1e-4)


def test_a_model_failing_the_check_falls_back_to_two_passes(setup, monkeypatch):
    tok, _, seqs, conts = setup
    model = tiny_llama(tok)  # a fresh model: not checked yet
    monkeypatch.setattr(loglik, "score_batch_tree",
                        lambda *a: [[(s + 1.0, n) for s, n in row] for row in
                                    loglik._score_batch_cached(*a)])  # as if the mask were ignored
    got = loglik._score_batch(model, seqs, conts, Prefix(0), tok.pad_token_id)
    assert model._knowflow_tree_ok is False
    assert got == loglik._score_batch_cached(model, seqs, conts, Prefix(0), tok.pad_token_id)


def test_a_model_passing_the_check_keeps_the_one_pass_scorer(setup):
    tok, _, seqs, conts = setup
    model = tiny_llama(tok)
    loglik._score_batch(model, seqs, conts, Prefix(0), tok.pad_token_id)
    assert model._knowflow_tree_ok is True


def test_rows_are_right_aligned_and_sorted_by_their_whole_length():
    # a long prompt with short candidates and a short prompt with long ones: one width
    assert tree_length([1, 2, 3, 4], [[5], [6, 7]]) == 5
    assert tree_length([1], [[5, 6, 7], [8, 9]]) == 4


def test_only_the_candidate_end_is_projected_and_a_model_without_logits_to_keep_works(setup):
    """The vocabulary projection runs for the last `1 + widest candidate region` positions
    (logits_to_keep); a model that refuses that keyword gets the full logits, sliced, and the
    same scores."""
    tok, model, seqs, conts = setup
    seen = []

    class NoKeep(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kwargs):
            if "logits_to_keep" in kwargs:
                raise TypeError("unexpected keyword logits_to_keep")
            out = self.inner(**kwargs)
            seen.append(out.logits.shape[1])
            return out

    prefix = Prefix.build(model, seqs, share=True)
    kept = score_batch_tree(model, seqs, conts, prefix, tok.pad_token_id)
    wrapped = NoKeep(model)
    wrapped._knowflow_cache_name = "past_key_values"
    full = score_batch_tree(wrapped, seqs, conts, prefix, tok.pad_token_id)
    assert wrapped._knowflow_keep_ok is False
    fed, _, widest = tree_layout(conts)
    assert seen[0] == max(len(s) - prefix.length + len(f) for s, f in zip(seqs, fed, strict=True))
    assert [lp for row in full for lp, _ in row] == pytest.approx(
        [lp for row in kept for lp, _ in row], abs=1e-5)
    logits, _ = forward(model, keep=widest + 1, input_ids=torch.tensor([seqs[0]]))
    assert logits.shape[1] == widest + 1
