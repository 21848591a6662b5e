"""The shared vocabulary of knowflow's experiments, trackers and reports.

Example kinds (Goyal et al. 2025): `C` (the answer is only in the context), `C+S` (a
memorized subject; the context agrees with memory), `S` (no context; memory only) and `CF`
(a memorized subject; the context contradicts memory: the counterfactual items that measure
context reliance, and the augmentation examples that train it). A curve over finetuning steps
is summarized one way everywhere: start, peak, peak step, final, rise (peak - start) and fall
(peak - final); the earliest step wins a tied peak.
"""

from __future__ import annotations

from collections.abc import Sequence

KINDS = ("C", "C+S", "S", "CF")


def curve_summary(steps: Sequence[int], values: Sequence[float]) -> dict:
    """start / peak / peak_step / final / rise / fall of one curve."""
    if len(steps) != len(values) or not values:
        raise ValueError("a curve needs one value per step and at least one step")
    peak = max(range(len(values)), key=lambda i: (values[i], -i))
    return {"start": values[0], "peak": values[peak], "peak_step": steps[peak],
            "final": values[-1], "rise": values[peak] - values[0],
            "fall": values[peak] - values[-1]}


# Student t quantiles t_{0.975, df} for df = 1..30 (beyond: the normal 1.96)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def seed_interval(values: Sequence[float]) -> list[float] | None:
    """95% t-interval of the mean over seeds, [low, high]; None for fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / n ** 0.5
    return [mean - half, mean + half]
