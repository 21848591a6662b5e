"""Shared matplotlib plumbing: a headless backend, consistent style, atomic PNG writes."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from knowflow.store.files import atomic_write_bytes


def subplots(ncols: int, nrows: int = 1, width: float = 4.2, height: float = 3.2):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    return fig, axes


def png(fig, tight: bool = True) -> bytes:
    """Render `fig` to PNG bytes and close it (a page can embed them without a file);
    `tight=False` for a figure with a colour bar shared by its panels (laid out by hand)."""
    buf = io.BytesIO()
    if tight:
        fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, bbox_inches=None if tight else "tight")
    plt.close(fig)
    return buf.getvalue()


def save(fig, path: Path, tight: bool = True) -> Path:
    """Render `fig` to PNG and write it atomically."""
    return atomic_write_bytes(path, png(fig, tight))


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    rows = [r for r in records if r.get(key) is not None]
    return [r["step"] for r in rows], [r[key] for r in rows]
