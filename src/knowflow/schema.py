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
