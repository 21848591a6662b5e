"""`lens.scorer`'s tree strategy: candidates scored in the prompt's own pass (a 4D mask keeps
each candidate to itself) give the scores of the two-pass strategy and of one full forward
per candidate."""

import pytest
import torch

from helpers import assert_scores_match_naive, byte_tokenizer
from knowflow.lens import scorer
from knowflow.lens._tree import score_batch_tree, tree_length, trie_rows
from knowflow.lens._trie import Trie
from knowflow.lens.prefix import Prefix, forward
from knowflow.lens.prompt_batches import encode_prompts

PROMPTS = ["Context: the capital is Lyon. Q: capital? A:", "Q: who wrote it? A:",
           "Context: x. Q: y? A:"]
CANDS = [[" Lyon", " Paris", " St Etienne"], [" Hugo", " V"], [" a", " bb", " ccc", " dddd"]]


@pytest.fixture(scope="module")
def setup(make_tiny_llama):
    tok = byte_tokenizer()
    model = make_tiny_llama(tok)
    seqs = encode_prompts(tok, PROMPTS, [True] * len(PROMPTS))
    conts = [[tok(c, add_special_tokens=False)["input_ids"] for c in cs] for cs in CANDS]
    return tok, model, seqs, conts


def test_the_trie_feeds_each_candidate_but_its_last_token_and_shares_common_tokens():
    # prompt [1, 2]; candidates [5, 6, 7], [8], [5, 9]: " 5" is one node for two candidates
    trie = Trie.of([[1, 2]], [[[5, 6, 7], [8], [5, 9]]])
    assert trie.tokens == [1, 2, 5, 6] and trie.parent == [-1, 0, 1, 2]
    assert trie.depth == [0, 1, 2, 3]
    # (node, token scored there, item, candidate)
    assert trie.reads == [(1, 5, 0, 0), (2, 6, 0, 0), (3, 7, 0, 0), (1, 8, 0, 1),
                          (1, 5, 0, 2), (2, 9, 0, 2)]
    assert trie.order() == ([0, 1, 2, 3], 3)
    two = Trie.of([[1, 2, 3], [1, 2, 4]], [[[5]], [[6]]])
    assert two.tokens == [1, 2, 3, 4] and two.parent == [-1, 0, 1, 1]
    assert two.order() == ([0, 1, 2, 3], 2)


def test_rows_group_prompts_that_share_their_beginning():
    prompts = [[9, 1, 2, 3], [9, 4, 5], [9, 1, 2, 7], [9, 1, 8], [9, 4, 5, 6]]
    conts = [[[1]]] * len(prompts)
    # sorted after the prefix [9]: (1 2 3), (1 2 7), (1 8), (4 5), (4 5 6)
    assert trie_rows(prompts, conts, 1) == [[0, 2], [3], [1, 4]]   # share >= 2 tokens
    assert trie_rows(prompts, conts, 1, min_share=1) == [[0, 2, 3], [1, 4]]
    # nodes: (1 2 3) 3, + (1 2 7) 1 = 4; + (1 8) would make 5
    assert trie_rows(prompts, conts, 1, min_share=1, max_nodes=4) == [[0, 2], [3], [1, 4]]


@pytest.mark.parametrize("share", [False, True])
def test_tree_scores_match_the_two_pass_scorer_and_a_full_forward(setup, share):
    tok, model, seqs, conts = setup
    prefix = Prefix.build(model, seqs, share=share)
    tree = score_batch_tree(model, seqs, conts, prefix, tok.pad_token_id)
    two = scorer._score_two_pass(model, seqs, conts, prefix, tok.pad_token_id)
    assert_scores_match_naive(model, tok, seqs, CANDS, tree, two)
    assert [lp for row in tree for lp, _ in row] == pytest.approx(
        [lp for row in two for lp, _ in row], abs=1e-4)


def test_a_model_failing_the_check_falls_back_to_two_passes(make_tiny_llama, setup, monkeypatch):
    tok, _, seqs, conts = setup
    model = make_tiny_llama(tok)  # a fresh model: not checked yet
    monkeypatch.setattr(scorer, "score_batch_tree",
                        lambda *a: [[(s + 1.0, n) for s, n in row] for row in
                                    scorer._score_two_pass(*a)])  # as if the mask were ignored
    got = scorer._score_batch(model, seqs, conts, Prefix(0), tok.pad_token_id)
    assert model._knowflow_tree_ok is False
    assert got == scorer._score_two_pass(model, seqs, conts, Prefix(0), tok.pad_token_id)


