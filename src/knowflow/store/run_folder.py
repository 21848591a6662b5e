"""Run directories: `runs/<experiment>/<timestamp>/` and the checkpoints inside them.

Every run, an experiment's, an eval's or a probe's, is one folder written in one order by
`start_run`: `config.json` first (atomically), then its records (`metrics.jsonl` of an
experiment, one record per evaluation step; `items.jsonl` of an eval; `records.jsonl` of a
probe), `figures/*.png`, `summary.json` and `report.html` (the figures and the page are drawn
by `report.finish.finish_run`). The folder is staged (`store.staging`): written under a
hidden name beside its target and renamed into place only when complete, so a failure of
any kind (bad input found late, Ctrl-C, SIGTERM, a full disk, a bug) leaves the target as
it was. An experiment's run that holds a complete checkpoint is kept instead, marked
`"in_progress": true` in `run.json`, and `--resume` continues it in place. `PartStore` is
the checkpoint for experiments made of independent parts: each finished part is saved
atomically, and on resume it is loaded instead of recomputed.

`Progress` is the one callback type of long-running library code: `progress(done, total,
stage)`. `OutOptions` and `ResumeOptions` are where a command writes its run (`--out`,
`--runs-dir`) or which run it continues (`--resume`, `--run-dir`); `OutFile` a command that
writes files, not a run folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from knowflow.config import option
from knowflow.errors import ConfigError, DataError, KnowflowError, out_of_memory
from knowflow.store.files import atomic_write_json, atomic_write_jsonl
from knowflow.store.identity import (
    CONFIG,
    IDENTITY,
    IN_PROGRESS,
    SUMMARY,
    config_hash,
    is_finished,
    own_files,
    run_command,
)
from knowflow.store.keys import current
from knowflow.store.lock import claim, release
from knowflow.store.outputs import check_out_dir
from knowflow.store.readers import read_json, read_jsonl
from knowflow.store.staging import publish, remove, stage_dir


class Progress(Protocol):
    """How long-running library code reports: `progress(done, total, stage)` after each
    batch or step; `stage` names the pass when a job has several ("cf-capitals: generate"),
    "" when it has one. Callers may pass any function that takes `(done, total)` and an
    optional `stage`."""

    def __call__(self, done: int, total: int, stage: str = "") -> None: ...


RUNS_HELP = "Where run directories go."


@dataclass(frozen=True)
class OutOptions:
    """Where a command writes its run: `out`, or a fresh RUNS_DIR/COMMAND/TIMESTAMP."""

    out: Path | None = option(None, "Output folder (default: RUNS_DIR/COMMAND/TIMESTAMP).")
    runs_dir: Path = option(Path("runs"), RUNS_HELP)


@dataclass(frozen=True)
class ResumeOptions:
    """Where an experiment's runs go, and the unfinished one `--resume` continues."""

    runs_dir: Path = option(Path("runs"), RUNS_HELP)
    resume: bool = option(False, "Continue the newest unfinished run of this experiment (or "
                                 "the one --run-dir names).")
    run_dir: Path | None = option(None, "With --resume: the run directory to continue.")

    def validate(self) -> None:
        if self.run_dir is not None and not self.resume:
            raise ConfigError("only works with --resume", "run_dir",
                              "add --resume to continue that run, or drop --run-dir")

    @property
    def target(self) -> bool | Path:
        """`run_experiment`'s `resume`: False, True (the newest unfinished run) or the run."""
        return (self.run_dir or True) if self.resume else False


@dataclass(frozen=True)
class OutFile:
    """The file a command writes (never a folder, an input or another's output)."""

    out: Path = option(help="The JSONL file to write (curate: the rows kept, with "
                            "OUT.scores.jsonl and OUT.png beside it; augment: the rows and "
                            "their counterfactual copies).")


@dataclass(frozen=True)
class ReportFile:
    """Where `knowflow report` writes its page."""

    out: Path | None = option(None, "Output file (default: RUN_DIR/report.html for one run, "
                                    "./report.html for many).")


def new_run_name(runs_dir: Path, experiment: str) -> Path:
    """The path of a fresh `runs_dir/experiment/<timestamp>` run (not made: a staged run
    takes it, or the next free `-<n>` name, when complete: `store.staging.publish`)."""
    return Path(runs_dir) / experiment / time.strftime("%Y%m%d-%H%M%S")


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


