"""The lasso surrogate and the rank correlation behind the LDS, against references."""

import numpy as np
import pytest
import torch

from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.surrogate import (
    balanced_masks,
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


@pytest.mark.parametrize("n,sentences", [(32, 10), (64, 10), (16, 10), (32, 5), (64, 5), (8, 7)])
def test_balanced_design_keeps_each_sentence_half_the_time_with_orthogonal_columns(n,
                                                                                   sentences):
    for seed in range(5):
        masks = balanced_masks(n, sentences, 0.5, torch.Generator().manual_seed(seed))
        rows = [tuple(row) for row in masks.tolist()]
        assert len(set(rows)) == min(n, 2 ** sentences)          # no mask repeats needlessly
    assert masks.shape == (n, sentences) and set(masks.unique().tolist()) <= {0, 1}
    assert (masks.sum(0) == n // 2).all()                 # each kept in exactly half
    signs = 2 * masks.double() - 1                          # (n, sentences) in {-1, +1}
    assert torch.equal(signs.T @ signs, n * torch.eye(sentences, dtype=torch.float64))


def test_balanced_design_with_room_aliases_no_sentence_with_a_pair():
    """Where there are enough odd-weight Hadamard columns, no column is the product of two
    others, so a pair's interaction does not pass for a third sentence's effect."""
    signs = 2 * balanced_masks(32, 10, 0.5, torch.Generator().manual_seed(4)).double() - 1
    for i in range(10):
        for j in range(i + 1, 10):
            product = signs[:, i] * signs[:, j]
            assert (product @ signs).abs().max() == 0


def test_balanced_design_otherwise_keeps_the_count_per_sentence():
    masks = balanced_masks(20, 7, 0.3, torch.Generator().manual_seed(5))
    assert (masks.sum(0) == 6).all()


def test_surrogate_recovers_known_weights_on_a_balanced_design():
    gen = torch.Generator().manual_seed(0)
    true = torch.tensor([0.0, 0.0, 4.0, 0.0, -1.5, 0.0, 0.0, 0.5], dtype=torch.float64)
    masks = balanced_masks(32, 8, 0.5, gen)
    scores = -7.0 + masks.double() @ true + 0.01 * torch.randn(32, generator=gen,
                                                                dtype=torch.float64)
    sur = fit_surrogate(masks, scores)
    assert torch.allclose(sur.weights, true, atol=0.05)
    assert sur.intercept == pytest.approx(-7.0, abs=0.05)


def test_surrogate_names_a_top_sentence_where_some_penalty_gives_one():
    """Cross-validation may prefer the penalty that zeroes every weight on a weak, noisy
    effect; the surrogate then takes the best penalty that leaves a positive weight, so the
    top sentence is not an arbitrary tie at zero."""
    gen = torch.Generator().manual_seed(3)     # the plain CV choice zeroes every weight here
    masks = random_masks(32, 5, 0.5, gen)
    scores = -5.0 + 0.05 * masks[:, 2].double() + torch.randn(32, generator=gen,
                                                                dtype=torch.float64)
    sur = fit_surrogate(masks, scores)
    assert float(sur.weights.max()) > 0


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


@pytest.mark.parametrize(("n", "d"), [(40, 6), (48, 55), (24, 120)])
def test_the_exact_path_solves_the_lasso_coordinate_descent_solves(n, d):
    """The homotopy path's solution at each penalty is the lasso's: its objective is never
    above coordinate descent's (to that method's tolerance), and where the solution is unique
    (more masks than sentences) the weights agree."""
    from knowflow.explanation.surrogate import _path, alpha_grid

    rng = np.random.default_rng(n + d)
    x = (rng.random((n, d)) < 0.5).astype(float)
    true = np.zeros(d)
    true[:3] = [2.0, -1.0, 0.5]
    y = x @ true + rng.normal(0, 0.2, n)
    grid = alpha_grid(x, y)
    warm = None
    for alpha, (w, b) in zip(grid, _path(x, y, grid), strict=True):
        warm, b_cd = lasso(x, y, alpha, iters=20000, tol=1e-12, start=warm)

        def objective(w_, b_, a=alpha):
            r = y - b_ - x @ w_
            return r @ r / (2 * n) + a * np.abs(w_).sum()
        assert objective(w, b) <= objective(warm, b_cd) + 1e-9
        if d < n:
            assert np.abs(w - warm).max() < 1e-6


def test_the_prior_centred_ridge_is_the_scaled_prior_when_the_data_agree_with_it():
    from knowflow.explanation.surrogate import centred_ridge

    gen = torch.Generator().manual_seed(3)
    prior = torch.randn(40, generator=gen, dtype=torch.float64).numpy()
    masks = random_masks(24, 40, 0.5, gen).double().numpy()       # fewer masks than sentences
    y = -3.0 + masks @ (2.5 * prior)
    w, b = centred_ridge(masks, y, prior, 0.1)
    assert np.allclose(w, 2.5 * prior, atol=1e-6) and b == pytest.approx(-3.0, abs=1e-6)
    # a prior pointing the wrong way gets no weight (c >= 0): the ridge alone fits
    w_neg, _ = centred_ridge(masks, y, -prior, 0.1)
    assert np.corrcoef(w_neg, prior)[0, 1] > 0


def test_cross_validation_keeps_the_lasso_for_one_decisive_sentence_and_the_ridge_for_many():
    gen = torch.Generator().manual_seed(5)
    # one decisive sentence of 10, a prior that is noise: the adaptive lasso wins
    masks = random_masks(32, 10, 0.5, gen)
    true = torch.zeros(10, dtype=torch.float64)
    true[3] = 4.0
    y = -5.0 + masks.double() @ true + 0.05 * torch.randn(32, generator=gen, dtype=torch.float64)
    sparse = fit_surrogate(masks, y, prior=torch.rand(10, generator=gen, dtype=torch.float64))
    assert sparse.fit == "lasso" and int(sparse.weights.argmax()) == 3
    # 60 sentences that all matter, 32 masks, a prior that ranks them roughly right: the
    # ridge centred on it wins, and ranks unseen masks better than the lasso alone
    true = torch.randn(60, generator=gen, dtype=torch.float64)
    prior = true + 0.3 * torch.randn(60, generator=gen, dtype=torch.float64)
    masks = random_masks(32, 60, 0.5, gen)
    y = -5.0 + masks.double() @ true
    dense = fit_surrogate(masks, y, prior=prior)
    plain = fit_surrogate(masks, y)
    assert dense.fit.startswith("prior+ridge") and dense.alpha is None
    held = random_masks(64, 60, 0.5, gen)
    truth = held.double() @ true
    assert spearman(dense.predict(held), truth) > spearman(plain.predict(held), truth) + 0.1


def test_the_rounds_stop_on_a_flat_lds_only_above_the_floor():
    from knowflow.explanation.attribution import ablation_counts, converged

    flat_low = [{"lds": 0.30}, {"lds": 0.31}]
    flat_high = [{"lds": 0.80}, {"lds": 0.81}]
    rising = [{"lds": 0.50}, {"lds": 0.60}]
    assert converged(flat_high, 0.02, 0.7) and not converged(flat_low, 0.02, 0.7)
    assert converged(flat_low, 0.02, -1.0) and not converged(rising, 0.02, -1.0)
    assert not converged([{"lds": None}, {"lds": 0.9}], 0.02, -1.0)
    assert not converged(flat_high, 0.0, -1.0)                       # converge 0: never
    assert ablation_counts(ExplainConfig()) == [16, 24, 32, 40, 48, 56, 64]
    assert ablation_counts(ExplainConfig(converge=0)) == [64]
