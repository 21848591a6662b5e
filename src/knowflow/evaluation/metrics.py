"""Counterfactual/parametric accuracy, memorization ratio, and bootstrap intervals.

Generation: counterfactual accuracy is the share of outputs that mention the context's answer,
parametric accuracy the share that mention the memorized answer; the two are scored
independently (an output may mention both or neither). Log-likelihood: an item counts for the
answer whose continuation is more likely (summed log-probability; `_norm` variants divide by
the token count), and the memorization ratio is the mean of p_o / (p_o + p_s), p_o the
probability of the memorized answer and p_s that of the context's. Every metric carries a 95%
percentile-bootstrap interval over items. The "known" block repeats the metrics on the items
whose memorized answer the model produces without the context. Items whose two answers are
one for the scoring (`equal_answers`: under generation, equal after normalisation, as " End."
and " end." are; under log-likelihood, the same continuation) are left out of that scoring's
metrics, and `n_skipped_equal_answers` counts them; `n` is the number of items scored.
Under generation the summary also gives the share of each answer class (`outcome_context`,
..., `outcome_cut_off`; `outcomes.py`) with Wilson intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from knowflow.evaluation.outcomes import outcome_shares


def bootstrap_ci(values: Sequence[float], n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> list[float] | None:
    """Percentile bootstrap interval of the mean; None for no values."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return None
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)  # (n_boot,)
    tail = (1 - level) / 2
    return [float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))]


def memorization_ratio(logp_parametric: float, logp_counterfactual: float) -> float:
    """p_o / (p_o + p_s) from log-probabilities, computed stably."""
    d = logp_counterfactual - logp_parametric
    return 1.0 / (1.0 + math.exp(d)) if d < 700 else 0.0


def _block(columns: dict[str, list[float]], n_boot: int, seed: int) -> dict:
    n = len(next(iter(columns.values()))) if columns else 0
    out: dict = {"n": n}
    for name, vals in columns.items():
        out[name] = float(np.mean(vals)) if vals else None
    for name, vals in columns.items():
        out[f"{name}_ci"] = bootstrap_ci(vals, n_boot, seed)
    return out


def summarize(records: list[dict], mode: str, n_boot: int = 1000, seed: int = 0) -> dict:
    """Metrics of one scoring mode ("generate" or "loglik") over per-item records."""
    def columns(recs: list[dict]) -> dict[str, list[float]]:
        scores = [r[mode] for r in recs]
        if mode == "generate":
            out = {"cf_acc": [float(s["counterfactual"]) for s in scores],
                   "param_acc": [float(s["parametric"]) for s in scores]}
            if all("garbled" in s for s in scores):  # evaluation.garbled
                out["garbled_share"] = [float(s["garbled"]) for s in scores]
            return out
        out = {"cf_acc": [float(s["choice"] == "counterfactual")
                                           for s in scores],
               "param_acc": [float(s["choice"] == "parametric") for s in scores],
               "memorization_ratio": [s["memorization_ratio"] for s in scores]}
        if all("choice_norm" in s for s in scores):  # not in lm-eval's samples
            out["cf_acc_norm"] = [float(s["choice_norm"] == "counterfactual")
                                                   for s in scores]
            out["param_acc_norm"] = [float(s["choice_norm"] == "parametric")
                                               for s in scores]
        return out

    skipped = sum(bool(r[mode].get("equal_answers")) for r in records)
    records = [r for r in records if not r[mode].get("equal_answers")]
    out = _block(columns(records), n_boot, seed)
    if mode == "generate" and records and all("outcome" in r[mode] for r in records):
        out.update(outcome_shares([r[mode]["outcome"] for r in records]))  # Wilson intervals
    if skipped:
        out["n_skipped_equal_answers"] = skipped
    flags = [r.get("known") for r in records]
    if records and all(f is not None for f in flags):
        known = [r for r in records if r["known"]]
        out["known_share"] = len(known) / len(records)
        out["known_share_ci"] = bootstrap_ci([float(f) for f in flags], n_boot, seed)
        out["known"] = _block(columns(known), n_boot, seed) if known else {"n": 0}
    return out
