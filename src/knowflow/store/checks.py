"""What a run folder holds, checked before `--resume` (or `report`) reads it: the damaged
file named with how to recover (`check_run_files`), and what a killed process left
half-written removed (`remove_stale_temps`). Cheap: no tensor is loaded."""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

from knowflow.errors import DataError
from knowflow.store.identity import CONFIG, IDENTITY, METRICS, SUMMARY, run_command
from knowflow.store.readers import decode_json, read_json
from knowflow.store.schemas import (
    JSON_OBJECT,
    MetricRecord,
    RunIdentity,
    read_checked,
    read_checked_lines,
    result_schemas,
)

# What atomic writes (`store.files`, `store.staging`) leave when killed: `.<name>.<8 chars>.tmp`
# files and `.<name>.<8 chars>` (or `.<name>.old.<8 chars>`) folders, as tempfile names them.
_TEMP_FILE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
_TEMP_DIR = re.compile(r"^\..+\.(old\.)?[a-z0-9_]{8}$")


def remove_stale_temps(run_dir: Path) -> None:
    """Delete what a killed process left half-written: atomic writes' temp files and temp
    folders, by their names. Nothing else: never results (those are renamed in), never a
    hidden folder of the user's (`.git`, `.ipynb_checkpoints`), never anything inside one."""
    for folder, dirs, files in os.walk(run_dir):
        for name in files:
            if _TEMP_FILE.match(name):
                Path(folder, name).unlink(missing_ok=True)
        temps = [d for d in dirs if _TEMP_DIR.match(d) and Path(folder) == Path(run_dir)]
        for name in temps:
            shutil.rmtree(Path(folder, name), ignore_errors=True)
        dirs[:] = [d for d in dirs if not d.startswith(".")]


def check_run_files(run_dir: Path, resume: bool = True) -> None:
    """Raise a `DataError` naming the first damaged file of a run, and how to recover.

    Checks run.json, config.json, metrics.jsonl (line by line), and for `report` summary.json
    and the records files, each against its schema (`store.schemas`), and every
    checkpoint: JSON files parse, safetensors files are as long as their header says, torch
    files are complete zip archives. Cheap: no tensor is loaded.
    """
    run_dir = Path(run_dir)
    again = f"--resume --run-dir {run_dir}"
    fresh = ("start a fresh run (without --resume); this run's config cannot be recovered"
             if resume else "this run cannot be read; run it again")
    if (run_dir / IDENTITY).exists():
        read_checked(run_dir / IDENTITY, RunIdentity, hint=fresh)
    read_checked(run_dir / CONFIG, JSON_OBJECT, hint=fresh)
    if (run_dir / METRICS).exists():
        read_checked_lines(run_dir / METRICS, MetricRecord,
                           hint="delete the damaged lines (or the run) and run again")
    if not resume:
        _check_results(run_dir, again)
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not any(
            part.startswith(".") for part in p.relative_to(folder).parts)):
        piece = path if path.parent == folder else path.relative_to(folder).parts[0]
        hint = f"delete {folder / piece} to recompute just that piece, then {again}"
        if path.suffix == ".json":
            _check_shape(path, read_json(path, hint=hint), folder, hint)
        elif path.suffix == ".safetensors" and not _safetensors_complete(path):
            raise DataError(path, "damaged checkpoint (shorter than its header says)",
                            hint=hint)
        elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
            raise DataError(path, "damaged checkpoint (not a complete torch file)", hint=hint)


    for ckpt in sorted(p for p in folder.glob("checkpoint-*") if (p / "trainer_state.json")
                       .is_file()):
        names = ("adapter_model.safetensors", "adapter_model.bin") if \
            (ckpt / "adapter_config.json").exists() else \
            ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
        if not any((ckpt / name).is_file() for name in names):
            raise DataError(ckpt, f"damaged checkpoint (no {names[0]})",
                            hint=f"delete {ckpt} to resume from the one before, then {again}")


def _check_results(run_dir: Path, again: str) -> None:
    """summary.json and the records files of a finished run, before `report` reads them."""
    hint = "this run cannot be read; run it again"
    for name, schema in result_schemas(run_command(run_dir)).items():
        path = run_dir / name
        if path.exists():
            read = read_checked_lines if name.endswith(".jsonl") else read_checked
            read(path, schema, hint=f"delete it and rewrite it with {again}"
                 if name == SUMMARY else hint)


def _check_shape(path: Path, data: Any, folder: Path, hint: str) -> None:
    """A checkpoint JSON file holds what its reader expects (not just any JSON)."""
    if path.parent == folder:  # a PartStore piece
        ok = isinstance(data, dict) and isinstance(data.get("records"), list) and \
            isinstance(data.get("summary"), dict)
        what = "records and a summary"
    elif path.name == "trainer_state.json":
        ok = isinstance(data, dict) and isinstance(data.get("global_step"), int)
        what = "an object with global_step"
    else:
        return
    if not ok:
        raise DataError(path, f"not a knowflow checkpoint (expected {what})", hint=hint)


def _safetensors_complete(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            header = decode_json(fh.read(size).decode("utf-8"), path)
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"),
                  default=0)
    except (DataError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return False
    return path.stat().st_size >= 8 + size + end


def check_run_folders(run_dirs: list[Path]) -> None:
    """Each path is an existing knowflow run folder whose files are readable (`report`)."""
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise DataError(run_dir, "no such run folder" if not run_dir.exists() else
                            "a file, not a run folder", hint="give runs/<experiment>/<timestamp>")
        if not (run_dir / CONFIG).exists():
            raise DataError(run_dir, f"not a knowflow run directory (no {CONFIG})",
                            hint="give runs/<experiment>/<timestamp>")
        check_run_files(run_dir, resume=False)
