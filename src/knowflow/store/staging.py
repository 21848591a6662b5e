"""Staged outputs: nothing knowflow writes is ever seen half-written.

Every output folder (a run folder, an `export lm-eval` task folder, a checkpoint) is written
under a hidden name beside its target, `.<name>.staging.<8 chars>` (same parent, so the same
file system), and renamed into place only once complete (`publish`). A failure of any kind
removes the staging folder, so the target stays exactly as it was; a target that exists (an
earlier run of the same command written again) is kept until the new folder is complete and
only then replaced (moved aside as `.<name>.old.<8 chars>`, the new one renamed in, the old
one removed).

A staging folder is claimed (`lock.claim`) while it is written: one left by a killed
process (its claim died with it) is removed by the next command that stages beside it
(`sweep`), and an old folder moved aside but not yet replaced is put back. (A resumable run
published at its first checkpoint leaves a link under its staging name while it runs:
`RunFolder.checkpointed`.)

`staged_dir(target)` is the one way to write a folder that is not a run folder: an export's
task folder, a cache entry, a trained model's folder. (For several files, not a folder:
`files.file_group`.) A full disk that the block's writer (`save_pretrained`) reports in its
own words is raised as OSError(ENOSPC) naming the target (`files.full_disk`).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from knowflow.store.files import UMASK, full_disk, make_parents, remove_made
from knowflow.store.identity import LOCK
from knowflow.store.lock import claim, is_claimed, release

STAGING = re.compile(r"^\.(?P<name>.+)\.staging\.[a-z0-9_]{8}$")
OLD = re.compile(r"^\.(?P<name>.+)\.old\.[a-z0-9_]{8}$")


def stage_dir(target: str | Path) -> Path:
    """A new, empty staging folder beside `target` (its parents are made), claimed by this
    process; stale ones beside it are swept."""
    target = Path(target)
    made = make_parents(target)
    sweep(target.parent)
    path = None
    try:
        path = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging.", dir=target.parent))
        path.chmod(0o777 & ~UMASK)  # mkdtemp makes it private; a run folder is ordinary
        claim(path)
    except BaseException as exc:  # a full disk: nothing is left, the parents made included
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        remove_made(made)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(target)  # a failed write(2) names no file
        raise
    return path


def target_of(path: str | Path) -> Path:
    """Where `path` will be once its staging folder is published: every staging folder on
    the path named as its target (`path` itself if it passes through none)."""
    parts = [(m["name"] if (m := STAGING.match(part)) else part) for part in Path(path).parts]
    return Path(*parts) if parts else Path(path)


def publish(stage: Path, target: Path, replace: bool = True) -> Path:
    """Rename complete folder `stage` to `target` and let go of it. A missing or empty
    target is taken at once; an existing one is replaced when `replace` (moved aside, the new
    one renamed in, the old one removed), else (a fresh run's timestamped name that another
    run took meanwhile) the next free name `<target>-1`, `-2`, ... is taken."""
    release(stage)
    if not replace:
        for i in range(1000):
            name = target if i == 0 else target.with_name(f"{target.name}-{i}")
            try:
                name.mkdir()  # reserved: only this process renames onto it
            except FileExistsError:
                continue
            os.replace(stage, name)
            return name
        raise FileExistsError(errno.EEXIST, "no free run folder name", str(target))
    try:
        os.replace(stage, target)  # target missing, or an empty folder
        return target
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    os.replace(target, old / target.name)
    try:
        os.replace(stage, target)
    except BaseException:
        os.replace(old / target.name, target)
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)
    return target


def remove(stage: Path) -> None:
    """Give up a staging folder: let go of it and delete it."""
    release(stage)
    shutil.rmtree(stage, ignore_errors=True)


def sweep(folder: Path) -> list[Path]:
    """Remove staging folders in `folder` that no live process holds (left by a killed
    one), and put back a folder moved aside for a replacement that never came. Returns the
    staging folders removed (a killed writer's work: it held no checkpoint, or it would have
    been published)."""
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return []
    removed = []
    for path in entries:
        if STAGING.match(path.name) and path.is_symlink():  # a published run's staging name
            if not is_claimed(path):
                path.unlink(missing_ok=True)
        elif STAGING.match(path.name) and path.is_dir() and not is_claimed(path) and \
                ((path / LOCK).exists() or _empty_and_old(path)):
            shutil.rmtree(path, ignore_errors=True)  # its writer died (its lock is left)
            removed.append(path)
        elif (match := OLD.match(path.name)) and path.is_dir() and \
                [p.name for p in path.iterdir()] == [match["name"]]:
            moved, target = path / match["name"], path.parent / match["name"]
            if not target.exists():
                os.replace(moved, target)
            shutil.rmtree(path, ignore_errors=True)
    return removed


def _empty_and_old(path: Path) -> bool:
    """Made and left before its writer claimed it (not in this last minute)."""
    return not any(path.iterdir()) and time.time() - path.stat().st_mtime > 60


@contextmanager
def staged_dir(target: str | Path, complete: str | None = None) -> Iterator[Path]:
    """Write a folder's files inside the block into the yielded staging folder; on success
    they reach `target`. Any failure removes the staging folder and leaves `target` as it was.

    A missing or empty `target` is taken whole. Otherwise, without `complete`, the staged
    files join the target's file by file (each an atomic rename; its other files are kept: an
    export into a folder of the user's). With `complete` (the file that marks a finished
    folder: a cache entry's or a model folder's `config.json`), a target that holds it was
    finished by another process and is kept as it is; one that does not was left by an earlier
    attempt of the same work (a resume rewrites it) and is replaced whole."""
    target = Path(target)
    existed = {p for p in target.parents if p.exists()}
    stage = stage_dir(target)
    try:
        yield stage
    except BaseException as exc:
        full = full_disk(exc, target)  # a writer's own words for it, before its files go
        remove(stage)
        for parent in target.parents:  # the folders made for it, emptied again
            if parent in existed or any(parent.iterdir()):
                break
            parent.rmdir()
        if full is not None and full is not exc:
            raise full from exc
        raise
    finished = complete is not None and (target / complete).exists()
    if finished:  # another process got there first: theirs is kept
        remove(stage)
        return
    if complete is not None or not target.is_dir() or not any(target.iterdir()):
        try:
            publish(stage, target)
        except OSError:
            remove(stage)
            if complete is None or not (target / complete).exists():
                raise
        return
    release(stage)
    for path in sorted(stage.rglob("*")):
        dest = target / path.relative_to(stage)
        if path.is_dir():
            dest.mkdir(exist_ok=True)
        else:
            os.replace(path, dest)
    shutil.rmtree(stage, ignore_errors=True)