def test_a_model_passing_the_check_keeps_the_one_pass_scorer(make_tiny_llama, setup):
    tok, _, seqs, conts = setup
    model = make_tiny_llama(tok)
    scorer._score_batch(model, seqs, conts, Prefix(0), tok.pad_token_id)
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
    tries = [Trie.of([s[prefix.length:]], [c]) for s, c in zip(seqs, conts, strict=True)]
    assert seen[0] == max(len(t.tokens) for t in tries)
    assert [lp for row in full for lp, _ in row] == pytest.approx(
        [lp for row in kept for lp, _ in row], abs=1e-5)
    keep = max(t.order()[1] for t in tries)
    assert keep < seen[0]
    logits, _ = forward(model, keep=keep, input_ids=torch.tensor([seqs[0]]))
    assert logits.shape[1] == keep


SHARED = ['Write a quote that ends in the word "stone": Actions speak',
          'Write a quote that ends in the word "stone": Better late than',
          'Write a quote that ends in the word "words": Actions speak',
          'Write a quote that ends in the word "stone": Actions', "Q: other? A:"]
SHARED_CANDS = [[" louder", " stone"], [" never", " stone"], [" words", " Words"],
                [" speak", " stones"], [" a", " b"]]


@pytest.mark.parametrize("share", [False, True])
def test_rows_sharing_their_question_score_as_the_flat_scorer_and_a_full_forward(setup, share):
    """Prompts asking for the same word share a row (the trie holds their common tokens once;
    one prompt is a prefix of another): every score equals the two-pass scorer's and one full
    forward pass's."""
    tok, model, _, _ = setup
    seqs = encode_prompts(tok, SHARED, [True] * len(SHARED))
    conts = [[tok(c, add_special_tokens=False)["input_ids"] for c in cs] for cs in SHARED_CANDS]
    prefix = Prefix.build(model, seqs, share=share)
    rows = trie_rows(seqs, conts, prefix.length)
    assert any(len(r) >= 3 for r in rows)                 # the three "stone" prompts
    packed = score_batch_tree(model, seqs, conts, prefix, tok.pad_token_id, rows)
    two = scorer._score_two_pass(model, seqs, conts, prefix, tok.pad_token_id)
    via = scorer.score_continuations(model, tok, seqs, SHARED_CANDS, batch_size=3,
                                     share_prefix=share)
    assert_scores_match_naive(model, tok, seqs, SHARED_CANDS, packed, two, via)
    assert [lp for row in packed for lp, _ in row] == pytest.approx(
        [lp for row in two for lp, _ in row], abs=1e-4)


def test_every_strategy_gives_the_scores_of_a_full_forward(setup):
    """One entry point: "auto", "two_pass" and "trie" score several candidates per prompt as
    one full forward pass per candidate does; an unknown strategy is refused."""
    tok, model, seqs, _ = setup
    got = [scorer.score_continuations(model, tok, seqs, CANDS, strategy=s)
           for s in scorer.STRATEGIES]
    assert_scores_match_naive(model, tok, seqs, CANDS, *got)
    with pytest.raises(ValueError, match="unknown scoring strategy"):
        scorer.score_continuations(model, tok, seqs, CANDS, strategy="fast")


@pytest.mark.parametrize("share", [False, True])
def test_long_prompts_run_alone_in_chunks_and_score_as_a_full_forward(setup, monkeypatch,
                                                                      share):
    """A prompt longer than LONG_PROMPT tokens continues the shared prefix's cache
    in PREFILL_CHUNK-token passes, then its candidates run on that cache: the scores equal
    one full forward pass per candidate and the dense-tree path's; shorter prompts of the
    same call keep the tree rows."""
    tok, model, seqs, _ = setup
    dense = scorer.score_continuations(model, tok, seqs, CANDS, share_prefix=share)
    grown = []
    extend = Prefix.extend

    def spy(self, model, seq, chunk):
        grown.append((len(seq), chunk))
        return extend(self, model, seq, chunk)

    monkeypatch.setattr(Prefix, "extend", spy)
    monkeypatch.setattr(scorer, "LONG_PROMPT", 20)
    monkeypatch.setattr(scorer, "PREFILL_CHUNK", 7)
    got = scorer.score_continuations(model, tok, seqs, CANDS, share_prefix=share)
    long = [len(s) - 1 for s in seqs if len(s) > 20]
    assert 0 < len(long) < len(seqs)                   # both paths ran
    assert grown == [(m, 7) for m in long]
    assert_scores_match_naive(model, tok, seqs, CANDS, got)
    assert [lp for row in got for lp, _ in row] == pytest.approx(
        [lp for row in dense for lp, _ in row], abs=1e-4)
