"""The histogram figure of `knowflow curate`: no-context loss and context-criticality of each
example, by kind when the file marks kinds (C, C+S, S), with the filter's cut-off."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from knowflow.report.figures import save, subplots


def curation_figure(scores: Sequence[dict], by: str, cutoff: float | None, path: Path) -> Path:
    fig, axes = subplots(2)
    kinds = sorted({str(s.get("kind")) for s in scores})
    for ax, key, label in ((axes[0][0], "loss_without_context", "response loss without context"),
                           (axes[0][1], "criticality", "criticality (loss without - with)")):
        values = [s[key] for s in scores]
        lo, hi = min(values), max(values)
        bins = [lo + (hi - lo) * i / 30 for i in range(31)] if hi > lo else 10
        for kind in kinds:
            ax.hist([s[key] for s in scores if str(s.get("kind")) == kind], bins=bins,
                    alpha=0.6, label=kind if kind != "None" else "all")
        if cutoff is not None and key == ("loss_without_context" if by == "no_context_loss"
                                          else "criticality"):
            ax.axvline(cutoff, color="k", ls="--", label="drop below")
        ax.set_xlabel(label)
        ax.set_ylabel("examples")
        ax.legend(fontsize=8)
    return save(fig, path)
