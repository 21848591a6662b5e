"""A sparse linear surrogate of an ablation scorer, and how well it fits.

Given masks X (ablations, sentences) in {0, 1} (1: the sentence is kept) and the answer's
log-probability y under each ablated context, the surrogate is y ~ b + X w with an L1
penalty (the lasso, solved exactly along its path of penalties, `_path`; `lasso` is the
coordinate-descent reference it is tested against): w_j is sentence j's attribution, the
log-probability it adds when present. The penalty is chosen by k-fold cross-validation on
a grid below the smallest penalty that zeroes every weight, so a context with one decisive
sentence gets one large weight and near-zero others, and a context where many sentences
matter is not forced to be sparse.

With one-pass scores of the sentences (a prior), the lasso is the adaptive one, and a ridge
centred on the prior (`centred_ridge`) competes with it: cross-validation keeps whichever
ranks the held-out folds best (`_pick`).

The fit is judged on held-out ablations by the linear datamodeling score (LDS: the Spearman
rank correlation between the surrogate's predictions and the actual log-probabilities).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Surrogate:
    weights: torch.Tensor        # (sentences,) float64: each sentence's attribution
    intercept: float             # predicted log-probability with every sentence removed
    alpha: float | None          # the chosen L1 penalty (None: the prior-centred ridge)
    out_of_fold: torch.Tensor | None = None  # (ablations,) each mask's prediction by the
    #                              fold's fit that did not see it, at the chosen penalty
    fit: str = "lasso"           # "lasso" | "prior+ridge(<penalty>)": what CV chose

    def predict(self, masks: torch.Tensor) -> torch.Tensor:
        """(ablations, sentences) {0,1} -> (ablations,) predicted log-probabilities."""
        return self.intercept + masks.double() @ self.weights


def lasso(x: torch.Tensor, y: torch.Tensor, alpha: float, iters: int = 1000,
          tol: float = 1e-8, start: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """argmin_w,b (1/2n)|y - b - x w|^2 + alpha |w|_1 by coordinate descent: (w, b).
    `start` warm-starts w (a path over decreasing penalties converges in a few sweeps)."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)  # (n, d), (n,)
    n, d = xs.shape
    mx, my = xs.mean(0), ys.mean()
    xc = xs - mx
    norms = (xc * xc).sum(0) / n                                    # (d,)
    w = np.zeros(d) if start is None else start.copy()
    resid = ys - my - xc @ w                                        # (n,)
    scale = max(float(np.abs(ys - my).max()), 1e-12)
    for _ in range(iters):
        biggest = 0.0
        for j in range(d):
            if norms[j] <= 1e-15:
                w[j] = 0.0
                continue
            old = w[j]
            rho = float(xc[:, j] @ resid) / n + norms[j] * old
            new = np.sign(rho) * max(abs(rho) - alpha, 0.0) / norms[j]
            if new != old:
                resid -= xc[:, j] * (new - old)
                w[j] = new
                biggest = max(biggest, abs(new - old))
        if biggest <= tol * scale:
            break
    return w, float(my - mx @ w)


