"""Where a command may write, checked once, before anything is written.

Every command that writes checks its outputs here first:
- `check_out_dir(path, command)`: an `--out` folder is new, empty, or a knowflow run of the
  same command (written again); never another command's run, never a folder of the user's
  own files, never one holding an input of the command.
- `check_out_files(outputs, inputs)`: the files of `curate`, `augment` and `report` are
  regular files or new, none is an input, none is another output of the same command, none
  is a file of a knowflow run (its config, records, summary) but that run's report page.
Both refuse, before any work, a location that cannot be made or written (it is a file, a
parent is a file, it is not writable). Atomic writes never replace a non-regular file (a
device, a pipe, a folder).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from knowflow.errors import KnowflowError
from knowflow.store.identity import CONFIG, LOCK, REPORT, run_command, run_files


def _check_writable(path: Path, what: str, want_dir: bool) -> None:
    if path.exists():
        if want_dir and not path.is_dir():
            raise KnowflowError(f"{path}: the {what} is a file", "give a folder path")
        if not want_dir and path.is_dir():
            raise KnowflowError(f"{path}: the {what} is a folder", "give a file path")
        folder = path if want_dir else path.parent
    else:
        folder = path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise KnowflowError(f"{path}: cannot create the {what}: {folder} is a file",
                                "give a path under a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise KnowflowError(f"{folder}: permission denied (cannot write the {what} there)",
                            "choose a writable location or fix its permissions")


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


def check_out_dir(path: str | Path, command: str | None = None, inputs=(),
                  what: str = "output folder") -> None:
    """`path` may receive a run of `command` (see the module docstring); else a
    `KnowflowError` now, before any work. With no `command` (a runs root, a cache, an export's
    task folder, named by `what`), only that it can be made and written is checked."""
    path = Path(path)
    _check_writable(path, what, want_dir=True)
    if command is None or not path.is_dir():
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
        _check_writable(out, f"{what} file", want_dir=False)
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
