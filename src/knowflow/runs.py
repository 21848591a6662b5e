"""Run directories: `runs/<experiment>/<timestamp>/` and the checkpoints inside them.

Every run, an experiment's, an eval's or a probe's, is one folder written in one order by
`start_run`: `config.json` first (atomically), then its records (`metrics.jsonl` of an
experiment, one record per evaluation step; `items.jsonl` of an eval; `records.jsonl` of a
probe), `figures/*.png`, `summary.json` and `report.html` (the figures and the page are drawn
by `report.finish.finish_run`). A run that has no `summary.json`
is unfinished; `--resume` continues an experiment from its checkpoints. Bad input found after
the folder was made removes what the run wrote (`RunFolder.refusals`). `PartStore` is the
checkpoint for experiments made of independent parts: each finished part is saved atomically,
and on resume it is loaded instead of recomputed.

`Progress` is the one callback type of long-running library code: `progress(done, total,
stage)`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from knowflow.errors import ConfigError, DataError, KnowflowError, out_of_memory
from knowflow.io import atomic_write_json, atomic_write_jsonl, read_json, read_jsonl
from knowflow.outputs import IDENTITY, check_out_dir, claim, config_hash, release, run_command

CONFIG, METRICS, SUMMARY, REPORT = "config.json", "metrics.jsonl", "summary.json", "report.html"
ITEMS, RECORDS = "items.jsonl", "records.jsonl"  # an eval's per-item, a probe's per-example


class Progress(Protocol):
    """How long-running library code reports: `progress(done, total, stage)` after each
    batch or step; `stage` names the pass when a job has several ("cf-capitals: generate"),
    "" when it has one. Callers may pass any function that takes `(done, total)` and an
    optional `stage`."""

    def __call__(self, done: int, total: int, stage: str = "") -> None: ...


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


def _remove_made(path: Path, existed: set[Path]) -> None:
    """Remove `path` and the parents made for it (`existed`: the folders that were there
    before, from `_existing`)."""
    shutil.rmtree(path, ignore_errors=True)
    for parent in Path(path).parents:
        if parent in existed or not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()


def _existing(path: Path) -> set[Path]:
    """`path` and its parents, those that already exist (kept by a cleanup)."""
    path = Path(path)
    return {p for p in (path, *path.parents) if p.exists()}


@dataclass
class RunFolder:
    """A run folder being written (see the module docstring). `existed`: the paths that were
    there before the run (None for a resumed run, which is never removed); `written`: the
    files this run created, the only ones removed from an `--out` folder that existed before
    (a file it wrote over is kept). The folder is claimed (`knowflow.outputs.claim`) from
    `start_run` until `close`, which `finish_run` and every refusal call."""

    path: Path
    existed: set[Path] | None = None
    written: list[Path] = field(default_factory=list)
    claimed: bool = False

    def write_json(self, name: str, data: Any) -> Path:
        return self._write(name, atomic_write_json, data)

    def write_records(self, name: str, records: list[dict]) -> Path:
        """The run's records file (`metrics.jsonl`, `items.jsonl`, `records.jsonl`)."""
        return self._write(name, atomic_write_jsonl, records)

    def write_summary(self, summary: dict) -> Path:
        """`summary.json`: written last but the page, it marks the run finished."""
        return self.write_json(SUMMARY, summary)

    def _write(self, name: str, write, data) -> Path:
        path = self.path / name
        new = not path.exists()
        write(path, data)
        if new:
            self.written.append(path)
        return path

    def claim(self) -> RunFolder:
        if not self.claimed:
            claim(self.path)
            self.claimed = True
        return self

    def close(self) -> None:
        """Let go of the folder (another process may write it now)."""
        if self.claimed:
            self.claimed = False
            release(self.path)

    def discard(self) -> None:
        """Undo the run after a refusal: a folder it made goes with the parents made for it;
        in a folder that was there before, only the files it created (and its figures/)."""
        self.close()
        if self.existed is None:
            return
        if self.path not in self.existed:
            _remove_made(self.path, self.existed)
            return
        for path in self.written:
            path.unlink(missing_ok=True)
        if (self.path / "figures").is_dir() and self.path / "figures" not in self.existed:
            shutil.rmtree(self.path / "figures", ignore_errors=True)

    @contextmanager
    def refusals(self, interrupt: bool = False) -> Iterator[RunFolder]:
        """Bad input found inside the block (a `KnowflowError`, or too little memory)
        discards the run and the error goes on; with `interrupt`, so does Ctrl-C (a run that
        cannot be resumed leaves nothing). Any other way out lets go of the folder."""
        try:
            yield self
        except (KnowflowError, MemoryError, RuntimeError) as exc:
            if isinstance(exc, KnowflowError) or out_of_memory(exc):
                self.discard()
            self.close()
            raise
        except KeyboardInterrupt:
            if interrupt:
                self.discard()
            self.close()
            raise
        except BaseException:
            self.close()
            raise


