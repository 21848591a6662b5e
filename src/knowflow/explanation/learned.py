"""One-pass learned attribution (`--attribution learned`): per-head features of each sentence
weighted by head weights fitted once per model on ablation effects (AT2's idea, Cohen-Wang
et al. 2025, with other features).

Features (`features.py`). The default kind, `soft`, is the gradient of the explained span's
log-probability with respect to each sentence's keep weight in each head, at a keep weight
of 1/2 for every sentence: one forward and one backward pass over the prompt and the span.
Summed over heads it already estimates each sentence's average effect over random half
ablations, which is what the ablation surrogate estimates; the fit reweighs heads. The
other kinds (AT2's attention, the direct effect, the first-order total effect at the full
context) are one forward pass or one backward pass too. A context of n sentences gives A,
(n, kinds * layers * heads).

Scores. Sentence j's attribution is A[j] . theta, one weight per head and kind; theta is
fitted once per model (`fit_head_weights`, `knowflow explain fit`) and saved with its
provenance (`estimator.py`). Applying it costs the features' pass and a matrix-vector
product.

Fit. A surrogate that is linear in the kept sentences predicts the answer's log-probability
under an ablation mask x (sentences,) as b + x . (A theta) = b + (x A) . theta: linear in
theta. So over the training contexts' ablations (masks X_i, (ablations, n_i); log-probs y_i)
theta solves one ridge regression of the centred, per-context standardised y_i on the centred
rows of X_i A_i. AT2 fits the same model by gradient descent on a correlation loss; the
closed form needs no learning rate or epochs, is deterministic, and takes well under a second
for thousands of ablations. The ridge penalty is chosen on held-out training contexts by their
LDS (Spearman of predicted and actual log-probabilities on their ablations), the fit quality
saved with the estimator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from knowflow.data.facts import ConflictItem
from knowflow.explanation.attribution import (
    Attribution,
    ablation_masks,
    item_generator,
    score_masks,
    topk_drops,
)
from knowflow.explanation.features import antithetic_masks, source_features
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.splitter import Sentence
from knowflow.explanation.surrogate import spearman
from knowflow.lens.shared import SharedPrompt

CORRECTION_STRENGTH = 1.0
RIDGE_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1e3, 1e4)
DEFAULT_KINDS = ("soft",)
SIGNED = ("direct", "total", "soft")


def sentence_features(model, prompt_ids: Sequence[int], answer_ids: Sequence[int],
                      spans: Sequence[Sequence[int]], kinds: Sequence[str] = DEFAULT_KINDS,
                      masks: torch.Tensor | None = None, shared: SharedPrompt | None = None
                      ) -> torch.Tensor:
    """(sentences, len(kinds) * layers * heads): the kinds' features (`features.py`) side by
    side, from one forward pass (`soft` at `masks`' points, if given; its context pass from
    `shared`'s keys and values where given)."""
    got = source_features(model, prompt_ids, answer_ids, spans, kinds, masks, shared)
    return torch.cat([got[k] for k in kinds], 1)


def prior_weights(kinds: Sequence[str], n_heads: int) -> torch.Tensor:
    """(len(kinds) * n_heads,) the weights a fit shrinks towards: 1 for every head's signed
    effect, direct, total or soft (their sum is the span's first-order log-probability
    change through those paths), 0 for the unsigned kinds."""
    return torch.cat([torch.full((n_heads,), 1.0 if k in SIGNED else 0.0,
                                 dtype=torch.float64) for k in kinds])


def learned_scores(features: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(sentences,) attributions: features (sentences, F) times head weights (F,)."""
    return features.double() @ weights.double()


def corrected_scores(scores: torch.Tensor, masks: torch.Tensor, targets: torch.Tensor,
                     strength: float = CORRECTION_STRENGTH) -> torch.Tensor:
    """(sentences,) the learned scores corrected by a few scored ablations: w = c s + d
    minimising |y - b - X w|^2 + strength * |d|^2 over the intercept b, the scale c and
    the per-sentence corrections d (c >= 0), for the m masks X (m, sentences) and the answer's
    log-probabilities y under them (m,); s is scaled to max |s| = 1 first. The penalty does
    not grow with m: a few masks move the learned scores a little, many masks give the
    unpenalised linear surrogate. (The ablation surrogate's `surrogate.centred_ridge` fits
    the same form in two stages.)"""
    m, n = masks.shape
    s = scores.double() / scores.double().abs().max().clamp_min(1e-12)          # (n,)
    x = masks.double()                                                            # (m, n)
    design = torch.cat([torch.ones(m, 1, dtype=torch.float64), (x @ s)[:, None], x], 1)
    penalty = torch.diag(torch.tensor([0.0, 0.0] + [strength] * n, dtype=torch.float64))
    gram = design.T @ design + penalty + 1e-9 * torch.eye(n + 2, dtype=torch.float64)
    beta = torch.linalg.solve(gram, design.T @ targets.double())                 # (2 + n,)
    if beta[1] < 0:          # a few noisy masks must not flip the learned ranking: c >= 0
        keep = [0] + list(range(2, n + 2))
        sub = gram[keep][:, keep]
        beta = torch.zeros(n + 2, dtype=torch.float64)
        beta[keep] = torch.linalg.solve(sub, (design.T @ targets.double())[keep])
    return beta[1] * s + beta[2:]


def top_leave_one_out(model, tokenizer, item: ConflictItem, sentences: Sequence[Sentence],
                      scores: torch.Tensor, k: int, continuation: str, cfg: ExplainConfig,
                      lead: str = "", logprob_full: float | None = None) -> torch.Tensor:
    """(sentences,) the learned scores' top `k` sentences scored exactly, the rest 0: each
    top sentence's weight is the fall of the span's log-probability when it alone is removed
    (leave-one-out), from k scored ablations (k + 1 without `logprob_full`). They share one
    KV cache up to the first removed sentence (`score_masks` runs the rows' common prefix
    once), so each costs the tokens after that point only."""
    n = len(sentences)
    top = sorted(range(n), key=lambda j: -float(scores[j]))[:k]
    masks = torch.ones(len(top) + (logprob_full is None), n, dtype=torch.int64)  # (rows, n)
    for r, j in enumerate(top):
        masks[r, j] = 0
    got = score_masks(model, tokenizer, item, sentences, masks, continuation, cfg, lead)
    full = float(got[-1]) if logprob_full is None else logprob_full
    out = torch.zeros(n, dtype=torch.float64)
    for r, j in enumerate(top):
        out[j] = full - float(got[r])
    return out


@dataclass(frozen=True)
class FitExample:
    """One training context: its features and the answer's log-probability under ablations."""

    features: torch.Tensor      # (sentences, F)
    masks: torch.Tensor         # (ablations, sentences) {0, 1}
    targets: torch.Tensor       # (ablations,)
    prompt_ids: tuple[int, ...] = ()              # what the features were computed from:
    answer_ids: tuple[int, ...] = ()              # other features (or another method's)
    spans: tuple[tuple[int, ...], ...] = ()       # can be computed again without ablations


@dataclass(frozen=True)
class HeadFit:
    weights: torch.Tensor       # (F,) one weight per head
    ridge: float                # the penalty chosen on held-out contexts
    heldout_lds: float | None   # mean LDS of held-out contexts at that penalty
    train_lds: float | None     # mean LDS of the training contexts


def _design(ex: FitExample) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows (ablations, F), targets (ablations,)): centred, scaled by the targets' spread;
    None for a context whose ablations change nothing."""
    z = (ex.masks.double() @ ex.features.double()).numpy()                # (ablations, F)
    y = ex.targets.double().numpy()
    spread = y.std()
    if spread < 1e-9:
        return None
    return (z - z.mean(0)) / spread, (y - y.mean()) / spread


def _solve(examples: Sequence[FitExample], ridge: float, prior: torch.Tensor | None = None
           ) -> np.ndarray:
    """argmin |y - Z w|^2 + ridge * scale * |w - prior|^2 over the stacked designs."""
    parts = [d for d in map(_design, examples) if d is not None]
    if not parts:
        raise ValueError("no training context's ablations change its answer")
    z = np.concatenate([p[0] for p in parts])                               # (rows, F)
    y = np.concatenate([p[1] for p in parts])
    w0 = np.zeros(z.shape[1]) if prior is None else prior.double().numpy()   # (F,)
    scale = max(float((z * z).sum(0).mean()), 1e-12)       # the penalty is relative to it
    return np.linalg.solve(z.T @ z + ridge * scale * np.eye(z.shape[1]),
                           z.T @ y + ridge * scale * w0)


def mean_lds(examples: Sequence[FitExample], weights: torch.Tensor) -> float | None:
    """The mean LDS of the learned scores over the examples' ablations."""
    values = [spearman(ex.masks.double() @ learned_scores(ex.features, weights), ex.targets)
              for ex in examples]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def fit_head_weights(examples: Sequence[FitExample], heldout: Sequence[FitExample] = (),
                     grid: Sequence[float] = RIDGE_GRID, prior: torch.Tensor | None = None
                     ) -> HeadFit:
    """Head weights from training contexts (see the module docstring), shrunk towards
    `prior` (default 0); the ridge penalty maximises the held-out contexts' mean LDS
    (without held-out contexts: the smallest)."""
    best = (grid[0], None)
    if heldout:
        scored = [(r, mean_lds(heldout, torch.from_numpy(_solve(examples, r, prior))))
                  for r in grid]
        best = max(scored, key=lambda t: -1.0 if t[1] is None else t[1])
    weights = torch.from_numpy(_solve(examples, best[0], prior))
    return HeadFit(weights, best[0], best[1], mean_lds(examples, weights))


def learned_attribute(model, tokenizer, item: ConflictItem, sentences: Sequence[Sentence],
                      prompt_ids: Sequence[int], continuation: str, logprob_full: float,
                      spans: Sequence[Sequence[int]], weights: torch.Tensor,
                      cfg: ExplainConfig, lead: str = "",
                      kinds: Sequence[str] = DEFAULT_KINDS, label: str = "learned",
                      shared: SharedPrompt | None = None) -> Attribution:
    """The learned attribution of one answer (one forward pass; with
    `cfg.learned_ablations`, that many scored ablations correct it), with the same checks as
    the ablation's: the LDS on `cfg.holdout` held-out ablations (the same masks the ablation
    attribution holds out) and the top-k drops. `prompt_ids` end with `lead`; `label` names
    the method in the record (learned, or gradient for unit weights). `shared`: the item's
    prompt, run once (`lens.shared`): the features' context pass and every ablation start
    from its keys and values."""
    answer_ids = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    points = gradient_masks(len(sentences), cfg, item.id + item.context)
    feats = sentence_features(model, prompt_ids, answer_ids, spans, kinds,
                              points, shared)                           # (sentences, F)
    scores = learned_scores(feats, weights)                             # (sentences,)
    fit, held = ablation_masks(len(sentences), cfg, item.id + item.context)
    few = fit[:cfg.learned_ablations]                        # (learned_ablations, sentences)
    if len(few):
        scores = corrected_scores(scores, few, score_masks(model, tokenizer, item, sentences,
                                                           few, continuation, cfg, lead,
                                                           shared=shared))
    keep = held if len(held) > 1 else None
    order, drops, actual = topk_drops(model, tokenizer, item, sentences, scores, continuation,
                                      logprob_full, cfg, lead, shared, keep)
    lds = spearman(held.double() @ scores, actual) if keep is not None else None
    if points is not None:
        label = f"{label}@{len(points)}"
    return Attribution([float(w) for w in scores], None, None, order[0], lds, drops,
                       len(few) + len(held) + len(drops),
                       f"{label}+{len(few)}" if len(few) else label,
                       lds_on="holdout" if keep is not None else None)


def gradient_masks(n_sentences: int, cfg: ExplainConfig, key: str) -> torch.Tensor | None:
    """(cfg.gradient_masks, sentences) antithetic half masks at which `soft` is averaged,
    drawn from a generator seeded by the config's seed and the item's key (apart from the
    ablation masks'); None for the one point at keep 1/2."""
    if not cfg.gradient_masks:
        return None
    return antithetic_masks(cfg.gradient_masks, n_sentences,
                            item_generator(cfg, f"gradient:{key}"))
