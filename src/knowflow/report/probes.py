"""Figures for `knowflow probe`: they read probe summaries (from summary.json) and draw."""

from __future__ import annotations

from pathlib import Path

from knowflow.report.figures import save, subplots


def _curves(ax, curves: dict[str, list], scale: float = 1.0) -> None:
    for name, curve in curves.items():
        xs = [i for i, v in enumerate(curve) if v is not None]
        ax.plot(xs, [curve[i] * scale for i in xs], marker="o", markersize=3, label=name)
    ax.set_xlabel("layer")
    ax.legend(fontsize=8)


def knockout_figure(summary: dict, path: Path, title: str = "attention knockout",
                    ylabel: str = "% change in prediction probability") -> Path:
    """Relative change in the prediction's probability vs layer, one line per source set
    (as in Geva et al. 2023, Fig. 2)."""
    fig, axes = subplots(1, width=6.0, height=3.8)
    ax = axes[0, 0]
    _curves(ax, {k: v["mean_rel_change"] for k, v in summary.items()
                 if isinstance(v, dict) and "mean_rel_change" in v}, scale=100.0)
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return save(fig, path)


def projection_figure(summary: dict, path: Path, title: str = "vocabulary projection") -> Path:
    """Left: attribute extraction rate of attention vs MLP outputs (and the residual stream)
    at the last position. Right: attributes rate of the residual stream."""
    fig, axes = subplots(2, width=5.0, height=3.6)
    _curves(axes[0, 0], summary["extraction_rate"])
    axes[0, 0].set_ylabel("extraction rate")
    axes[0, 0].set_title(f"{title}: top token = prediction", fontsize=10)
    _curves(axes[0, 1], summary["attributes_rate"])
    axes[0, 1].set_ylabel("attributes rate (top-k)")
    axes[0, 1].set_title("attribute tokens in the projection", fontsize=10)
    return save(fig, path)


def attention_mass_figure(grid: list[list[float]], path: Path,
                          title: str = "attention mass on the context") -> Path:
    """Heatmap of the (layer, head) attention mass and its per-layer head mean."""
    fig, axes = subplots(2, width=5.0, height=3.8)
    image = axes[0, 0].imshow(list(map(list, zip(*grid, strict=True))), aspect="auto",
                              origin="lower", vmin=0.0, vmax=1.0, cmap="viridis")
    fig.colorbar(image, ax=axes[0, 0])
    axes[0, 0].set_xlabel("layer")
    axes[0, 0].set_ylabel("head")
    axes[0, 0].set_title(title, fontsize=10)
    axes[0, 0].grid(False)
    _curves(axes[0, 1], {"mean over heads": [sum(row) / len(row) for row in grid]})
    axes[0, 1].set_ylabel("attention mass")
    axes[0, 1].set_ylim(0.0, 1.0)
    return save(fig, path)
