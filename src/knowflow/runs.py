"""Run directories: `runs/<experiment>/<timestamp>/` and the checkpoints inside them.

A run directory holds `config.json`, `metrics.jsonl` (one record per evaluation step),
`summary.json`, `figures/*.png` and `report.html`. A run that has no `summary.json` is
unfinished; `--resume` continues it from its checkpoints. `PartStore` is the checkpoint for
experiments made of independent parts: each finished part is saved atomically, and on resume
it is loaded instead of recomputed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from knowflow.errors import ConfigError
from knowflow.io import atomic_write_json, read_json

CONFIG, METRICS, SUMMARY, REPORT = "config.json", "metrics.jsonl", "summary.json", "report.html"


def new_run_dir(runs_root: Path, experiment: str) -> Path:
    """Create a fresh `runs_root/experiment/<timestamp>` folder (suffixed if taken)."""
    base = Path(runs_root) / experiment
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = base / (stamp if i == 0 else f"{stamp}-{i}")
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run directory under {base}")


def is_finished(run_dir: Path) -> bool:
    return (Path(run_dir) / SUMMARY).exists()


def latest_unfinished(runs_root: Path, experiment: str) -> Path:
    """The newest run of `experiment` that has a config but no summary (for --resume)."""
    base = Path(runs_root) / experiment
    candidates = sorted(
        (p for p in base.glob("*") if (p / CONFIG).exists() and not is_finished(p)),
        key=lambda p: p.name,
    ) if base.is_dir() else []
    if not candidates:
        raise ConfigError(f"--resume: no unfinished run of {experiment!r} under {base}")
    return candidates[-1]


class PartStore:
    """Atomic checkpoints of finished pieces of a run: `checkpoints/<key>.json`, each holding
    that piece's records and summary. On `--resume`, saved pieces are loaded, not recomputed."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir) / "checkpoints"

    def load(self, key: str) -> dict[str, Any] | None:
        path = self.dir / f"{key}.json"
        return read_json(path) if path.exists() else None

    def save(self, key: str, records: list[dict], summary: dict) -> None:
        atomic_write_json(self.dir / f"{key}.json", {"records": records, "summary": summary})
