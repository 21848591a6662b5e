"""Context-reliance curves of finetuning runs, drawn from their `metrics.jsonl` records (the
`RelianceTracker`'s): counterfactual accuracy with its peak marked, parametric accuracy,
attention mass on the context, and the training loss, one line per run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from knowflow.io import read_jsonl
from knowflow.report.figures import save, series, subplots
from knowflow.runs import METRICS

_PANELS = (("cf_acc", "counterfactual accuracy (follows context)"),
           ("param_acc", "parametric accuracy (follows memory)"),
           ("attn_context", "attention mass on the context"),
           ("train_loss", "training loss"))


def reliance_figure(curves: Mapping[str, Sequence[dict]], path: Path,
                    title: str = "") -> Path:
    """One line per run in each panel; a marker at each run's peak counterfactual accuracy."""
    fig, axes = subplots(len(_PANELS))
    for (key, label), ax in zip(_PANELS, axes[0], strict=True):
        for name, records in curves.items():
            steps, values = series(list(records), key)
            if not steps:
                continue
            (line,) = ax.plot(steps, values, marker=".", label=name)
            if key == "cf_acc":
                best = max(range(len(values)), key=lambda i: (values[i], -steps[i]))
                ax.plot([steps[best]], [values[best]], "*", ms=12, color=line.get_color())
        ax.set_xlabel("finetuning step")
        ax.set_title(label, fontsize=10)
        if key.endswith("acc"):
            ax.set_ylim(-0.03, 1.03)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return save(fig, path)


def plot_sft(run_dir: Path) -> list[Path]:
    """The figure of one `knowflow sft` run."""
    metrics = Path(run_dir) / METRICS
    if not metrics.exists():
        return []
    return [reliance_figure({"run": read_jsonl(metrics)}, Path(run_dir) / "figures" /
                            "reliance.png")]


def plot_arms(run_dir: Path) -> list[Path]:
    """One reliance figure with a line per arm (records tagged with `arm`)."""
    metrics = Path(run_dir) / METRICS
    if not metrics.exists():
        return []
    curves: dict[str, list[dict]] = {}
    for rec in read_jsonl(metrics):
        curves.setdefault(rec["arm"], []).append(rec)
    return [reliance_figure(curves, Path(run_dir) / "figures" / "reliance.png")]
