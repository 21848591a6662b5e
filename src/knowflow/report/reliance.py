"""Context-reliance curves of finetuning runs, drawn from their `metrics.jsonl` records (the
`RelianceTracker`'s): counterfactual accuracy with its peak marked, parametric accuracy,
attention mass on the context, and the training loss, one line (one colour) per run. Where a
record says on how many items it was measured (`n`), the accuracies carry a shaded 95% Wilson
score interval (`schema.wilson_interval`); attention and loss have none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from knowflow.evaluation.curves import wilson_interval
from knowflow.report.figures import png, series, subplots
from knowflow.store.files import atomic_write_bytes
from knowflow.store.identity import METRICS
from knowflow.store.readers import read_jsonl

_PANELS = (("cf_acc", "counterfactual accuracy (follows context)"),
           ("param_acc", "parametric accuracy (follows memory)"),
           ("attn_context", "attention mass on the context"),
           ("train_loss", "training loss"))


def reliance_figure(curves: Mapping[str, Sequence[dict]], path: Path,
                    title: str = "") -> Path:
    """One line per run in each panel; a marker at each run's peak counterfactual accuracy."""
    return atomic_write_bytes(path, reliance_png(curves, title))


def reliance_png(curves: Mapping[str, Sequence[dict]], title: str = "") -> bytes:
    """`reliance_figure` as PNG bytes (for a page that embeds it without a file)."""
    fig, axes = subplots(len(_PANELS))
    for (key, label), ax in zip(_PANELS, axes[0], strict=True):
        for name, records in curves.items():
            steps, values = series(list(records), key)
            if not steps:
                continue
            (line,) = ax.plot(steps, values, marker=".", label=name)
            band = _band(list(records), key) if key.endswith("acc") else None
            if band:
                ax.fill_between(band[0], band[1], band[2], color=line.get_color(), alpha=0.18,
                                linewidth=0)
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
    return png(fig)


def _band(records: list[dict], key: str) -> tuple[list, list, list] | None:
    """(steps, lows, highs) of the Wilson intervals of `key`, for the records that give `n`;
    None when none does."""
    rows = [(r["step"], wilson_interval(r[key], int(r["n"]))) for r in records
            if r.get(key) is not None and isinstance(r.get("n"), int) and r["n"] > 0]
    if not rows:
        return None
    return [s for s, _ in rows], [iv[0] for _, iv in rows], [iv[1] for _, iv in rows]


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