def alpha_grid(x: torch.Tensor, y: torch.Tensor, n: int = 12) -> list[float]:
    """Penalties from the smallest one that zeroes every weight down to 1/1000 of it, and 0."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    top = float(np.abs((xs - xs.mean(0)).T @ (ys - ys.mean())).max()) / len(ys)
    if top <= 0:
        return [0.0]
    return [top * 10 ** (-3 * i / (n - 1)) for i in range(n)] + [0.0]


def _path(x: np.ndarray, y: np.ndarray, grid: list[float], eps: float = 1e-12
          ) -> list[tuple[np.ndarray, float]]:
    """The lasso (as `lasso` defines it) at each penalty of `grid`, exactly, from its
    homotopy path (LARS with the lasso modification, Efron et al. 2004): starting from w = 0
    at the largest penalty, the active sentences' weights move along the direction that
    lowers their correlations with the residual equally, up to the next penalty where a
    sentence joins (its correlation reaches the penalty) or a weight crosses zero (it
    leaves); the path is linear in the penalty between those knots. Each step is a few
    vectorized products, so a path over hundreds of sentences costs milliseconds where
    coordinate descent took seconds (the two agree to its tolerance: tests). Once as many
    sentences are active as the centred masks have rank, none joins; below the last knot the
    fit interpolates (no penalty: the least-L1 interpolant)."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)  # (n, d), (n,)
    n, d = xs.shape
    mx, my = xs.mean(0), ys.mean()
    xc = xs - mx
    w = np.zeros(d)
    corr = xc.T @ (ys - my) / n                                     # (d,)
    alpha = float(np.abs(corr).max()) if d else 0.0
    floor = min(grid) if grid else 0.0
    room = min(n - 1, d)                                            # the centred masks' rank
    active: list[int] = []
    knots = [(alpha, w.copy())]
    while alpha > floor + eps and room > 0:
        if not active:
            active.append(int(np.argmax(np.abs(corr))))
        at = np.array(active)
        cols = xc[:, at]                                            # (n, active)
        gram = cols.T @ cols / n
        sign = np.sign(corr[at])
        step_dir = np.linalg.lstsq(gram, sign, rcond=None)[0]       # (active,)
        rate = xc.T @ (cols @ step_dir) / n                         # (d,) corr's fall rate
        gamma, enter, leave = alpha - floor, -1, -1
        if len(active) < room:
            free = np.ones(d, dtype=bool)
            free[at] = False
            for side in (1.0, -1.0):
                with np.errstate(divide="ignore", invalid="ignore"):
                    reach = (alpha - side * corr) / (1.0 - side * rate)
                reach[~free | ~np.isfinite(reach) | (reach <= eps)] = np.inf
                k = int(np.argmin(reach))
                if reach[k] < gamma:
                    gamma, enter = float(reach[k]), k
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = -w[at] / step_dir
        cross[~np.isfinite(cross) | (cross <= eps)] = np.inf
        if cross.size and float(cross.min()) < gamma:
            gamma, enter, leave = float(cross.min()), -1, int(at[int(np.argmin(cross))])
        w[at] += gamma * step_dir
        corr -= gamma * rate
        alpha -= gamma
        if leave >= 0:
            active.remove(leave)
            w[leave] = 0.0
        elif enter >= 0:
            active.append(enter)
        knots.append((alpha, w.copy()))
    out = []
    for a in grid:
        weights = knots[-1][1]
        for (hi, w_hi), (lo, w_lo) in zip(knots, knots[1:], strict=False):
            if lo <= a <= hi:
                t = (hi - a) / (hi - lo) if hi > lo else 0.0
                weights = w_hi + t * (w_lo - w_hi)
                break
        else:
            weights = knots[0][1] if a >= knots[0][0] else knots[-1][1]
        out.append((weights, float(my - mx @ weights)))
    return out


def fit_surrogate(masks: torch.Tensor, targets: torch.Tensor, folds: int = 4,
                  seed: int = 0, prior: torch.Tensor | None = None, centred: bool = True
                  ) -> Surrogate:
    """The lasso surrogate of `targets` (ablations,) on `masks` (ablations, sentences), its
    penalty chosen by `folds`-fold cross-validation (mean squared error). With `prior`
    (sentences,), one-pass scores of the sentences, the lasso is the adaptive one (Zou 2006):
    sentence j's penalty is divided by `prior_scale(prior)[j]`, so the sentences one pass
    finds important are shrunk less (fitted as the lasso on columns multiplied by the scale,
    the weights multiplied back), and competes with the ridge centred on the prior
    (`_pick`; `centred=False`: the adaptive lasso alone)."""
    scale = prior_scale(prior) if prior is not None else None
    x = masks.double().numpy() * (scale.numpy() if scale is not None else 1.0)
    y = targets.double().numpy()
    grid = alpha_grid(x, y)
    n = len(y)
    order = np.random.default_rng(seed).permutation(n)
    errors = np.zeros(len(grid))
    held_out = np.zeros((len(grid), n))                              # (penalties, ablations)
    for train, held in fold_splits(order, folds):
        for g, (w, b) in enumerate(_path(x[train], y[train], grid)):
            held_out[g, held] = b + x[held] @ w
            errors[g] += float(((held_out[g, held] - y[held]) ** 2).sum())
    path = _path(x, y, grid)
    # a penalty that leaves no sentence a positive weight names no top sentence (every
    # weight ties at zero or below): those are skipped while a smaller one leaves one
    ranked = [g for g in range(len(grid)) if path[g][0].max() > 0] or list(range(len(grid)))
    best = min(ranked, key=lambda g: (errors[g], -grid[g]))  # ties: sparser
    w, b = path[best]
    weights = torch.from_numpy(w) * (scale if scale is not None else 1.0)
    fitted = Surrogate(weights, b, grid[best], torch.from_numpy(held_out[best]))
    if prior is None or not centred:
        return fitted
    return _pick(fitted, masks.double().numpy(), y, prior.double().numpy(), order, folds)


