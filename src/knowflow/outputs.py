"""Where a command may write, checked once, before anything is written; and the claim that
keeps two processes out of one run folder.

Every command that writes checks its outputs here first:
- `check_out_dir(path, command)`: an `--out` folder is new, empty, or a knowflow run of the
  same command (written again); never another command's run, never a folder of the user's
  own files, never one holding an input of the command.
- `check_out_files(outputs, inputs)`: the files of `curate`, `augment` and `report` are
  regular files or new, none is an input, none is another output of the same command, none
  is a file of a knowflow run (its config, records, summary) but that run's report page.
Atomic writes (`knowflow.io`) never replace a non-regular file (a device, a pipe, a folder).

A run folder is identified by `run.json` (`IDENTITY`) and by nothing else: the command that
wrote it and the SHA-256 of its `config.json`, so `--resume` can tell a `sft` run from a
`cpi-toy` run and an edited config from the one the run started with. A folder without it
is the user's (its name, its parent's name or a config.json never make it a run).

`claim(folder)` takes an exclusive `flock` on `folder/.knowflow.lock` (re-entrant within one
process, released by `release`, and by the kernel when the process dies, so a killed run
never leaves a stale claim); a second process writing the same folder is refused at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from knowflow.errors import KnowflowError
from knowflow.io import check_output_dir, check_output_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no claim, as before
    fcntl = None

CONFIG, SUMMARY, REPORT = "config.json", "summary.json", "report.html"
IDENTITY = "run.json"
LOCK = ".knowflow.lock"
_HELD: dict[Path, list] = {}  # folder -> [fd, depth]


def config_hash(run_dir: Path) -> str:
    return hashlib.sha256((Path(run_dir) / CONFIG).read_bytes()).hexdigest()


def _identity(run_dir: Path) -> dict:
    """`run.json` as written, or {} when it is missing or not a JSON object."""
    try:
        ident = json.loads((Path(run_dir) / IDENTITY).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
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


def _regular_or_new(path: Path, what: str) -> None:
    """Outputs replace only regular files (never a device, a pipe or a socket)."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # new (or under a file: said elsewhere)
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise KnowflowError(f"{path}: the {what} exists and is not a regular file",
                            "give the path of a new or an ordinary file")


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def check_out_dir(path: str | Path, command: str, inputs=()) -> None:
    """`path` may receive a run of `command` (see the module docstring); else a
    `KnowflowError` now, before any work."""
    path = Path(path)
    check_output_dir(path, "output folder")
    _regular_or_new(path, "output folder")
    if not path.is_dir():
        return
    held = [p for p in path.iterdir() if p.name != LOCK]
    if held:
        owner = run_command(path)
        if owner is None:
            raise KnowflowError(f"{path}: the output folder is not empty and holds no "
                                "knowflow run", "give a new or empty folder (a run writes "
                                "config.json, summary.json and report.html there)")
        if owner != command:
            raise KnowflowError(f"{path}: the output folder holds a run of `{owner}`, not "
                                f"of `{command}`", "give a new or empty folder; another "
                                "command's run is never written over")
        written = run_files(path)
        foreign = sorted(p.name for p in held if written is not None and p.name not in written)
        if foreign:  # a new run replaces the whole folder: these would go with the old one
            more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
            raise KnowflowError(f"{path / foreign[0]}: the earlier run in {path} did not write "
                                f"this{more}; a new run replaces the whole folder",
                                "move your files out of the run folder, or give another --out")
    for given in inputs:
        if given is not None and Path(given).exists() and _inside(Path(given), path):
            raise KnowflowError(f"{given}: an input is inside the output folder {path}",
                                "write the run to another folder")


def check_out_files(outputs: dict[str, Path], inputs=()) -> None:
    """`outputs` ({what: path}, e.g. {"--out": kept.jsonl, "scores": kept.scores.jsonl}) may
    be written (see the module docstring); else a `KnowflowError` now, before any work."""
    seen: dict[Path, str] = {}
    for what, out in outputs.items():
        out = Path(out)
        check_output_file(out, f"{what} file")
        _regular_or_new(out, f"{what} file")
        key = out.resolve()
        if key in seen:
            raise KnowflowError(f"{out}: the {what} file would be written over the "
                                f"{seen[key]} file", "give --out a name ending in .jsonl")
        seen[key] = what
        for given in inputs:
            if given is not None and Path(given).exists() and \
                    Path(given).resolve() == key:
                raise KnowflowError(f"{out}: the {what} file would replace the input {given}",
                                    "write to a new file")
        folder = out.parent
        if out.exists() and out.name != REPORT and (folder / CONFIG).is_file() and \
                run_command(folder) is not None:
            raise KnowflowError(f"{out}: a file of the knowflow run {folder}; the {what} "
                                "would replace it", "write to a path outside the run folder")


def claim(folder: str | Path) -> None:
    """Claim run folder `folder` (which exists) for this process; a `KnowflowError` if another
    live process holds it."""
    folder = Path(folder).resolve()
    if folder in _HELD:
        _HELD[folder][1] += 1
        return
    if fcntl is None:  # pragma: no cover
        _HELD[folder] = [None, 1]
        return
    lock = folder / LOCK
    while True:
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise KnowflowError(f"{folder}: another knowflow process (pid {owner}) is writing "
                                "this run folder", "wait for it to end, or give another "
                                "folder") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:  # released and removed while we waited: take a new one
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[folder] = [fd, 1]


def is_claimed(folder: str | Path) -> bool:
    """Whether a live process (this one included) holds `folder`'s claim."""
    folder = Path(folder).resolve()
    if folder in _HELD:
        return True
    if fcntl is None or not (folder / LOCK).exists():  # pragma: no cover - Windows
        return False
    try:
        fd = os.open(folder / LOCK, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def release(folder: str | Path) -> None:
    """Undo one `claim`; the last one removes the lock file and lets go."""
    folder = Path(folder).resolve()
    held = _HELD.get(folder)
    if held is None:
        return
    held[1] -= 1
    if held[1] > 0:
        return
    del _HELD[folder]
    if held[0] is not None:
        (folder / LOCK).unlink(missing_ok=True)  # while still holding it: see `claim`
        os.close(held[0])
