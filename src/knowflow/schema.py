"""The shared vocabulary of knowflow's experiments, trackers and reports.

Example kinds (Goyal et al. 2025): `C` (the answer is only in the context), `C+S` (a
memorized subject; the context agrees with memory), `S` (no context; memory only) and `CF`
(a memorized subject; the context contradicts memory: the counterfactual items that measure
context reliance, and the augmentation examples that train it). A curve over finetuning steps
is summarized one way everywhere: start, peak, peak step, final, rise (peak - start) and fall
(peak - final); the earliest step wins a tied peak. `named_curve` prefixes those parts with the
metric's name: `cf_acc_start`, `cf_acc_peak`, ..., `cf_acc_fall`.

Metric names, the same in every experiment, the tracker and the reports (one record per
evaluation step, keyed by `step`):
- `cf_acc` / `param_acc`: counterfactual accuracy (the answer follows the context) and
  parametric accuracy (it follows memory) on the counterfactual items; `_gen` suffix: scored by
  generation instead of log-likelihood.
- `mc`: the theory model's M_C, the mean probability of the context's answer on the
  counterfactual test set (a probability, not an accuracy; cpi-toy's headline curve).
- `c_acc`, `cs_acc`, `recall_acc`: accuracy on held-out C and C+S items and no-context recall.
- `attn_context` / `attn_subject` (/ `attn_relation`): attention mass on the context and on the
  subject (one value: the mean over layers and heads; `_layers`: one per layer, `_heads`: per
  layer and head); `_<kind>` or `_test` suffix: on that kind's training
  examples or on the test items; shortened to `attn_ctx` / `attn_subj` in summaries.
- `loss_<kind>`, `grad_ctx_<kind>`, `n_dropped_<kind>`, `value_conf_<kind>`, `indist_<kind>`:
  a per-kind quantity, with `<kind>` one of `KINDS` (e.g. `loss_C+S`); without the suffix, over
  all kinds.
A summary of a curve is `<metric>_<part>` (`named_curve`); a value at one point is
`<metric>_start` / `<metric>_final` / `<metric>_at_<event>` (e.g. `attn_ctx_at_mc_peak`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from knowflow.config import require

KINDS = ("C", "C+S", "S", "CF")


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
TINY = InversionCriterion(rise=0.3, fall=0.2, no_fall=0.05)      # inversion-tiny (issue 12)


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


MAX_MIXTURE = 1_000_000  # rows of a generated mixture (the built-in one makes 40,000 in 0.8 s)


@dataclass(frozen=True)
class MixtureShares:
    """A finetuning mixture, one concept for every experiment that finetunes on one: `size`
    examples split into the kinds C, C+S and S by the shares `c`, `cs` and `s` (which sum to
    1). The tiny world's `Mixture` and the instruction `MixtureConfig` extend it with their own
    fields; the theory model (`cpi-toy`) counts its point sets instead."""

    size: int = 800
    c: float = 0.25
    cs: float = 0.5
    s: float = 0.25

    def validate(self, prefix: str = "mixture.") -> None:
        require(self.size >= 1, f"{prefix}size", "must be at least 1")
        require(self.size <= MAX_MIXTURE, f"{prefix}size",
                f"must be at most {MAX_MIXTURE}, got {self.size}")
        for name in ("c", "cs", "s"):
            value = getattr(self, name)
            require(0 <= value <= 1, f"{prefix}{name}", f"a share must lie in [0, 1], got {value}")
        total = self.c + self.cs + self.s
        require(abs(total - 1) <= 1e-6, f"{prefix}c",
                f"the shares c + cs + s sum to {total:g}, not 1; make them sum to 1")
