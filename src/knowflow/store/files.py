"""Atomic file writes: a reader never sees a half-written file (temp file + rename).

Every byte knowflow writes goes through `atomic_write_bytes` (and `fill`, the one place the
fault-injection tests patch). `file_group()` holds several writes back and renames them into
place together at the block's end, or removes them all if the block fails.
"""

from __future__ import annotations

import json
import os
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
# (temp file, target) of writes held back by `file_group` (None: rename at once)
PENDING: list[tuple[Path, Path]] | None = None


def fill(fd: int, data: bytes, path: Path) -> None:
    """Write `data` to the open temp file `fd` of `path` and flush it to disk: the one place
    knowflow's output bytes are written (the fault-injection tests patch it)."""
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` through a temp file in the same folder, then rename (inside a
    `file_group`, at the group's end)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _replaceable(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        fill(fd, data, path)
        if PENDING is not None:
            PENDING.append((Path(tmp), path))
        else:
            os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # a failed write(2)/fsync names no file: name the target
            exc.filename = str(path)
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _replaceable(path: Path) -> None:
    """A write replaces only a regular file: never a device, a pipe, a socket or a folder."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode):
        raise KnowflowError(f"{path}: exists and is not a regular file; knowflow does not "
                            "write over it", "give the path of a new or an ordinary file")


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
    global PENDING
    pending: list[tuple[Path, Path]] = []
    outer = PENDING
    PENDING = pending
    try:
        yield
    except BaseException:
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        raise
    finally:
        PENDING = outer
    for tmp, path in pending:
        os.replace(tmp, path)
