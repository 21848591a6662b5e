"""Loaders for external knowledge-conflict files.

Three formats, chosen by content and extension:
- a JSON list or JSONL of records with `context`, `question`, `answer` and `memory_answer` or
  `parametric_answer` (optional `id`, `answer_aliases`, `memory_aliases`);
- knowflow's own JSONL schema (`ConflictItem.to_dict()`: `counterfactual_answer`, ...);
- MemoTrap's CSV (`prompt`, `classes`, `answer_index`): the instruction before the first ':'
  is the context, the rest is the text to complete; `classes[answer_index]` is the answer the
  instruction asks for, the other class the memorized one.
Anything malformed raises one `DataError` naming the file, line and field. An item whose context
answer equals its memory answer cannot tell the two apart: it is skipped, with one warning.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from knowflow.errors import DataError
from knowflow.io import atomic_write_jsonl
from knowflow.worlds.facts import ConflictItem

log = logging.getLogger(__name__)


def load_items(path: str | Path) -> list[ConflictItem]:
    """Items of an external file; their suite is the file's stem."""
    return load_items_checked(path)[0]


def _same_answers(item: ConflictItem) -> bool:
    def norm(text: str) -> str:
        return " ".join(text.casefold().split()).strip(" .,;:!?\"'")
    return norm(item.counterfactual_answer) == norm(item.parametric_answer)


def load_items_checked(path: str | Path) -> tuple[list[ConflictItem], dict[str, int]]:
    """`load_items`, and the data-quality counts: items skipped because their two answers
    coincide, and records that give a key twice (each warned about in one line)."""
    from knowflow.worlds.quality import warn_duplicate_keys

    items = _read_items(Path(path))
    same = [it for it in items if _same_answers(it)]
    if len(same) == len(items):
        raise DataError(path, "every item's answer equals its memory answer",
                        hint="give items whose context contradicts what the model knows")
    if same:
        ids = ", ".join(it.id for it in same[:5]) + (", ..." if len(same) > 5 else "")
        log.warning("%s: skipped %d item(s) whose answer equals the memory answer (%s)",
                    path, len(same), ids)
    counts = {"n_skipped_same_answers": len(same),
              "n_duplicate_keys": warn_duplicate_keys(Path(path))}
    return [it for it in items if not _same_answers(it)], counts


def _read_items(path: Path) -> list[ConflictItem]:
    if not path.is_file():
        raise DataError(path, "no such file")
    suite = path.stem
    if path.suffix.lower() == ".csv":
        items = list(_memotrap(path, suite))
    else:
        items = [_record_item(path, line, rec, suite, i)
                 for i, (line, rec) in enumerate(json_records(path))]
    if not items:
        raise DataError(path, "no records")
    return items


def save_items(path: str | Path, items: list[ConflictItem]) -> Path:
    """Write items in knowflow's JSONL schema (readable by `load_items`)."""
    return atomic_write_jsonl(path, [it.to_dict() for it in items])


def json_records(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, record) for a JSONL file or a JSON list."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not UTF-8 text ({exc.reason})") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        yield from _json_list(path, text)
        return
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield n, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(path, f"invalid JSON ({exc.msg})", line=n) from None


