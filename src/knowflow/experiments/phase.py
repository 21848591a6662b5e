"""Phase diagrams of the inversion: where does counterfactual accuracy fall?

A phase study sweeps the share of C+S points in the finetuning mixture (the rest are C points)
against the reliability of the context skill (delta_C in the theory model, the lookup
reliability of pretraining in the tiny transformer), finetunes every cell on several seeds
and records the fall of the headline curve (peak minus final, seed mean). The theory predicts
a fall where C+S points are many and the context is trusted less than memory; `agreement`
compares two diagrams cell by cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from knowflow.config import require
from knowflow.evaluation.curves import curve_summary


@dataclass(frozen=True)
class PhaseConfig:
    cs_shares: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 0.9)
    reliabilities: tuple[float, ...] = (0.5, 0.7, 0.9)
    seeds: tuple[int, ...] = (0, 1, 2)
    threshold: float = 0.1  # a cell inverts when its seed-mean fall reaches this
    toy_steps: int | None = None  # finetuning steps of the theory model (None: cpi-toy's)

    def validate(self, prefix: str = "phase.") -> None:
        require(len(self.cs_shares) > 0, f"{prefix}cs_shares", "choose at least one share")
        for x in self.cs_shares:
            require(0 <= x < 1, f"{prefix}cs_shares", f"{x} must lie in [0, 1)")
        require(len(self.reliabilities) > 0, f"{prefix}reliabilities",
                "choose at least one value")
        for x in self.reliabilities:
            require(0 < x < 1, f"{prefix}reliabilities", f"{x} must lie in (0, 1)")
        require(len(self.seeds) > 0, f"{prefix}seeds", "choose at least one seed")
        require(self.threshold > 0, f"{prefix}threshold", "must be positive")
        require(self.toy_steps is None or self.toy_steps >= 1, f"{prefix}toy_steps",
                "must be at least 1")


def cells(cfg: PhaseConfig) -> list[tuple[float, float, int]]:
    """Every (C+S share, reliability, seed) of the study."""
    return [(x, r, s) for r in cfg.reliabilities for x in cfg.cs_shares for s in cfg.seeds]


def cell_key(share: float, reliability: float, seed: int) -> str:
    return f"cs{share:g}-rel{reliability:g}-seed{seed}"


def phase_summary(curves: Mapping[tuple[float, float, int], Sequence[float]],
                  steps: Sequence[int], cfg: PhaseConfig, metric: str) -> list[dict]:
    """One row per (share, reliability) of the curves of `metric` (`cf_acc`, or `mc` for
    the theory model): its rise and fall, each the mean of the seeds' own (`<metric>_rise`,
    `<metric>_fall`), the seeds' falls, and whether the cell inverts (fall >= threshold)."""
    rows = []
    for r in cfg.reliabilities:
        for x in cfg.cs_shares:
            own = [curve_summary(steps, curves[x, r, s]) for s in cfg.seeds]
            fall = sum(c["fall"] for c in own) / len(own)
            rows.append({"cs_share": x, "reliability": r, "metric": metric,
                         f"{metric}_fall": fall,
                         f"{metric}_rise": sum(c["rise"] for c in own) / len(own),
                         f"{metric}_fall_seeds": [c["fall"] for c in own],
                         "inverts": fall >= cfg.threshold})
    return rows


def cell_fall(row: dict) -> float:
    """A phase cell's fall, whatever its curve's metric."""
    return row[f"{row['metric']}_fall"]


def diagram_agreement(a: Sequence[dict], b: Sequence[dict]) -> dict:
    """Cells where two diagrams agree (both invert or both do not), and where they differ."""
    index = {(row["cs_share"], row["reliability"]): row for row in b}
    same, differ = 0, []
    for row in a:
        other = index.get((row["cs_share"], row["reliability"]))
        if other is None:
            continue
        if row["inverts"] == other["inverts"]:
            same += 1
        else:
            differ.append({"cs_share": row["cs_share"], "reliability": row["reliability"],
                           "first_inverts": row["inverts"], "second_inverts": other["inverts"]})
    return {"cells": same + len(differ), "agree": same, "disagree": differ}
