"""The claim that keeps two processes out of one folder being written.

`claim(folder)` takes an exclusive `flock` on `folder/.knowflow.lock` (re-entrant within one
process, released by `release`, and by the kernel when the process dies, so a killed run
never leaves a stale claim); a second process writing the same folder is refused at once.
"""

from __future__ import annotations

import os
from pathlib import Path

from knowflow.errors import KnowflowError
from knowflow.store.identity import LOCK

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no claim
    fcntl = None

_HELD: dict[Path, list] = {}  # folder -> [fd, depth]


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
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except BaseException:  # a full disk: let go again
        lock.unlink(missing_ok=True)
        os.close(fd)
        raise
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
