"""Figures for `knowflow probe heads` and `probe head-project`: they read the summaries."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import MaxNLocator

from knowflow.report.figures import save, subplots


def _heatmap(ax, grid: list[list[float]], title: str, signed: bool, fig) -> None:
    cols = list(map(list, zip(*grid, strict=True)))               # (heads, layers)
    if signed:
        bound = max((abs(v) for row in grid for v in row), default=1.0) or 1.0
        image = ax.imshow(cols, aspect="auto", origin="lower", cmap="RdBu",
                          vmin=-bound, vmax=bound)
    else:
        image = ax.imshow(cols, aspect="auto", origin="lower", vmin=0.0, vmax=1.0,
                          cmap="viridis")
    fig.colorbar(image, ax=ax)
    ax.set_xlabel("layer")
    ax.set_ylabel("head")
    ax.set_title(title, fontsize=10)
    ax.grid(False)


def head_effects_figure(summary: dict, path: Path, title: str = "") -> Path:
    """One heatmap per swept edit, on one shared colour scale with one labelled colour bar:
    the mean change in log p(cf) - log p(parametric) when the head is removed (red, negative:
    a context head; blue, positive: a memory head)."""
    effects = summary["effects"]
    bound = max((abs(v) for block in effects.values() for row in block["mean"] for v in row),
                default=1.0) or 1.0
    fig, axes = subplots(len(effects), width=3.8, height=3.4)
    image = None
    for i, (kind, block) in enumerate(effects.items()):
        ax = axes[0, i]
        cols = list(map(list, zip(*block["mean"], strict=True)))      # (heads, layers)
        image = ax.imshow(cols, aspect="auto", origin="lower", cmap="RdBu", vmin=-bound,
                          vmax=bound)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer")
        ax.set_ylabel("head")
        ax.set_title(f"{kind} ablation", fontsize=10)
        ax.grid(False)
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes[0]), shrink=0.9)
        bar.set_label("change in log p(cf) − log p(param)", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return save(fig, path, tight=False)


def head_projection_figure(summary: dict, path: Path, title: str = "") -> Path:
    """Per head, the share of facts whose top projected token is the prediction; next to it
    the whole attention sublayer's share per layer and the best head's."""
    fig, axes = subplots(2, width=5.0, height=3.6)
    _heatmap(axes[0, 0], summary["head_rate"], f"{title} head extraction rate".strip(), False,
             fig)
    ax = axes[0, 1]
    layers = list(range(len(summary["attn_rate"])))
    ax.plot(layers, summary["attn_rate"], marker="o", markersize=3, label="attention sublayer")
    ax.plot(layers, [max(row) for row in summary["head_rate"]], marker="o", markersize=3,
            label="best head of the layer")
    ax.set_xlabel("layer")
    ax.set_ylabel("extraction rate")
    ax.legend(fontsize=8)
    return save(fig, path)
