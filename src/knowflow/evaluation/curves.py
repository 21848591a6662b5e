"""Curves over finetuning steps, summarized one way everywhere, and the statistics of a score.

A curve (a metric at each evaluation step) is summarized as start, peak, peak step, final,
rise (peak - start) and fall (peak - final); the earliest step wins a tied peak. `named_curve`
prefixes those parts with the metric's name: `cf_acc_start`, `cf_acc_peak`, ...,
`cf_acc_fall`, the keys every summary uses (docs/concepts.md lists the metric names).
`InversionCriterion` says when a counterfactual-accuracy curve inverts; `seed_interval` and
`wilson_interval` are the 95% intervals of a mean over seeds and of a share over items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def curve_summary(steps: Sequence[int], values: Sequence[float]) -> dict:
    """start / peak / peak_step / final / rise / fall of one curve."""
    if len(steps) != len(values) or not values:
        raise ValueError("a curve needs one value per step and at least one step")
    peak = max(range(len(values)), key=lambda i: (values[i], -i))
    return {"start": values[0], "peak": values[peak], "peak_step": steps[peak],
            "final": values[-1], "rise": values[peak] - values[0],
            "fall": values[peak] - values[-1]}


def named_curve(metric: str, steps: Sequence[int], values: Sequence[float]) -> dict:
    """`curve_summary` with keys `<metric>_start`, `<metric>_peak`, ..., `<metric>_fall`."""
    return {f"{metric}_{part}": v for part, v in curve_summary(steps, values).items()}


@dataclass(frozen=True)
class InversionCriterion:
    """When a counterfactual-accuracy curve *inverts* (context-parametric inversion): it
    rises by at least `rise` from its start to its peak, then falls by at least `fall` from
    its peak to the end; a context-only control counts as steady while it falls less than
    `no_fall`. The experiments' thresholds are `THEORY` and `TINY` (experiments.mitigations)."""

    rise: float      # peak minus start, at least
    fall: float      # peak minus final, at least
    no_fall: float   # the context-only control's fall, below

    def inverts(self, rise: float, fall: float) -> bool:
        return rise >= self.rise and fall >= self.fall

    def steady(self, fall: float) -> bool:
        """The control did not fall."""
        return fall < self.no_fall


THEORY = InversionCriterion(rise=0.2, fall=0.15, no_fall=0.05)   # cpi-toy, inversion-smollm2,
#                                                                  and any tracker folder
TINY = InversionCriterion(rise=0.3, fall=0.2, no_fall=0.05)      # inversion-tiny


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


def wilson_interval(share: float, n: int, z: float = 1.96) -> list[float] | None:
    """95% Wilson score interval of a proportion `share` observed on `n` items, [low, high]
    (unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or 1);
    None for n < 1."""
    if n < 1:
        return None
    denom = 1 + z * z / n
    centre = (share + z * z / (2 * n)) / denom
    half = z * (share * (1 - share) / n + z * z / (4 * n * n)) ** 0.5 / denom
    return [max(0.0, centre - half), min(1.0, centre + half)]
