"""The sensitivity-robustness tradeoff of decoding methods, drawn from an eval's
`conditions.json`: one point per method (and per CAD alpha), pooled over the suites, with 95%
bootstrap intervals on both axes; one panel per scoring mode. Up and right is better: following
a conflicting context (sensitivity) while keeping the memorized answer under an irrelevant one
(robustness)."""

from __future__ import annotations

from pathlib import Path

from knowflow.evaluation.conditions import ALL, condition_summary
from knowflow.report.figures import save, subplots
from knowflow.store.files import atomic_write_json
from knowflow.store.readers import read_jsonl
from knowflow.store.run_folder import read_result

FIGURE = "tradeoff.png"


def _points(summary: dict, mode: str, suite: str) -> list[tuple[str, dict]]:
    out = []
    for label, suites in summary.items():
        row = suites.get(suite, {}).get(mode, {})
        if row.get("sensitivity") is not None and row.get("robustness") is not None:
            out.append((label, row))
    return out


def tradeoff_figure(summary: dict, path: Path, suite: str = "all", title: str = "") -> Path | None:
    """Sensitivity against robustness per method; None when no method has both numbers
    (the eval ran without the conflicting or the irrelevant condition)."""
    modes = [m for m in ("generate", "loglik") if _points(summary, m, suite)]
    if not modes:
        return None
    fig, axes = subplots(len(modes), width=5.0, height=4.2)
    for mode, ax in zip(modes, axes[0], strict=True):
        points = _points(summary, mode, suite)
        cad = [(lab, r) for lab, r in points if lab.startswith("cad(") and ",b=" not in lab]
        if len(cad) > 1:  # the alpha sweep (without --beta's constraint) as one line
            cad.sort(key=lambda p: float(p[0][len("cad(a="):-1]))
            ax.plot([r["robustness"] for _, r in cad], [r["sensitivity"] for _, r in cad],
                    "-", color="0.6", lw=1, zorder=1)
        for label, row in points:
            x, y = row["robustness"], row["sensitivity"]
            xci, yci = row.get("robustness_ci") or [x, x], row.get("sensitivity_ci") or [y, y]
            ax.errorbar([x], [y], xerr=[[x - xci[0]], [xci[1] - x]],
                        yerr=[[y - yci[0]], [yci[1] - y]], fmt="o", capsize=3, label=label,
                        zorder=2)
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("robustness (keeps memory under an irrelevant context)")
        ax.set_ylabel("sensitivity (follows a conflicting context)")
        ax.set_title(f"{mode} scoring, {suite}", fontsize=10)
    axes[0][-1].legend(fontsize=7, loc="lower left")
    if title:
        fig.suptitle(title)
    return save(fig, path)


def tradeoff_from_run(run_dir: str | Path) -> Path | None:
    """figures/tradeoff.png of an eval run folder, from its conditions.json."""
    run_dir = Path(run_dir)
    return tradeoff_figure(read_result(run_dir, "conditions.json"),
                           run_dir / "figures" / FIGURE)


_SCORES = {"generate": ("counterfactual", "parametric", "garbled", "equal_answers", "outcome"),
           "loglik": ("choice", "choice_norm", "memorization_ratio", "equal_answers")}


def pool_runs(run_dirs: list[str | Path], out_dir: str | Path, n_boot: int = 1000,
              seed: int = 0) -> dict:
    """One conditions.json (each suite, and "all" pooled over every run's items) and its
    tradeoff figure, in `out_dir`, from the conditions.jsonl of several eval runs (e.g. one
    process per suite)."""
    groups: dict[str, dict[str, dict[str, list[dict]]]] = {}  # method -> suite -> condition
    modes: list[str] = []
    for run_dir in run_dirs:
        for flat in read_jsonl(Path(run_dir) / "conditions.jsonl"):
            rec = {mode: {k: flat[f"{mode}_{k}"] for k in keys if f"{mode}_{k}" in flat}
                   for mode, keys in _SCORES.items() if f"{mode}_{keys[0]}" in flat}
            modes += [m for m in rec if m not in modes]
            by_suite = groups.setdefault(flat["method"], {})
            for suite in (flat["suite"], ALL):
                by_suite.setdefault(suite, {}).setdefault(flat["condition"], []).append(rec)
    summary = {method: {suite: {mode: condition_summary(suites[suite], mode, n_boot, seed)
                                for mode in modes}
                        for suite in [*(s for s in suites if s != ALL), ALL]}
               for method, suites in groups.items()}
    out = Path(out_dir)
    atomic_write_json(out / "conditions.json", summary)
    tradeoff_figure(summary, out / "figures" / FIGURE)
    return summary