def has_checkpoint(run_dir: Path) -> bool:
    """Whether run folder `run_dir` holds a complete checkpoint to resume from (checkpoints
    are written staged: one that is there is complete)."""
    folder = Path(run_dir) / "checkpoints"
    return folder.is_dir() and any(not p.name.startswith(".") for p in folder.iterdir())


@dataclass
class RunFolder:
    """A run folder being written (see the module docstring), used as a context manager:
    the block's end publishes it, a failure undoes it.

    A new run is staged: `path` is a hidden staging folder beside `target`, claimed
    (`store.lock.claim`), and `commit` renames it to `target` once complete (replacing
    an earlier run of the same command there). A failure removes it (`discard`), with the
    parents made for it (`existed`: the folders there before); only a `resumable` run (an
    experiment's) that holds a complete checkpoint and was not refused for bad input is kept
    instead (`keep`), published as its target with `run.json` marking it in progress. A
    resumed run (`target` None) is written in place and never removed; its completion clears
    the in-progress mark. `kept`: whether a failed run was kept (resumable)."""

    path: Path
    existed: set[Path] | None = None
    written: list[Path] = field(default_factory=list)
    claimed: bool = False
    target: Path | None = None
    resumable: bool = False
    replace: bool = True  # an --out target; a fresh timestamped run takes a free name
    kept: bool = False
    final: Path | None = None  # where a resumable run was published at its first checkpoint

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
        """Let go of the folder (another process may write it now); a staged folder is held
        until it is published or removed."""
        if self.claimed and self.target is None:
            self.claimed = False
            release(self.path)

    def commit(self) -> Path:
        """The run is complete: a staged one is renamed into place (`path` becomes its
        target), a resumed or published one loses its in-progress mark; then the folder is
        let go."""
        if self.final is None and self.target is not None:
            self._list_files()
            self.claimed = False
            self.path = publish(self.path, self.target, self.replace)
            self.target = None
        else:
            self._settle()
            self._list_files()
        _STAGED.pop(id(self), None)
        self.close()
        return self.path

    def _list_files(self) -> None:
        """`run.json` names what the run wrote (`files`; a later run over this folder is
        refused while it holds anything else: the user's files are never replaced with it)
        and loses its in-progress mark. A folder without `run.json` is left as it is."""
        if not (self.path / IDENTITY).is_file():
            return
        ident = {k: v for k, v in read_json(self.path / IDENTITY).items() if k != IN_PROGRESS}
        atomic_write_json(self.path / IDENTITY, {**ident, "files": own_files(self.path)})

    def checkpointed(self) -> None:
        """The run saved a complete checkpoint: a staged resumable run is published now,
        marked in progress (so even a killed process leaves it resumable), and goes on
        writing through its staging name, a link to it from now on."""
        if self.target is None or self.final is not None or not self.resumable:
            return
        ident = read_json(self.path / IDENTITY)
        atomic_write_json(self.path / IDENTITY, {**ident, IN_PROGRESS: True})
        self.final = publish(self.path, self.target, self.replace)
        if self.final != Path(self.path):
            os.symlink(self.final.name, self.path)
        claim(self.final)

    def _settle(self) -> None:
        """A published run's staging link goes; `path` is the run folder again."""
        if self.final is not None:
            if Path(self.path).is_symlink():
                Path(self.path).unlink()
            self.path, self.target, self.final, self.claimed = self.final, None, None, True

    def keep(self) -> bool:
        """After a failure: publish a staged resumable run that holds a complete checkpoint,
        marked in progress (True), or undo it (False)."""
        if self.final is None and (self.target is None or not self.resumable
                                   or not has_checkpoint(self.path)):
            self.discard()
            return False
        self.checkpointed()
        self._settle()
        _STAGED.pop(id(self), None)
        self.close()
        self.kept = True
        return True

    def discard(self) -> None:
        """Undo the run: a staged (or published) one's folder goes, with the parents made
        for it; a resumed one is only let go."""
        _STAGED.pop(id(self), None)
        staged = self.target is not None
        self._settle()
        self.close()
        if staged:
            self.claimed = False
            remove(self.path)
            _remove_made(self.path, self.existed or set())

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if exc is None:
            try:
                self.commit()
            except BaseException:
                self.discard()
                raise
            return
        target = self.final or self.target
        if isinstance(exc, KnowflowError) or out_of_memory(exc):
            self.discard()  # bad input, too little memory: nothing to resume
        else:
            try:
                self.keep()
            except BaseException:  # the in-progress mark could not be written either
                self.discard()
                raise
        with contextlib.suppress(AttributeError):  # what the error message says was kept
            exc.knowflow_kept = self.path if self.kept else None
            exc.knowflow_untouched = None if self.kept or target is None else target


