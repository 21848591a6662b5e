"""CoCoA (cocoa.py) against a hand computation, its limits, and its place in the registry."""

import math

import numpy as np
import pytest
import torch

from helpers import contrastive_setup
from knowflow.evaluation.cocoa import cocoa_alpha, cocoa_logits
from knowflow.evaluation.decoding import Method, generate_contrastive, score_contrastive


def _by_hand(p, q):
    p, q = np.asarray(p, float), np.asarray(q, float)
    conflict = 1 - np.sqrt(p * q).sum()
    gap = -(q * np.log(q)).sum() + (p * np.log(p)).sum()
    top = np.sort(p)[::-1]
    alpha = conflict * (1 / (1 + math.exp(-gap)) + top[0] - top[1]) / 2
    return alpha, np.log(p) + alpha * (np.log(p) - np.log(q))


def test_cocoa_matches_hand_computation():
    for p, q in (([0.7, 0.2, 0.1], [0.1, 0.2, 0.7]), ([0.9, 0.05, 0.05], [0.3, 0.3, 0.4]),
                 ([0.4, 0.35, 0.25], [0.01, 0.01, 0.98])):
        z_c, z_b = torch.log(torch.tensor(p)) + 3.0, torch.log(torch.tensor(q)) - 1.0
        alpha, want = _by_hand(p, q)
        assert float(cocoa_alpha(z_c, z_b)) == pytest.approx(alpha, abs=1e-5)
        assert np.allclose(cocoa_logits(z_c, z_b).numpy(), want, atol=1e-5)


def test_cocoa_is_the_context_model_where_memory_agrees_and_bounded():
    z = torch.randn(4, 7, 50)
    assert torch.allclose(cocoa_alpha(z, z), torch.zeros(4, 7, 1), atol=1e-5)
    assert torch.allclose(cocoa_logits(z, z), torch.log_softmax(z, -1), atol=1e-5)
    a = cocoa_alpha(torch.randn(200, 30) * 4, torch.randn(200, 30) * 4)
    assert bool((a >= 0).all() and (a <= 1).all())


def test_cocoa_runs_in_both_scorings():
    tok, model, prompts, seqs, bases = contrastive_setup(seed=3, capitals=2, quotes=1)
    outs = generate_contrastive(model, tok, seqs, bases, Method("cocoa"), batch_size=2,
                                max_new_tokens=4)
    assert len(outs) == 3 and all(isinstance(o, str) for o in outs)
    conts = [[p.answer_prefix + "Paris", p.answer_prefix + "Rome"] for p in prompts]
    scores = score_contrastive(model, tok, seqs, bases, conts, Method("cocoa"), batch_size=2)
    assert all(len(s) == 2 and all(math.isfinite(v) for v, _ in s) for s in scores)
