"""Run directories: `runs/<experiment>/<timestamp>/` and the checkpoints inside them.

A run directory holds `config.json`, `metrics.jsonl` (one record per evaluation step),
`summary.json`, `figures/*.png` and `report.html`. A run that has no `summary.json` is
unfinished; `--resume` continues it from its checkpoints. `PartStore` is the checkpoint for
experiments made of independent parts: each finished part is saved atomically, and on resume
it is loaded instead of recomputed.
"""

from __future__ import annotations

import json
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

from knowflow.errors import ConfigError, DataError
from knowflow.io import atomic_write_json, read_json, read_jsonl

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


def remove_new_run_dir(run_dir: Path, existed: set[Path]) -> None:
    """Undo `new_run_dir` after a refusal: remove `run_dir` and the parents it created
    (`existed`: the folders that were there before, from `existing_parents`)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in Path(run_dir).parents:
        if parent in existed or not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()


def existing_parents(runs_root: Path, experiment: str) -> set[Path]:
    """The folders of `runs_root/experiment` that already exist (kept by a cleanup)."""
    path = Path(runs_root) / experiment
    return {p for p in (path, *path.parents) if p.exists()}


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
        return read_json(path, hint=f"delete {path} to recompute just that piece, then "
                                    "--resume") if path.exists() else None

    def save(self, key: str, records: list[dict], summary: dict) -> None:
        atomic_write_json(self.dir / f"{key}.json", {"records": records, "summary": summary})


def remove_stale_temps(run_dir: Path) -> None:
    """Delete what a killed process left half-written: atomic writes' temp files
    (`.<name>.*.tmp`) and temp folders (`.<name>.*`). Never results: those are renamed in."""
    for path in sorted(Path(run_dir).rglob(".*"), reverse=True):
        if path.is_file() and path.suffix == ".tmp":
            path.unlink(missing_ok=True)
        elif path.is_dir() and path.parent == Path(run_dir):
            shutil.rmtree(path, ignore_errors=True)


def check_run_files(run_dir: Path, resume: bool = True) -> None:
    """Raise a `DataError` naming the first damaged file of a run, and how to recover.

    Checks config.json, metrics.jsonl (line by line), summary.json, and every checkpoint:
    JSON files parse, safetensors files are as long as their header says, torch files are
    complete zip archives. Cheap: no tensor is loaded.
    """
    run_dir = Path(run_dir)
    again = f"--resume --run-dir {run_dir}"
    fresh = ("start a fresh run (without --resume); this run's config cannot be recovered"
             if resume else "this run cannot be read; run it again")
    read_json(run_dir / CONFIG, hint=fresh)
    if (run_dir / METRICS).exists():
        read_jsonl(run_dir / METRICS, hint="delete the damaged lines (or the run) and "
                                           "run again")
    if not resume and (run_dir / SUMMARY).exists():
        read_json(run_dir / SUMMARY, hint=f"delete it and rewrite it with {again}")
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return
    for path in sorted(p for p in folder.rglob("*") if p.is_file()
                       and not p.name.startswith(".")):
        piece = path if path.parent == folder else path.relative_to(folder).parts[0]
        hint = f"delete {folder / piece} to recompute just that piece, then {again}"
        if path.suffix == ".json":
            read_json(path, hint=hint)
        elif path.suffix == ".safetensors" and not _safetensors_complete(path):
            raise DataError(path, "damaged checkpoint (shorter than its header says)",
                            hint=hint)
        elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
            raise DataError(path, "damaged checkpoint (not a complete torch file)", hint=hint)


def _safetensors_complete(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(size))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"),
                  default=0)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return False
    return path.stat().st_size >= 8 + size + end
