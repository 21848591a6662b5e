"""Figures of a `knowflow eval` run folder, drawn from its summary.json (and, for a sweep of
methods or conditions, its conditions.json: the tradeoff figure of report/tradeoff.py)."""

from __future__ import annotations

from pathlib import Path

from knowflow.io import read_json
from knowflow.report.figures import save, subplots
from knowflow.report.strength import FIGURE as STRENGTH_FIGURE
from knowflow.report.strength import strength_figure
from knowflow.report.tradeoff import tradeoff_from_run

FIGURE = "context_vs_memory.png"
_BARS = (("counterfactual_accuracy", "context's answer", None),
         ("parametric_accuracy", "memorized answer", None),
         ("counterfactual_accuracy", "context's answer | known", "known"))


def context_memory_figure(summary: dict, path: Path, title: str = "") -> Path | None:
    """Per scoring mode, per suite: the share of items answered with the context's answer and
    with the memorized answer (95% CIs), and the context's share on the facts the model knows.
    None when the summary has no suite with metrics."""
    modes = [m for m in ("generate", "loglik")
             if any(isinstance(s, dict) and m in s for s in summary.values())]
    if not modes:
        return None
    suites = list(summary)
    fig, axes = subplots(len(modes), width=max(4.2, 1.3 * len(suites) + 1.5), height=3.6)
    width = 0.8 / len(_BARS)
    for mode, ax in zip(modes, axes[0], strict=True):
        for k, (key, label, subset) in enumerate(_BARS):
            xs, ys, lo, hi = [], [], [], []
            for i, suite in enumerate(suites):
                row = summary[suite].get(mode, {})
                row = row.get(subset, {}) if subset else row
                if row.get(key) is None:
                    continue
                ci = row.get(f"{key}_ci") or [row[key], row[key]]
                xs.append(i + (k - 1) * width)
                ys.append(row[key])
                lo.append(row[key] - ci[0])
                hi.append(ci[1] - row[key])
            if xs:
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=label,
                       hatch="//" if subset else None, alpha=0.85)
        ax.set_xticks(range(len(suites)), suites, rotation=20, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share of items")
        ax.set_title(f"{mode} scoring", fontsize=10)
    axes[0][-1].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save(fig, path)


def eval_figures(run_dir: str | Path) -> list[Path]:
    """figures/context_vs_memory.png of an eval run, figures/conflict_strength.png for a graded
    suite (cf-numeric), and figures/tradeoff.png when the run swept methods or conditions (its
    conditions.json)."""
    run_dir = Path(run_dir)
    config = read_json(run_dir / "config.json")
    summary = read_json(run_dir / "summary.json")
    title = str(config.get("model", ""))
    drawn = [context_memory_figure(summary, run_dir / "figures" / FIGURE, title=title),
             strength_figure(summary, run_dir / "figures" / STRENGTH_FIGURE, title=title)]
    if (run_dir / "conditions.json").exists():
        drawn.append(tradeoff_from_run(run_dir))
    return [p for p in drawn if p is not None]
