"""Figures of a `knowflow eval` run folder, drawn from its summary.json (and, for a sweep of
methods or conditions, its conditions.json: the tradeoff figure of report/tradeoff.py)."""

from __future__ import annotations

from pathlib import Path

from knowflow.report.figures import save, subplots
from knowflow.report.strength import FIGURE as STRENGTH_FIGURE
from knowflow.report.strength import strength_figure
from knowflow.report.tradeoff import tradeoff_from_run
from knowflow.store.readers import read_json
from knowflow.store.run_folder import read_result

FIGURE = "context_vs_memory.png"
METHODS_FIGURE = "methods.png"
_BARS = (("cf_acc", "context's answer", None),
         ("param_acc", "memorized answer", None),
         ("cf_acc", "context's answer | known", "known"))


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
            rows = [summary[suite].get(mode, {}) for suite in suites]
            _bars(ax, [r.get(subset, {}) if subset else r for r in rows], key, k - 1, width,
                  label, hatch="//" if subset else None)
        ax.set_xticks(range(len(suites)), suites, rotation=20, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share of items")
        ax.set_title(f"{mode} scoring", fontsize=10)
    _legend_below(axes[0][-1])
    if title:
        fig.suptitle(title)
    return save(fig, path)


def _bars(ax, rows: list[dict], key: str, offset: float, width: float, label: str,
          hatch: str | None = None) -> None:
    """One bar per row (at x = its index + offset * width) with its 95% interval."""
    xs, ys, lo, hi = [], [], [], []
    for i, row in enumerate(rows):
        if row.get(key) is None:
            continue
        ci = row.get(f"{key}_ci") or [row[key], row[key]]
        xs.append(i + offset * width)
        ys.append(row[key])
        lo.append(row[key] - ci[0])
        hi.append(ci[1] - row[key])
    if xs:
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=label, hatch=hatch, alpha=0.85)


def _legend_below(ax) -> None:
    """The legend under the panel, so it covers no bar or error bar."""
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2,
              frameon=False)


_METHOD_BARS = (("context_share", "follows the context"),
                ("memory_share", "keeps the memorized answer"))


def methods_figure(conditions: dict, path: Path, title: str = "") -> Path | None:
    """Per decoding method, pooled over the suites ("all"), the share of conflicting items
    that follow the context and that keep the memorized answer (95% intervals), one panel per
    scoring mode; None for fewer than two methods."""
    methods = list(conditions)
    modes = [m for m in ("generate", "loglik")
             if any(m in conditions[k].get("all", {}) for k in methods)]
    if len(methods) < 2 or not modes:
        return None
    fig, axes = subplots(len(modes), width=max(4.2, 1.2 * len(methods) + 1.5), height=3.8)
    width = 0.8 / len(_METHOD_BARS)
    for mode, ax in zip(modes, axes[0], strict=True):
        rows = [conditions[m].get("all", {}).get(mode, {}).get("conflicting", {})
                for m in methods]
        for k, (key, label) in enumerate(_METHOD_BARS):
            _bars(ax, rows, key, k - 0.5, width, label)
        ax.set_xticks(range(len(methods)), methods, rotation=20, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share of conflicting items")
        ax.set_title(f"{mode} scoring, all suites", fontsize=10)
    _legend_below(axes[0][-1])
    if title:
        fig.suptitle(title)
    return save(fig, path)


def eval_figures(run_dir: str | Path) -> list[Path]:
    """figures/context_vs_memory.png of an eval run, figures/conflict_strength.png for a graded
    suite (cf-numeric), figures/methods.png for several decoding methods, and
    figures/tradeoff.png when the run swept methods or conditions (its
    conditions.json)."""
    run_dir = Path(run_dir)
    config = read_json(run_dir / "config.json")
    summary = read_result(run_dir, "summary.json")
    title = str(config.get("model", ""))
    drawn = [context_memory_figure(summary, run_dir / "figures" / FIGURE, title=title),
             strength_figure(summary, run_dir / "figures" / STRENGTH_FIGURE, title=title)]
    if (run_dir / "conditions.json").exists():
        conditions = read_result(run_dir, "conditions.json")
        drawn.append(methods_figure(conditions, run_dir / "figures" / METHODS_FIGURE,
                                    title=title))
        drawn.append(tradeoff_from_run(run_dir))
    return [p for p in drawn if p is not None]