def fold_splits(order: np.ndarray, folds: int):
    """(train indices, held-out indices) of each of `folds` folds over the ablations in the
    shuffled `order` (every `folds`-th one held out in turn)."""
    n = len(order)
    for i in range(min(folds, n)):
        held = order[i::folds]
        yield np.setdiff1d(np.arange(n), held), held


def out_of_fold(fit_one, x: np.ndarray, y: np.ndarray, order: np.ndarray, folds: int
                ) -> np.ndarray:
    """(ablations,) each mask's prediction by `fit_one(x, y) -> (w, b)` fitted on the folds
    that did not hold it out (`fold_splits`)."""
    held_out = np.zeros(len(y))
    for train, held in fold_splits(order, folds):
        w, b = fit_one(x[train], y[train])
        held_out[held] = b + x[held] @ w
    return held_out


RIDGES = (0.03, 0.1, 0.3, 1.0)   # the prior-centred ridge's penalties (per ablation)


def centred_ridge(x: np.ndarray, y: np.ndarray, prior: np.ndarray, penalty: float
                  ) -> tuple[np.ndarray, float]:
    """w = c prior + d on masks x (n, d), targets y (n,): c >= 0 by least squares on each
    mask's prior sum, then d by ridge (`penalty` n |d|^2) on what c leaves. With few
    ablations d stays small and the one-pass ranking stands, scaled; with many, the data
    overrule it. (w, intercept). `learned.corrected_scores` fits the same form jointly (c
    and d together, a penalty that does not grow with the ablations) for a one-pass method
    corrected by a handful of ablations; this staged fit is the one the ablation surrogate's
    cross-validation was chosen with."""
    mx, my = x.mean(0), y.mean()
    xc, yc = x - mx, y - my                                         # (n, d), (n,)
    z = xc @ prior                                                  # (n,)
    c = max(float(z @ yc) / max(float(z @ z), 1e-12), 0.0)
    rest = yc - c * z
    d = np.linalg.solve(xc.T @ xc + penalty * len(y) * np.eye(x.shape[1]), xc.T @ rest)
    w = c * prior + d
    return w, float(my - mx @ w)


def _pick(lasso_fit: Surrogate, x: np.ndarray, y: np.ndarray, prior: np.ndarray,
          order: np.ndarray, folds: int) -> Surrogate:
    """The adaptive lasso or the prior-centred ridge at one of `RIDGES`, whichever ranks
    the held-out folds' ablations best (their out-of-fold Spearman with the targets, the LDS
    measured on the fit's own masks; ties: the lasso). On short contexts with one decisive
    sentence the lasso wins; on long ones, where 64 ablations hardly pin down as many
    sentences, the ridge's pull towards the one-pass ranking does
    (docs/findings/explain.md, 2026-12-08)."""
    best = (spearman(lasso_fit.out_of_fold, torch.from_numpy(y)) or -2.0, lasso_fit)
    for penalty in RIDGES:
        held_out = out_of_fold(lambda xs, ys, p=penalty: centred_ridge(xs, ys, prior, p),
                               x, y, order, folds)
        rho = spearman(torch.from_numpy(held_out), torch.from_numpy(y))
        if rho is not None and rho > best[0]:
            w, b = centred_ridge(x, y, prior, penalty)
            best = (rho, Surrogate(torch.from_numpy(w), b, None, torch.from_numpy(held_out),
                                   f"prior+ridge({penalty:g})"))
    return best[1]


