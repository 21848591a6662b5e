"""The figures of a probe run folder (`knowflow probe <kind>` or `knowflow.probe(...,
out_dir=...)`), drawn from the probe's summary under `run_dir/figures/<kind>.png`."""

from __future__ import annotations

from pathlib import Path

from knowflow.report.head_figures import head_effects_figure, head_projection_figure
from knowflow.report.probes import attention_mass_figure, knockout_figure, projection_figure


def probe_figures(kind: str, summary: dict, out: Path, model: str) -> list[Path]:
    """The figure of probe `kind` (none for a run without examples)."""
    figures = Path(out) / "figures"
    if not summary.get("n_examples", 1) and kind != "attention":
        return []
    if kind == "knockout":
        return [knockout_figure(summary, figures / "knockout.png",
                                title=f"attention knockout from the last position ({model})")]
    if kind == "sublayer":
        return [knockout_figure(summary, figures / "sublayer.png",
                                title=f"sublayer knockout ({model})")]
    if kind == "project":
        return [projection_figure(summary, figures / "projection.png", title=model)] \
            if summary["n_examples"] else []
    if kind == "heads":
        return [head_effects_figure(summary, figures / "heads.png", title=model)]
    if kind == "head-project":
        return [head_projection_figure(summary, figures / "head-project.png", title=model)]
    if summary["mean_mass"]:
        return [attention_mass_figure(summary["mean_mass"], figures / "attention_mass.png",
                                      title=f"attention mass on the context ({model})")]
    return []
