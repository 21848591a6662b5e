"""Figures of `inversion-injected`, drawn from `metrics.jsonl` (records tagged with `arm`,
`seed` and `extra_epochs`): per arm, the seed-mean counterfactual accuracy under both scorings,
held-out C and C+S accuracy and recall of the injected facts; and `mixed` at each memory
strength."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from knowflow.report.figures import save, subplots
from knowflow.store.identity import METRICS
from knowflow.store.readers import read_jsonl

PANELS = (("cf_acc", "counterfactual acc. (log-lik.)"), ("cf_acc_gen", "counterfactual acc. "
          "(generation)"), ("c_acc_gen", "held-out C acc. (gen.)"),
          ("cs_acc_gen", "held-out C+S acc. (gen.)"), ("recall_acc", "recall, no context"))


def _mean_curves(records: list[dict], key: str) -> dict[tuple, tuple[list, list]]:
    """(arm, extra_epochs) -> (steps, seed-mean of `key`)."""
    acc: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get(key) is not None:
            acc[r["arm"], r.get("extra_epochs", 0)][r["step"]].append(r[key])
    return {k: (sorted(v), [sum(v[s]) / len(v[s]) for s in sorted(v)]) for k, v in acc.items()}


def plot_inversion_injected(run_dir: Path) -> list[Path]:
    path = Path(run_dir) / METRICS
    if not path.exists():
        return []
    records = read_jsonl(path)
    strengths = sorted({r.get("extra_epochs", 0) for r in records})
    fig, axes = subplots(len(PANELS), 2 if len(strengths) > 1 else 1)
    for col, (key, title) in enumerate(PANELS):
        curves = _mean_curves(records, key)
        ax = axes[0, col]
        for (arm, extra), (steps, values) in sorted(curves.items()):
            if extra == strengths[0] or arm != "mixed":
                ax.plot(steps, values, label=arm)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("stage-2 step")
        ax.set_ylim(-0.02, 1.02)
        if len(strengths) > 1:
            ax2 = axes[1, col]
            for (arm, extra), (steps, values) in sorted(curves.items()):
                if arm == "mixed":
                    ax2.plot(steps, values, label=f"mixed, +{extra} epochs")
            ax2.set_title(f"{title}: memory strength", fontsize=9)
            ax2.set_ylim(-0.02, 1.02)
    axes[0, 0].legend(fontsize=7)
    if len(strengths) > 1:
        axes[1, 0].legend(fontsize=7)
    return [save(fig, Path(run_dir) / "figures" / "inversion_injected.png")]


def seed_rows(summary: dict) -> list[dict]:
    """One flat row per (arm, strength, seed) job of a summary: the counterfactual curve
    under both scorings, held-out C and C+S accuracy, recall and the times."""
    out = []
    for key, row in summary.get("per_seed", {}).items():
        arm, extra, seed = key.rsplit("-", 2)
        flat = {"arm": arm, "strength": extra, "seed": seed.removeprefix("seed")}
        for name in ("cf_acc", "cf_acc_gen"):
            curve = row.get(name, {})
            flat.update({f"{name}_{k}": curve[k] for k in
                         ("start", "peak", "peak_step", "final", "rise", "fall") if k in curve})
        for k in ("c_acc_gen_final", "cs_acc_gen_final", "c_acc_final", "cs_acc_final",
                  "recall_acc_start", "recall_acc_final", "stage1_recall", "seconds",
                  "cpu_seconds"):
            flat[k] = row.get(k)
        for when in ("start", "end"):
            audit = row.get(f"audit_{when}", {})
            flat.update({f"audit_{when}_{k}": v for k, v in audit.items() if k != "n"})
        out.append(flat)
    return out


def markdown_table(rows: list[dict], columns: tuple[str, ...]) -> str:
    """`rows` as a Markdown table of `columns` (floats to 3 decimals)."""
    def cell(v) -> str:
        return f"{v:.3f}" if isinstance(v, float) else "-" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