PRIOR_POWER = 0.5     # the adaptive lasso's exponent on the prior (Zou's gamma)
PRIOR_FLOOR = 0.05    # ... added to |prior| / max |prior|, so no sentence's penalty is infinite


def prior_scale(prior: torch.Tensor) -> torch.Tensor:
    """(sentences,) each sentence's column scale in the adaptive lasso: (|s_j| / max |s| +
    `PRIOR_FLOOR`) ** `PRIOR_POWER`, over its mean (1 on average: the penalty grid keeps its
    meaning). gamma 1/2 and the floor were chosen on held-out design items (16 and 24
    ablations of 8 RAG items of 1k tokens and 12 needle items, none of them benchmarked):
    docs/findings/explain.md."""
    s = prior.double().abs()
    s = s / s.max().clamp_min(1e-12)
    scale = (s + PRIOR_FLOOR) ** PRIOR_POWER
    return scale / scale.mean()


def _ranks(v: torch.Tensor) -> torch.Tensor:
    """Average ranks (ties share the mean of their ranks): (n,) float64."""
    v = v.double()
    order = v.argsort()
    ranks = torch.empty_like(v)
    ranks[order] = torch.arange(len(v), dtype=torch.float64)
    for value in v.unique():
        tied = v == value
        if int(tied.sum()) > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """Spearman's rank correlation; None when either side is constant."""
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = float(ra.norm() * rb.norm())
    return float(ra @ rb) / denom if denom > 0 else None


def random_masks(n: int, sentences: int, keep_prob: float, generator: torch.Generator
                 ) -> torch.Tensor:
    """(n, sentences) {0,1} masks: each sentence kept with probability `keep_prob`."""
    return (torch.rand(n, sentences, generator=generator) < keep_prob).to(torch.int64)


def balanced_masks(n: int, sentences: int, keep_prob: float, generator: torch.Generator
                   ) -> torch.Tensor:
    """(n, sentences) {0,1} masks in which each sentence is kept in exactly round(keep_prob n)
    ablations. With keep_prob 0.5 and n a power of two, the columns are distinct columns of
    the order-n Sylvester-Hadamard matrix (each with a random sign), so every pair is exactly
    orthogonal after centring (least-squares weights are differences of means, with the least
    variance n masks allow); odd-weight column indices are preferred because no two of them
    multiply to a third (a sentence's effect is not aliased with a pair's interaction), and
    the first min(sentences, log2 n) columns are independent over GF(2), so no mask repeats
    where 2^sentences >= n. Otherwise each column is a random arrangement of its kept count.
    """
    if keep_prob == 0.5 and n >= 2 and n & (n - 1) == 0 and sentences < n:
        odd = [c for c in range(1, n) if bin(c).count("1") % 2 == 1]
        even = [c for c in range(1, n) if bin(c).count("1") % 2 == 0]
        pool = odd if len(odd) >= sentences else odd + even
        shuffled = [pool[int(k)] for k in torch.randperm(len(pool), generator=generator)]
        basis: list[int] = []       # GF(2) basis of the columns taken: all n rows distinct
        independent: list[int] = []  # once log2(n) independent columns are in
        for c in shuffled:
            r = c
            for v in basis:
                r = min(r, r ^ v)
            if r and len(basis) < min(sentences, n.bit_length() - 1):
                basis = sorted([*basis, r], reverse=True)   # distinct leading bits
                independent.append(c)
        rest = [c for c in shuffled if c not in independent][:sentences - len(independent)]
        cols = torch.tensor(independent + rest)[torch.randperm(sentences, generator=generator)]
        rows = torch.arange(n)[:, None] & cols[None, :]                   # (n, sentences)
        parity = torch.zeros_like(rows)
        while bool(rows.any()):
            parity ^= rows & 1
            rows = rows >> 1
        flip = torch.randint(0, 2, (sentences,), generator=generator)
        return (parity ^ flip[None, :])[torch.randperm(n, generator=generator)]
    kept = round(keep_prob * n)
    col = (torch.arange(n) < kept).to(torch.int64)
    return torch.stack([col[torch.randperm(n, generator=generator)]
                        for _ in range(sentences)], dim=1)
