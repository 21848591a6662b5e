"""Figures and the results table of `ocr-smollm2`, drawn from the run's metrics.jsonl.

1_mean_rank.png  mean rank of the correct implication per family over finetuning steps: held-out
                 people (the out-of-context inference), training people (was the shown
                 implication learned?) and the facts of held-out people (was the fact learned?);
                 the dotted line is chance, (K - 1) / 2
2_table.png      the paper's table: per family, K, chance, mean rank before and after
                 finetuning (full answer and first token), top-1, the training-people and
                 facts checks, and (counterfactual family) the real-world implication's rank

Records are flat, `<family>/<group>/<stat>` (see `rank_table`, which makes the table
that the experiment's summary holds too). Counterfactual families add prior_mean_rank and
prior_top1: the rank of the real-world implication, which the trained mapping contradicts.
"""

from __future__ import annotations

from pathlib import Path

from knowflow.data.people import load_families
from knowflow.experiments.ocr_smollm2.rank_table import families_of, family_ranks
from knowflow.report.figures import save, series, subplots
from knowflow.store.identity import CONFIG, METRICS
from knowflow.store.readers import read_json, read_jsonl


def _curves(ax, records: list[dict], group: str, title: str) -> None:
    ks = set()
    for fam in families_of(records):
        steps, values = series(records, f"{fam}/{group}/mean_rank")
        if steps:
            ax.plot(steps, values, marker="o", ms=3, label=fam)
        ks |= {r.get(f"{fam}/{group}/n_candidates") for r in records} - {None}
    for k in sorted(ks):
        ax.axhline((k - 1) / 2, color="k", lw=0.8, ls=":",
                   label="chance" if len(ks) == 1 else f"chance (K={k:g})")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("finetuning step")
    ax.set_ylabel("mean rank (0 = best)")
    ax.set_ylim(bottom=-0.1)


def _mean_rank_figure(records: list[dict], path: Path, model: str) -> Path:
    fig, ax = subplots(3, width=4.6, height=3.6)
    _curves(ax[0, 0], records, "test_impl", f"held-out people: implication ({model})")
    _curves(ax[0, 1], records, "train_impl", "training people: implication (shown)")
    _curves(ax[0, 2], records, "test_fact", "held-out people: fact (shown)")
    ax[0, 0].legend(fontsize=7)
    return save(fig, path)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _table_figure(table: dict[str, dict], path: Path, title: str) -> Path:
    cols = ("causal", "n_candidates", "chance_mean_rank", "mean_rank_before", "mean_rank_after",
            "top1_after", "mean_rank_first_token_before", "mean_rank_first_token_after",
            "train_mean_rank_after", "fact_mean_rank_after", "prior_mean_rank_after")
    heads = ("causal", "K", "chance", "before", "after", "top-1\nafter", "1st tok\nbefore",
             "1st tok\nafter", "train people\nafter", "facts\nafter", "real-world\nafter")
    fig, ax = subplots(1, width=11, height=0.5 + 0.38 * (len(table) + 2))
    a = ax[0, 0]
    a.axis("off")
    a.grid(False)
    cells = [[_fmt(row.get(c)) for c in cols] for row in table.values()]
    t = a.table(cellText=cells, rowLabels=list(table), colLabels=heads, loc="center",
                cellLoc="center")
    t.auto_set_font_size(False)
    t.set_fontsize(8)
    t.scale(1, 1.6)
    a.set_title(title, fontsize=10)
    return save(fig, path)


def table_markdown(table: dict[str, dict]) -> str:
    """The results table as Markdown (for notes and the README)."""
    cols = ("n_candidates", "chance_mean_rank", "mean_rank_before", "mean_rank_after",
            "top1_after", "mean_rank_first_token_before", "mean_rank_first_token_after",
            "train_mean_rank_after", "fact_mean_rank_after", "prior_mean_rank_after")
    lines = ["| family | causal | " + " | ".join(cols) + " |",
             "|---" * (len(cols) + 2) + "|"]
    for fam, row in table.items():
        lines.append(f"| {fam} | {_fmt(row.get('causal'))} | "
                     + " | ".join(_fmt(row.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def plot_ocr_smollm2(run_dir: Path) -> list[Path]:
    run_dir = Path(run_dir)
    records = read_jsonl(run_dir / METRICS) if (run_dir / METRICS).exists() else []
    if not records:
        return []
    config = read_json(run_dir / CONFIG)
    specs = load_families(config["world"]["families_file"] or None)
    causal = {name: spec.causal for name, spec in specs.items()}
    figures = run_dir / "figures"
    table = family_ranks(records, causal)
    model = Path(str(config["model"])).name
    return [_mean_rank_figure(records, figures / "1_mean_rank.png", model),
            _table_figure(table, figures / "2_table.png",
                          f"{model}: mean rank of the held-out implication, "
                          f"{table['all']['steps']} steps")]
