"""Data-quality checks that warn and go on: problems a run survives, but a user should hear of.

- Duplicated keys in a JSON object (`{"answer": "a", "answer": "b"}`): Python's JSON reader keeps
  the last value silently; knowflow keeps it too, and says how many records had one.
- Items whose context answer is their memory answer as written: such an item scores as both
  right and wrong, so the evaluation skips it (see `knowflow.data.loaders.load_items`);
  answers equal only after generation's normalisation are skipped by generation scoring alone.
Each check logs one warning line with a count; the count also goes into the run's summary.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from knowflow.errors import DataError
from knowflow.store.readers import decode_json, jsonl_lines

log = logging.getLogger(__name__)


@contextmanager
def checks_only() -> Iterator[None]:
    """A file read only to check it before a run (its items are read again by the run that
    uses them): the data-quality warnings are left to that read, so each is said once."""
    parent = logging.getLogger("knowflow.data")  # the loaders' and these checks' loggers
    level = parent.level
    parent.setLevel(logging.ERROR)
    try:
        yield
    finally:
        parent.setLevel(level)


def _hook(found: set[int], where: int):
    def pairs(items: list[tuple[str, object]]) -> dict:
        keys = [k for k, _ in items]
        if len(set(keys)) < len(keys):
            found.add(where)
        return dict(items)
    return pairs


def duplicate_key_lines(path: Path, text: str | None = None) -> list[int]:
    """Lines of a JSONL file holding an object with a key given twice (for a JSON list: the
    objects' numbers in parse order). Unreadable records are skipped: the loader reports them.
    `text`: the file's text, already read."""
    path = Path(path)
    if path.suffix.lower() == ".csv" or (text is None and not path.is_file()):
        return []
    if text is None:
        text = path.read_bytes().decode("utf-8-sig", errors="replace")
    found: set[int] = set()
    if text.lstrip().startswith("["):
        try:
            decode_json(text, path, strict=False, pairs_hook=_list_hook(found))
        except DataError:
            return []
        return sorted(found)
    for n, raw in jsonl_lines(text):
        if raw.strip():
            try:
                decode_json(raw, path, strict=False, pairs_hook=_hook(found, n))
            except DataError:
                continue
    return sorted(found)


def _list_hook(found: set[int]):
    """For a JSON list: counts objects with a duplicated key (numbered in parse order)."""
    count = [0]

    def pairs(items: list[tuple[str, object]]) -> dict:
        count[0] += 1
        keys = [k for k, _ in items]
        if len(set(keys)) < len(keys):
            found.add(count[0])
        return dict(items)
    return pairs


def warn_duplicate_keys(path: Path, lines: list[int] | None = None) -> int:
    """Log one warning if records of `path` repeat a key (`lines`: `duplicate_key_lines`
    already found); returns how many do."""
    lines = duplicate_key_lines(path) if lines is None else lines
    if lines:
        shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
        log.warning("%s: %d record(s) give a key twice (lines %s); the last value is used",
                    path, len(lines), shown)
    return len(lines)
