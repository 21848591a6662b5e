"""`lens.shared`: prompts scored from a shared prompt's keys and values score as the plain
trie does, whatever the passes they are cut into."""

import pytest
import torch

from helpers import byte_tokenizer
from knowflow.evaluation.loglik import score_naive
from knowflow.lens import _trie
from knowflow.lens.memory import shape_of
from knowflow.lens.scorer import score_continuations
from knowflow.lens.shared import nodes_for_budget, score_shared, share_prompt

SENTENCES = ["Paris is in France. ", "Rome is in Italy. ", "Oslo is in Norway. ",
             "Bern is in Switzerland. ", "Lima is in Peru. "]


@pytest.fixture(scope="module")
def lm(make_tiny_llama):
    tok = byte_tokenizer()
    return make_tiny_llama(tok, layers=3), tok


def _ablated(tok, masks):
    texts = ["Context: " + "".join(s for s, k in zip(SENTENCES, m, strict=True) if k) +
             "\nWhere is Rome? A:" for m in masks]
    return [tok(t)["input_ids"] for t in texts]


@pytest.mark.parametrize(("max_nodes", "chunk"), [(10_000, None), (40, 7), (1, 16)])
def test_shared_scores_equal_one_prompt_at_a_time(lm, max_nodes, chunk, monkeypatch):
    model, tok = lm
    if chunk:
        monkeypatch.setattr(_trie, "CHUNK", chunk)
    full = _ablated(tok, [[True] * len(SENTENCES)])[0]
    score_continuations(model, tok, [full], [[" Italy."]], strategy="trie")   # the check
    assert model._knowflow_trie_ok is True
    gen = torch.Generator().manual_seed(1)
    masks = (torch.rand(10, len(SENTENCES), generator=gen) < 0.5).tolist()
    masks += [masks[0], [True] * len(SENTENCES), [False] * len(SENTENCES)]
    prompts = _ablated(tok, masks)
    prompts.append(full[:-5])               # a prompt that ends inside the shared one
    conts = [[" Italy.", " Rome"]] * len(prompts)
    shared = share_prompt(model, tok, full[:-1])
    assert shared is not None and len(shared.kv) == 3
    assert shared.kv[0][0].shape[2] == len(full) - 1
    got = score_shared(model, tok, prompts, conts, shared, max_nodes=max_nodes)
    for p, cs, g in zip(prompts, conts, got, strict=True):
        ref = [score_naive(model, tok, p, c) for c in cs]
        assert [n for _, n in g] == [n for _, n in ref]
        assert [s for s, _ in g] == pytest.approx([s for s, _ in ref], abs=1e-4)


def test_unchecked_or_unsupported_models_score_from_scratch(lm):
    model, tok = lm
    full = _ablated(tok, [[True] * len(SENTENCES)])[0]
    got = score_shared(model, tok, [full], [[" Italy."]], None)
    assert got[0][0][0] == pytest.approx(score_naive(model, tok, full, " Italy.")[0], abs=1e-4)


def test_pass_size_grows_with_the_budget(lm):
    model, _ = lm
    shape = shape_of(model)
    small = nodes_for_budget(shape, 100, 2 ** 20, chunk=64)
    large = nodes_for_budget(shape, 100, 2 ** 26, chunk=64)
    assert 64 <= small < large <= 32768
