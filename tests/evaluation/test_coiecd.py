"""COIECD against hand computations on toy distributions (the constraint's ratio form: a token
conflicts when p(y|c,x) > p_max / 4 or p(y|c,x) < 4 p_min; only the top token above p_max / 4
drops the lower bound), and in the decoder: batching changes nothing, teacher-forced scores
equal the rule applied to two plain forward passes."""

import math

import numpy as np
import pytest
import torch

from helpers import contrastive_setup
from knowflow.evaluation.coiecd import LAMBDA, coiecd_logits, conflicting
from knowflow.evaluation.decoding import Method, generate_contrastive, score_contrastive


def _log(ps):
    return torch.tensor([[math.log(p) for p in ps]], dtype=torch.float64)


def test_rival_step_by_hand():
    p_c = [0.40, 0.30, 0.14, 0.09, 0.05, 0.02]   # p_max / 4 = 0.1, 4 * p_min = 0.08
    p_b = [0.70, 0.05, 0.10, 0.05, 0.05, 0.05]
    assert LAMBDA == 4.0
    want_mask = [True, True, True, False, True, True]
    got_mask = conflicting(_log(p_c), _log(p_b))
    assert got_mask.tolist() == [want_mask]
    want = []
    for pc, pb, conflict in zip(p_c, p_b, want_mask, strict=True):
        own = math.log(pc) if conflict else math.log(pb)
        want.append(own + (math.log(pc) - math.log(pb)))
    got = coiecd_logits(_log(p_c), _log(p_b))[0]
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    # by hand: token 1 scores 2 ln .3 - ln .05 = 0.588, above token 0's 2 ln .4 - ln .7
    assert int(got.argmax()) == 1
    assert float(got[1]) == pytest.approx(2 * math.log(0.3) - math.log(0.05), abs=1e-5)
    assert float(got[3]) == pytest.approx(math.log(0.09), abs=1e-5)  # non-conflicting: p_c


def test_confident_step_by_hand():
    # only the top token is above p_max / 4: the lower bound is dropped; 4 * p_min = 0.04
    p_c = [0.85, 0.06, 0.05, 0.03, 0.01]
    p_b = [0.10, 0.60, 0.10, 0.10, 0.10]
    assert conflicting(_log(p_c), _log(p_b)).tolist() == [[False, False, False, True, True]]
    got = coiecd_logits(_log(p_c), _log(p_b))[0]
    want = [math.log(0.85), math.log(0.06), math.log(0.05),
            2 * math.log(0.03) - math.log(0.10), 2 * math.log(0.01) - math.log(0.10)]
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    assert int(got.argmax()) == 0    # no contrast where the context is confident: greedy


def test_entropy_shift_cancels_and_rows_are_independent():
    z_c, z_b = torch.randn(4, 3, 40) * 3, torch.randn(4, 3, 40) * 3
    both = coiecd_logits(z_c, z_b)
    for i in range(4):
        for j in range(3):
            torch.testing.assert_close(both[i, j], coiecd_logits(z_c[i, j], z_b[i, j]))
    # H(Y|x) shifts every token's information equally, so the mask depends on p(y|c,x) only
    lp_c = torch.log_softmax(z_c, -1)
    assert torch.equal(conflicting(lp_c, torch.log_softmax(z_b, -1)),
                       conflicting(lp_c, torch.log_softmax(z_b.flip(-1) * 0.1, -1)))


@pytest.fixture(scope="module")
def setup():
    return contrastive_setup(seed=1, capitals=3, quotes=2)


def test_decoder_batched_and_scored_by_hand(setup):
    tok, model, prompts, seqs, base = setup
    method = Method("coiecd")
    batched = generate_contrastive(model, tok, seqs, base, method, batch_size=5,
                                   max_new_tokens=5)
    alone = [generate_contrastive(model, tok, [s], [b], method, max_new_tokens=5)[0]
             for s, b in zip(seqs, base, strict=True)]
    assert batched == alone
    conts = [[p.answer_prefix + "Paris", p.answer_prefix + "Lyon"] for p in prompts]
    got = score_contrastive(model, tok, seqs, base, conts, method, batch_size=5)
    for s, b, cs, scores in zip(seqs, base, conts, got, strict=True):
        for text, (lp, n) in zip(cs, scores, strict=True):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                z_c = model(input_ids=torch.tensor([s + ids])).logits[0, len(s) - 1:-1]
                z_b = model(input_ids=torch.tensor([b + ids])).logits[0, len(b) - 1:-1]
            lp_c, lp_b = z_c.double().log_softmax(-1), z_b.double().log_softmax(-1)
            p_c = lp_c.exp()
            top = p_c.max(-1, keepdim=True).values
            rival = p_c > top / 4
            lone = rival.sum(-1, keepdim=True) == 1
            tail = p_c < 4 * p_c.min(-1, keepdim=True).values
            conflict = (rival & ~lone) | tail
            merged = torch.where(conflict, lp_c, lp_b) + (lp_c - lp_b)
            want = float(merged.log_softmax(-1)[torch.arange(len(ids)), torch.tensor(ids)].sum())
            assert n == len(ids) and lp == pytest.approx(want, abs=2e-3)