def start_run(config: dict, name: str, runs_root: str | Path | None = None,
              out_dir: str | Path | None = None, inputs=()) -> RunFolder:
    """A new run folder, claimed, with its `config.json` and `run.json` written: `out_dir` as
    given (made if it is missing; see `outputs.check_out_dir` for what it may hold, never a
    folder holding one of `inputs`), or a fresh `runs_root/name/<timestamp>/`."""
    if out_dir is not None:
        path = Path(out_dir)
        check_out_dir(path, name, inputs)
        existed = _existing(path / "figures")  # figures/ too: kept if it was there
        path.mkdir(parents=True, exist_ok=True)
    else:
        existed = _existing(Path(runs_root or "runs") / name)
        path = new_run_dir(Path(runs_root or "runs"), name)
    run = RunFolder(path, existed)
    try:
        run.claim()
        if out_dir is not None:
            check_out_dir(path, name, inputs)  # again, now that it is ours: no one slipped in
        run.write_json(CONFIG, config)
        run.write_json(IDENTITY, {"command": name, "config_sha256": config_hash(path)})
    except BaseException:
        run.discard()
        raise
    return run


@contextmanager
def holding(out_dir: str | Path | None) -> Iterator[None]:
    """Hold the claim on an `--out` folder across several steps (`evaluate`, then
    `finish_run`), so no other process writes it in between; a folder made here and left
    empty (a refusal) is removed again, with the parents made for it."""
    if out_dir is None:
        yield
        return
    out = Path(out_dir)
    existed = _existing(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        claim(out)
        try:
            yield
        finally:
            release(out)
    finally:
        if out not in existed and out.is_dir() and not any(out.iterdir()):
            _remove_made(out, existed)


def check_identity(run_dir: Path, command: str) -> None:
    """`run_dir` is a run of `command` whose config.json is the one it started with; else a
    `DataError` saying what it is (checked before `--resume` reads anything else)."""
    owner = run_command(run_dir)
    if owner is None:
        raise DataError(Path(run_dir) / IDENTITY, "missing or not a knowflow run marker: this "
                        "folder is not a knowflow run", hint="give the folder a knowflow run "
                        "wrote (it holds run.json), or start a fresh run (without --resume)")
    if owner != command:
        what = "sft" if owner == "sft" else f"run {owner}"
        raise DataError(run_dir, f"this is a `{owner}` run, not a `{command}` run",
                        hint=f"continue it with `knowflow {what} --resume --run-dir {run_dir}`"
                        if not owner.startswith(("eval", "probe")) else
                        "an eval or probe run cannot be resumed; start a fresh run")
    path = Path(run_dir) / IDENTITY
    ident = read_json(path, hint="start a fresh run (without --resume)")
    saved = ident.get("config_sha256") if isinstance(ident, dict) else None
    if not isinstance(saved, str):
        raise DataError(path, "not a knowflow run identity (no config_sha256)",
                        hint="start a fresh run (without --resume)")
    if saved != config_hash(run_dir):
        raise DataError(Path(run_dir) / CONFIG, "changed since the run started (its hash "
                        f"differs from {IDENTITY}'s)", hint="put the original back, or start "
                        "a fresh run with the changed settings (--set)")


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
        if not path.exists():
            return None
        hint = f"delete {path} to recompute just that piece, then --resume"
        saved = read_json(path, hint=hint)
        if not (isinstance(saved, dict) and isinstance(saved.get("records"), list)
                and isinstance(saved.get("summary"), dict)
                and all(isinstance(r, dict) for r in saved["records"])):
            raise DataError(path, "not a knowflow checkpoint (expected records and a "
                            "summary)", hint=hint)
        return saved

    def save(self, key: str, records: list[dict], summary: dict) -> None:
        atomic_write_json(self.dir / f"{key}.json", {"records": records, "summary": summary})


# What `knowflow.io`'s atomic writes leave when killed: `.<name>.<8 chars>.tmp` files and
# `.<name>.<8 chars>` (or `.<name>.old.<8 chars>`) folders, as tempfile names them.
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
            header = json.loads(fh.read(size))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"),
                  default=0)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return False
    return path.stat().st_size >= 8 + size + end
