"""Phase-diagram heatmaps: the fall of the headline curve (seed mean) over C+S share and
context-skill reliability, one panel per model, cells that invert outlined. Drawn from the
run's phase.json (`<model>`: one row per cell), which a phase study writes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from knowflow.experiments.phase import cell_fall
from knowflow.report.figures import save, subplots
from knowflow.store.identity import CONFIG
from knowflow.store.readers import read_json
from knowflow.store.run_folder import read_result

PHASE = "phase.json"

TITLES = {"toy": "one-layer theory (fall of M_C)",
          "tiny": "tiny transformer (fall of cf accuracy)"}


def plot_phase(run_dir: Path) -> list[Path]:
    path = Path(run_dir) / PHASE
    if not path.exists():
        return []
    phase = read_result(run_dir, PHASE)
    models = [m for m in ("toy", "tiny") if phase.get(m)]
    if not models:
        return []
    fig, ax = subplots(len(models), width=4.8, height=3.8)
    for i, model in enumerate(models):
        rows = phase[model]
        shares = sorted({r["cs_share"] for r in rows})
        rels = sorted({r["reliability"] for r in rows})
        grid = [[next(cell_fall(r) for r in rows if r["cs_share"] == x
                      and r["reliability"] == rel) for x in shares] for rel in rels]
        a = ax[0, i]
        a.grid(False)
        im = a.imshow(grid, origin="lower", cmap="viridis", vmin=0, aspect="auto")
        for r in rows:
            y, x = rels.index(r["reliability"]), shares.index(r["cs_share"])
            a.text(x, y, f"{cell_fall(r):.2f}", ha="center", va="center", fontsize=8,
                   color="white" if cell_fall(r) < 0.6 * max(max(g) for g in grid) else "k",
                   fontweight="bold" if r["inverts"] else "normal")
            if r["inverts"]:
                a.add_patch(_box(x, y))
        a.set_xticks(range(len(shares)), [f"{x:g}" for x in shares])
        a.set_yticks(range(len(rels)), [f"{r:g}" for r in rels])
        a.set_xlabel("C+S share of the finetuning mixture")
        a.set_ylabel("context-skill reliability (delta_C)")
        a.set_title(TITLES[model], fontsize=10)
        fig.colorbar(im, ax=a, shrink=0.8, label="fall (peak - final), seed mean")
    return [save(fig, Path(run_dir) / "figures" / "1_phase_diagram.png")]


def with_phase(plot: Callable[[Path], list[Path]]) -> Callable[[Path], list[Path]]:
    """An experiment's figure function that draws the phase diagram for `study=phase` runs."""

    def draw(run_dir: Path) -> list[Path]:
        if read_json(Path(run_dir) / CONFIG).get("study") == "phase":
            return plot_phase(run_dir)
        return plot(run_dir)

    return draw


def _box(x: int, y: int):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2)
