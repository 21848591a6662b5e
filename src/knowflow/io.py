"""Atomic file writes: a reader never sees a half-written result (temp file + rename)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp's temp files are private


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` through a temp file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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


def read_json(path: str | Path, hint: str | None = None) -> Any:
    """A JSON file knowflow wrote; damage is a `DataError` naming the file and line."""
    from knowflow.errors import DataError

    text = _read_text(path, hint)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"damaged JSON ({exc.msg})", line=exc.lineno,
                        hint=hint) from None


def read_jsonl(path: str | Path, hint: str | None = None) -> list[dict]:
    """A JSONL file knowflow wrote; damage is a `DataError` naming the file and line."""
    from knowflow.errors import DataError

    records = []
    for n, line in enumerate(_read_text(path, hint).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(path, f"damaged JSON line ({exc.msg})", line=n, hint=hint) from None
    return records


def _read_text(path: str | Path, hint: str | None) -> str:
    from knowflow.errors import DataError

    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x})", line=line,
                        hint=hint) from None


def check_output_dir(path: str | Path, what: str = "output folder") -> None:
    """Raise a `KnowflowError` now, before any work, if folder `path` cannot be made or
    written (it is a file, a parent is a file, or it is not writable)."""
    _check_writable(Path(path), what, want_dir=True)


def check_output_file(path: str | Path, what: str = "output file") -> None:
    """Like `check_output_dir`, for a file `path` (it must not be a folder)."""
    _check_writable(Path(path), what, want_dir=False)


def _check_writable(path: Path, what: str, want_dir: bool) -> None:
    from knowflow.errors import KnowflowError

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


def atomic_write_folder(target: str | Path, write: Callable[[Path], None], marker: str) -> Path:
    """Fill a temp folder beside `target` with `write(tmp)`, then rename it into place.

    Readers never see a half-written folder. If another process finished `target` first (its
    `marker` file exists), theirs is kept.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; a cache folder is an ordinary folder
    try:
        write(tmp)
        if target.is_dir() and not (target / marker).exists():
            # left by an earlier attempt of the same run (a resume rewrites it): swap it out
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            os.replace(target, old / target.name)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / marker).exists():
            raise
    return target