def _json_list(path: Path, text: str) -> Iterator[tuple[int, object]]:
    """Elements of a top-level JSON array with the line each starts on."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1

    def skip(p: int) -> int:
        while p < len(text) and text[p] in " \t\r\n":
            p += 1
        return p

    def line_of(p: int) -> int:
        return text.count("\n", 0, p) + 1

    pos = skip(pos)
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        try:
            rec, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DataError(path, f"invalid JSON ({exc.msg})", line=line_of(exc.pos)) from None
        yield line_of(pos), rec
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            if text[skip(pos + 1):].strip():
                raise DataError(path, "text after the JSON list", line=line_of(pos))
            return
        raise DataError(path, "invalid JSON (expected ',' or ']')", line=line_of(pos))


def _text(path: Path, line: int, rec: dict, name: str, required: bool = True,
          allow_empty: bool = False) -> str:
    if name not in rec:
        if required:
            raise DataError(path, "missing", line=line, field=name)
        return ""
    value = rec[name]
    if not isinstance(value, str):
        raise DataError(path, f"expected a string, got {type(value).__name__}", line=line,
                        field=name)
    if not allow_empty and not value.strip():
        raise DataError(path, "empty", line=line, field=name)
    return value.strip()


def _aliases(path: Path, line: int, rec: dict, name: str) -> tuple[str, ...]:
    value = rec.get(name, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(path, "expected a list of strings", line=line, field=name)
    return tuple(v.strip() for v in value if v.strip())


def _record_item(path: Path, line: int, rec: object, suite: str, index: int) -> ConflictItem:
    if not isinstance(rec, dict):
        raise DataError(path, f"expected an object, got {type(rec).__name__}", line=line)
    ident = rec.get("id", f"{suite}-{index:04d}")
    if not isinstance(ident, (str, int)):
        raise DataError(path, "expected a string or number", line=line, field="id")
    context = _text(path, line, rec, "context", allow_empty=True)
    question = _text(path, line, rec, "question")
    if "counterfactual_answer" in rec:  # knowflow's own schema
        task = rec.get("task", "qa")
        if task not in ("qa", "complete"):
            raise DataError(path, "must be 'qa' or 'complete'", line=line, field="task")
        return ConflictItem(
            id=str(ident), suite=suite, context=context, question=question,
            counterfactual_answer=_text(path, line, rec, "counterfactual_answer"),
            parametric_answer=_text(path, line, rec, "parametric_answer"),
            counterfactual_aliases=_aliases(path, line, rec, "counterfactual_aliases"),
            parametric_aliases=_aliases(path, line, rec, "parametric_aliases"),
            task=task, relation=_text(path, line, rec, "relation", required=False,
                                      allow_empty=True),
            subject=_text(path, line, rec, "subject", required=False, allow_empty=True))
    memory = "memory_answer" if "memory_answer" in rec else "parametric_answer"
    if memory not in rec:
        raise DataError(path, "missing (or 'parametric_answer')", line=line,
                        field="memory_answer")
    return ConflictItem(
        id=str(ident), suite=suite, context=context, question=question,
        counterfactual_answer=_text(path, line, rec, "answer"),
        parametric_answer=_text(path, line, rec, memory),
        counterfactual_aliases=_aliases(path, line, rec, "answer_aliases"),
        parametric_aliases=_aliases(path, line, rec, "memory_aliases"))


def _memotrap(path: Path, suite: str) -> Iterator[ConflictItem]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not UTF-8 text ({exc.reason})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise DataError(path, f"not a readable CSV file ({exc})", line=1) from None
    for name in ("prompt", "classes", "answer_index"):
        if name not in header:
            raise DataError(path, "missing column", line=1, field=name)
    index = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(path, f"unreadable row ({exc})", line=reader.line_num) from None
        yield _memotrap_item(path, reader.line_num, row, suite, index)
        index += 1


def _memotrap_item(path: Path, line: int, row: dict, suite: str, index: int) -> ConflictItem:
    prompt = (row.get("prompt") or "").strip()
    if not prompt:
        raise DataError(path, "empty", line=line, field="prompt")
    try:
        classes = ast.literal_eval((row.get("classes") or "").strip())
    except (ValueError, SyntaxError):
        raise DataError(path, "expected a list such as [' early', ' never']", line=line,
                        field="classes") from None
    if (not isinstance(classes, (list, tuple)) or len(classes) < 2
            or not all(isinstance(c, str) and c.strip() for c in classes)):
        raise DataError(path, "expected a list of at least two non-empty strings", line=line,
                        field="classes")
    try:
        answer = int((row.get("answer_index") or "").strip())
    except ValueError:
        raise DataError(path, "expected an integer", line=line, field="answer_index") from None
    if not 0 <= answer < len(classes):
        raise DataError(path, f"{answer} is not an index into classes", line=line,
                        field="answer_index")
    memory = next(c for i, c in enumerate(classes) if i != answer)
    context, sep, rest = prompt.partition(":")
    if not sep or not rest.strip():
        context, rest = "", prompt
    return ConflictItem(
        id=f"{suite}-{index:04d}", suite=suite, context=(context + sep).strip(),
        question=rest.strip(), counterfactual_answer=classes[answer].strip(),
        parametric_answer=memory.strip(), task="complete")
