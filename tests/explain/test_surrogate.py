"""The lasso surrogate and the rank correlation behind the LDS, against references."""

import numpy as np
import pytest
import torch

from knowflow.explain.surrogate import (
    fit_surrogate,
    lasso,
    random_masks,
    spearman,
)


def test_surrogate_recovers_known_weights_of_a_synthetic_scorer():
    gen = torch.Generator().manual_seed(0)
    true = torch.tensor([0.0, 0.0, 4.0, 0.0, -1.5, 0.0, 0.0, 0.5], dtype=torch.float64)
    masks = random_masks(64, 8, 0.5, gen)
    noise = 0.01 * torch.randn(64, generator=gen, dtype=torch.float64)
    scores = -7.0 + masks.double() @ true + noise          # the scorer: log p under a mask
    sur = fit_surrogate(masks, scores)
    assert torch.allclose(sur.weights, true, atol=0.05)
    assert sur.intercept == pytest.approx(-7.0, abs=0.05)
    held = random_masks(32, 8, 0.5, gen)
    assert spearman(sur.predict(held), -7.0 + held.double() @ true) > 0.99


def test_lasso_without_penalty_is_least_squares_and_a_large_one_zeroes_everything():
    rng = np.random.default_rng(1)
    x = (rng.random((40, 5)) < 0.5).astype(float)
    y = x @ np.array([1.0, -2.0, 0.0, 3.0, 0.5]) + rng.normal(0, 0.1, 40) + 2.0
    w, b = lasso(x, y, alpha=0.0, iters=5000, tol=1e-12)
    design = np.hstack([x, np.ones((40, 1))])
    ref = np.linalg.lstsq(design, y, rcond=None)[0]
    assert np.allclose(w, ref[:5], atol=1e-6) and b == pytest.approx(ref[5], abs=1e-6)
    w, b = lasso(x, y, alpha=1e3)
    assert np.all(w == 0) and b == pytest.approx(y.mean())


def test_spearman_against_a_hand_computation_with_ties():
    a = torch.tensor([1.0, 2.0, 2.0, 4.0])
    b = torch.tensor([10.0, 30.0, 20.0, 40.0])
    # ranks a: 0, 1.5, 1.5, 3 ; b: 0, 2, 1, 3 -> Pearson of the ranks
    ra, rb = np.array([0, 1.5, 1.5, 3]), np.array([0, 2, 1, 3])
    assert spearman(a, b) == pytest.approx(np.corrcoef(ra, rb)[0, 1])
    assert spearman(a, torch.ones(4)) is None