_STAGED: dict[int, RunFolder] = {}  # resumable staged runs being written, for `checkpointed`


def checkpoint_saved(run_dir: str | Path) -> None:
    """Say that `run_dir` now holds a complete checkpoint (`PartStore.save` and the Trainer's
    staged checkpoints call it): a staged resumable run is published, in progress."""
    for run in list(_STAGED.values()):
        if Path(run.path) == Path(run_dir):
            run.checkpointed()




def start_run(config: dict, name: str, runs_dir: str | Path | None = None,
              out_dir: str | Path | None = None, inputs=(), resumable: bool = False
              ) -> RunFolder:
    """A new, staged run folder (see `RunFolder`), claimed, with its `config.json` and
    `run.json` written, that becomes `out_dir` (see `store.outputs.check_out_dir` for what it may
    hold, never a folder holding one of `inputs`) or a fresh `runs_dir/name/<timestamp>/`
    when complete. `resumable`: an experiment's run, kept after a failure once it holds a
    checkpoint."""
    if out_dir is not None:
        target = Path(out_dir)
        check_out_dir(target, name, inputs)
    else:
        target = new_run_name(Path(runs_dir or "runs"), name)
    existed = _existing(target.parent)
    run = RunFolder(stage_dir(target), existed, claimed=True, target=target,
                    resumable=resumable, replace=out_dir is not None)
    if resumable:
        _STAGED[id(run)] = run
    try:
        if out_dir is not None:
            check_out_dir(target, name, inputs)  # again: no one slipped in meanwhile
        run.write_json(CONFIG, config)
        run.write_json(IDENTITY, {"command": name, "config_sha256": config_hash(run.path)})
    except BaseException:
        run.discard()
        raise
    return run






def latest_unfinished(runs_dir: Path, experiment: str) -> Path:
    """The newest run of `experiment` that has a config and is not finished (for --resume);
    never a staging folder (hidden) of a run being written."""
    base = Path(runs_dir) / experiment
    candidates = sorted(
        (p for p in base.glob("*") if not p.name.startswith(".") and (p / CONFIG).exists()
         and not is_finished(p)),
        key=lambda p: p.name,
    ) if base.is_dir() else []
    if not candidates:
        raise ConfigError(f"--resume: no unfinished run of {experiment!r} under {base}")
    return candidates[-1]


def read_result(run_dir: str | Path, name: str, hint: str | None = None) -> Any:
    """A result file of a run folder (`summary.json`, a records file, `conditions.json`,
    `phase.json`; JSONL by its suffix) with every key under its current name
    (`store.keys.current`): a folder written before a quantity was renamed reads as a new one."""
    path = Path(run_dir) / name
    data = read_jsonl(path, hint) if path.suffix == ".jsonl" else read_json(path, hint)
    return current(data, run_command(_run_of(path)))


def _run_of(path: Path) -> Path:
    """The run folder holding result file `path` (a checkpoint piece sits one level down)."""
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


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
        saved = current(read_json(path, hint=hint), run_command(self.dir.parent))
        if not (isinstance(saved, dict) and isinstance(saved.get("records"), list)
                and isinstance(saved.get("summary"), dict)
                and all(isinstance(r, dict) for r in saved["records"])):
            raise DataError(path, "not a knowflow checkpoint (expected records and a "
                            "summary)", hint=hint)
        return saved

    def save(self, key: str, records: list[dict], summary: dict) -> None:
        atomic_write_json(self.dir / f"{key}.json", {"records": records, "summary": summary})
        checkpoint_saved(self.dir.parent)
