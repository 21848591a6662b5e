"""Atomic file writes: a reader never sees a half-written file (temp file + rename).

Every byte knowflow writes goes through `atomic_write_bytes` (and `fill`, the one place the
fault-injection tests patch). `file_group()` holds several writes back and renames them into
place together at the block's end, or removes them all if the block fails. A write that fails
removes the folders it made for its file (a `figures/` made for a figure the full disk
refused), so a failed write leaves nothing at all.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from knowflow.errors import KnowflowError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()
_FILE_MODE = 0o666 & ~UMASK  # what open() would give; mkstemp's temp files are private
# (temp file, target) of writes held back by `file_group` (None: rename at once), and the
# folders those writes made (removed if the group fails)
PENDING: list[tuple[Path, Path]] | None = None
MADE: list[Path] = []


def fill(fd: int, data: bytes, path: Path) -> None:
    """Write `data` to the open temp file `fd` of `path` and flush it to disk: the one place
    knowflow's output bytes are written (the fault-injection tests patch it)."""
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` through a temp file in the same folder, then rename (inside a
    `file_group`, at the group's end); a failure leaves neither the file nor the folders made
    for it."""
    path = Path(path)
    made = make_parents(path)
    tmp = None
    try:
        _replaceable(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, _FILE_MODE)
        fill(fd, data, path)
        if PENDING is not None:
            PENDING.append((Path(tmp), path))
            MADE.extend(made)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        remove_made(made)
        if isinstance(exc, OSError) and (exc.filename is None or _temp_of(exc.filename, path)):
            exc.filename = str(path)  # a failed write(2)/fsync names no file, mkstemp its own
        raise
    return path


def _temp_of(name: str | bytes, path: Path) -> bool:
    """Whether `name` is a temp file of `path` (`.<name>.<8 chars>.tmp`)."""
    name = Path(os.fsdecode(name))
    return name.parent == path.parent and name.name.startswith(f".{path.name}.") and \
        name.suffix == ".tmp"


def make_parents(path: Path) -> list[Path]:
    """Make the missing folders above `path`; returns those made, deepest first (for
    `remove_made`). A failure removes the ones it made."""
    missing = []
    for parent in path.parents:
        if parent.is_dir():
            break
        missing.append(parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except BaseException:
        remove_made(missing)
        raise
    return missing


def remove_made(made: list[Path]) -> None:
    """Remove the folders `make_parents` made (deepest first) while they are empty."""
    for folder in made:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue  # never made: the mkdir failed above it
        except OSError:
            break  # a file went there meanwhile: it and the folders above it stay


def _replaceable(path: Path) -> None:
    """A write replaces only a regular file: never a device, a pipe, a socket or a folder."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode):
        raise KnowflowError(f"{path}: exists and is not a regular file; knowflow does not "
                            "write over it", "give the path of a new or an ordinary file")


# How other libraries' writers (safetensors, torch's zip writer) report a full disk in an
# error of their own type
_FULL_DISK_WORDS = ("no space left on device", "os error 28", "disk quota exceeded",
                    "file write failed")
FULL_MARGIN = 2**20  # bytes left on a file system that a failed writer has filled


def full_disk(exc: BaseException, path: str | Path) -> OSError | None:
    """`exc`, raised by another library's writer (`save_pretrained`, the Trainer's checkpoint,
    `torch.save`) while it wrote under `path`, as the OSError(ENOSPC) it stands for, naming
    `path`; None when it is something else. safetensors says "No space left on device (os
    error 28)"; torch's zip writer says "file write failed", or only "unexpected pos" with
    the disk left full: a RuntimeError from a writer on a file system with less than
    `FULL_MARGIN` bytes left is taken for a full disk. Call it before the written files are
    removed (they are what filled the disk)."""
    if isinstance(exc, OSError):
        if exc.filename is None:
            exc.filename = str(path)
        return exc if exc.errno in (errno.ENOSPC, errno.EDQUOT) else None
    if isinstance(exc, KnowflowError) or not isinstance(exc, Exception):
        return None
    text = str(exc).lower()
    said = any(word in text for word in _FULL_DISK_WORDS)
    writer = isinstance(exc, RuntimeError) or type(exc).__module__.startswith("safetensors")
    if said or (writer and _free(Path(path)) < FULL_MARGIN):
        full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        full.__cause__ = exc
        return full
    return None


def _free(path: Path) -> float:
    """Bytes left on the file system holding `path` (its nearest existing folder)."""
    for folder in (path, *path.parents):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(folder).free
    return float("inf")


@contextmanager
def written_by_others(path: str | Path) -> Iterator[None]:
    """Around another library's writes under `path`: a full disk it reports in its own words
    is raised as OSError(ENOSPC) naming `path` (`full_disk`), the one error every boundary
    knows."""
    try:
        yield
    except Exception as exc:
        full = full_disk(exc, path)
        if full is None or full is exc:
            raise
        raise full from exc


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(obj: Any) -> Any:
    """Turn numpy/torch scalars and tuples into plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays/scalars, torch tensors
        return obj.tolist()
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n")


def atomic_write_jsonl(path: str | Path, records: Iterable[dict]) -> Path:
    lines = [json.dumps(to_jsonable(r)) for r in records]
    return atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))


@contextmanager
def file_group() -> Iterator[None]:
    """Inside the block, atomic writes are renamed into place together at its end; a failure
    removes them all, so no file of the group is written alone (`curate`'s rows, scores and
    figure)."""
    global PENDING, MADE
    pending: list[tuple[Path, Path]] = []
    made: list[Path] = []
    outer = PENDING, MADE
    PENDING, MADE = pending, made
    try:
        yield
    except BaseException:
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        for folder in sorted(made, key=lambda f: len(f.parts), reverse=True):  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    finally:
        PENDING, MADE = outer
    for tmp, path in pending:
        os.replace(tmp, path)
    if PENDING is not None:  # an outer group removes them if it fails
        MADE.extend(made)
