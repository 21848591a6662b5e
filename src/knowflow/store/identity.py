"""What makes a folder a knowflow run: `run.json` (`IDENTITY`), and the names of its files.

A run folder is identified by `run.json` and by nothing else: the command that wrote it and
the SHA-256 of its `config.json`, so `--resume` can tell a `sft` run from a `cpi-toy` run and
an edited config from the one the run started with. A folder without it is the user's (its
name, its parent's name or a config.json never make it a run). Once a run completes,
`run.json` also lists the files it wrote (`files`): a later run over the folder is refused
while it holds anything else.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from knowflow.errors import DataError
from knowflow.store.readers import read_json
from knowflow.store.schemas import RunIdentity, read_checked

CONFIG, METRICS, SUMMARY, REPORT = "config.json", "metrics.jsonl", "summary.json", "report.html"
ITEMS, RECORDS = "items.jsonl", "records.jsonl"  # an eval's per-item, a probe's per-example
IDENTITY = "run.json"
LOCK = ".knowflow.lock"
IN_PROGRESS = "in_progress"  # run.json's mark of a run kept to be resumed
TRACKER = "tracker.json"  # a RelianceTracker folder's: the model, the tracked data, a label


def config_hash(run_dir: Path) -> str:
    return hashlib.sha256((Path(run_dir) / CONFIG).read_bytes()).hexdigest()


def _identity(run_dir: Path) -> dict:
    """`run.json` as written, or {} when it is missing or not a JSON object."""
    try:
        ident = read_json(Path(run_dir) / IDENTITY)
    except (OSError, DataError):
        return {}
    return ident if isinstance(ident, dict) else {}


def run_command(run_dir: Path) -> str | None:
    """The command that wrote run folder `run_dir` (an experiment's name, `eval`,
    `probe-<kind>`), or None if it is not a knowflow run. Only the marker knowflow writes
    (`run.json` naming the command) makes a folder a run: never its parent's name or a
    config.json that looks like one (a user's own files are never taken for a run)."""
    command = _identity(run_dir).get("command")
    return command if isinstance(command, str) and command else None


def run_files(run_dir: Path) -> set[str] | None:
    """The names a run wrote at its top level, as its `run.json` lists them (`files`, written
    when the run completes), or None for a run that lists none (older runs)."""
    files = _identity(run_dir).get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return set(files)


def own_files(run_dir: Path) -> list[str]:
    """The top-level names in a run folder being completed (its lock aside): what `run.json`
    lists as `files`."""
    return sorted(p.name for p in Path(run_dir).iterdir() if p.name != LOCK)


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
    saved = read_checked(path, RunIdentity, hint="start a fresh run (without --resume)"
                         ).config_sha256
    if saved is None:
        raise DataError(path, "not a knowflow run identity (no config_sha256)",
                        hint="start a fresh run (without --resume)")
    if saved != config_hash(run_dir):
        raise DataError(Path(run_dir) / CONFIG, "changed since the run started (its hash "
                        f"differs from {IDENTITY}'s)", hint="put the original back, or start "
                        "a fresh run with the changed settings (--set)")


def in_progress(run_dir: Path) -> bool:
    """Whether `run.json` marks the run as kept to be resumed."""
    try:
        return read_checked(Path(run_dir) / IDENTITY, RunIdentity).in_progress
    except (OSError, DataError):
        return False


def is_finished(run_dir: Path) -> bool:
    """A run with its summary.json and no in-progress mark in run.json."""
    return (Path(run_dir) / SUMMARY).exists() and not in_progress(run_dir)
