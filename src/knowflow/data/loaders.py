"""Loaders for external knowledge-conflict files and hub datasets: the one loader.

`load_suites` gives built-in suites and files together, by name (a seeded sample of each with
a limit). Records come from a JSON list, JSONL, CSV, parquet, a `datasets` save_to_disk folder
(`tables.py` reads the last two and maps other layouts' columns) or a hub dataset
(`hf:ORG/NAME[:CONFIG][@SPLIT]`, or a published benchmark's name such as `nq-swap`
(`benchmarks.py`), read by `hub.py` with the benchmark's preset; a file of that name wins);
they are read as:
- records with `context`, `question`, `answer` and `memory_answer` or `parametric_answer`
  (optional `id`, `answer_aliases`, `memory_aliases`), or columns mapped to those names
  (`fields`, or a layout preset of `presets.py`: NQ-Swap, ConflictQA, MemoTrap, ClashEval,
  named or recognised from the columns);
- knowflow's own JSONL schema (`ConflictItem.to_dict()`: `counterfactual_answer`, ...);
- MemoTrap's columns (`prompt`, `classes`, `answer_index`): the instruction before the first
  ':' is the context, the rest is the text to complete; `classes[answer_index]` is the answer
  the instruction asks for, the other class the memorized one.
Anything malformed raises one `DataError` naming the file, line and field. Every answer and alias
is read by the one answer-text rule (`answer_text.py`: NFC, zero-width and control characters
removed); an answer the rule leaves empty (only zero-width or control characters) is refused
by field; one with no word generation could match (only punctuation, only an article) is kept
for log-likelihood and left out by generation like equal answers; an alias of that kind is
dropped, repeated aliases kept once. An item
whose context answer is its memory answer after that rule (so also an NFC and an NFD spelling
of one word) cannot tell the two apart under any scoring: it is skipped, with one warning.
Answers that differ only in case or punctuation (MemoTrap's " End." / " end.") are kept:
log-likelihood scoring scores the two continuations as given, and generation scoring, whose
normalisation makes them one answer, skips them itself (`evaluation.items`,
`n_skipped_equal_answers` in the summary).
"""

from __future__ import annotations

import ast
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from knowflow.data.answer_text import answer_problem, clean_answer, unique_aliases
from knowflow.data.benchmarks import no_such_file
from knowflow.data.conditions import AGREEING, with_condition_contexts
from knowflow.data.facts import ConflictItem
from knowflow.data.hub import HubSpec, hub_table, is_hub, resolve
from knowflow.data.presets import check_columns, get_preset
from knowflow.data.quality import warn_duplicate_keys
from knowflow.data.suites import get_suite, list_suites, sample
from knowflow.data.tables import (
    QA_FIELDS,
    arrow_rows,
    is_table,
    known_layout,
    no_mapping,
    renamed,
    resolve_columns,
    table_rows,
)
from knowflow.errors import ConfigError, DataError
from knowflow.store.files import atomic_write_jsonl
from knowflow.store.readers import csv_rows, json_records, not_a_list

log = logging.getLogger(__name__)


def load_items(path: str | Path, fields: Mapping[str, str] | None = None,
               preset: str | None = None) -> list[ConflictItem]:
    """Items of an external file, a hub dataset (`hf:ORG/NAME[:CONFIG][@SPLIT]`) or a published
    benchmark by name (`benchmarks.BENCHMARKS`: `nq-swap`, ... when no file of that name
    exists); their suite is the file's stem (the dataset's config or name; the benchmark's
    name). `fields` maps knowflow's field names to the file's columns (`tables.parse_fields`);
    `preset` names a published layout (`presets.PRESETS`; a benchmark's own by default), which
    `fields` may override field by field."""
    return load_items_checked(path, fields, preset)[0]


def _same_answers(item: ConflictItem) -> bool:
    return item.counterfactual_answer.strip() == item.parametric_answer.strip()


def load_items_checked(path: str | Path, fields: Mapping[str, str] | None = None,
                       preset: str | None = None
                       ) -> tuple[list[ConflictItem], dict[str, int | str]]:
    """`load_items`, and the data-quality counts: items skipped because their two answers
    coincide, records that give a key twice (each warned about in one line), and `preset`:
    the layout preset the columns were read with (given or recognised), if any."""
    source = resolve(path) if is_hub(path) else Path(path)
    preset = preset or (source.preset if isinstance(source, HubSpec) else None)
    chosen = get_preset(preset) if preset else None
    items, used = _read_items(source, dict(fields or {}), chosen)
    same = [it for it in items if _same_answers(it)]
    if len(same) == len(items):
        raise DataError(path, "every item's answer equals its memory answer",
                        hint="give items whose context contradicts what the model knows")
    if same:
        ids = ", ".join(it.id for it in same[:5]) + (", ..." if len(same) > 5 else "")
        log.warning("%s: skipped %d item(s) whose answer equals the memory answer (%s)",
                    path, len(same), ids)
    json_text = not is_hub(path) and Path(path).suffix.lower() in (".json", ".jsonl")
    counts: dict[str, int | str] = {
        "n_skipped_same_answers": len(same),
        "n_duplicate_keys": warn_duplicate_keys(Path(path)) if json_text else 0}
    if used:
        log.info("%s: read with the %s preset", path, used)
        counts["preset"] = used
    return with_condition_contexts([it for it in items if not _same_answers(it)]), counts


def _read_items(path: Path | HubSpec, fields: dict[str, str], preset
                ) -> tuple[list[ConflictItem], str | None]:
    """The items of `path` and the preset their columns were read with."""
    tabular = isinstance(path, HubSpec) or is_table(path)
    if isinstance(path, HubSpec):  # a hub dataset
        suite = path.suite
        columns, rows = arrow_rows(hub_table(path))
        kind, mapping, used = resolve_columns(path, columns, fields, preset=preset)
    elif not path.exists() or not (path.is_file() or is_table(path)):
        raise no_such_file(path)
    else:
        suite = path.stem if path.is_file() else path.name
        rows, (kind, mapping, used) = _file_rows(path, fields, preset)
    items = []
    need = get_preset(used) if used else None  # each record holds the columns it reads
    for i, (line, rec) in enumerate(rows):
        where, at = (f"{path}, row {line}", None) if tabular else (path, line)
        if need is not None and isinstance(rec, dict):
            check_columns(where, need, list(rec), line=at, mapping=mapping, record=True)
        if kind == "memotrap":
            items.append(_memotrap_item(where, at, _cells(where, at, rec, mapping), suite, i))
        else:
            rec = renamed(where, at, rec, mapping) if kind == "qa" else rec
            if kind == "json":
                _check_native(path, line, rec)
            items.append(_record_item(where, at, rec, suite, i))
    if not items:
        raise DataError(path, "no records")
    return items, used


def _file_rows(path: Path, fields: dict[str, str], preset):
    """(line or row number, record) of a file, and how its columns map (`resolve_columns`)."""
    if is_table(path):
        columns, rows = table_rows(path)
        return rows, resolve_columns(path, columns, fields, preset=preset)
    if path.suffix.lower() == ".csv":
        columns, rows = csv_rows(path)
        return rows, resolve_columns(path, columns, fields, header_line=1, preset=preset)
    rows = json_records(path)
    first = next(rows, None)
    if first is None:
        raise DataError(path, "no records")
    columns = list(first[1]) if isinstance(first[1], dict) else []
    if fields or preset:
        return _chain(first, rows), resolve_columns(path, columns, fields, header_line=first[0],
                                                    preset=preset)
    found = None if {"answer", "counterfactual_answer"} & set(columns) else \
        known_layout(path, columns, line=first[0])
    return _chain(first, rows), found or ("json", {}, None)


_NATIVE = {"context", "question", "answer", "memory_answer", "parametric_answer",
           "counterfactual_answer"}


def _chain(first, rest):
    yield first
    yield from rest


def _check_native(path: Path, line: int, rec: object) -> None:
    """A record in knowflow's names lacking one: name the field and the columns it has."""
    if not isinstance(rec, dict):
        return
    if "counterfactual_answer" in rec:
        need = ("context", "question", "counterfactual_answer", "parametric_answer")
    else:
        need = QA_FIELDS if "parametric_answer" not in rec else QA_FIELDS[:3]
    missing = next((f for f in need if f not in rec), None)
    if missing == "context" and not set(rec) & _NATIVE:
        wrapped = [k for k, v in rec.items() if isinstance(v, list) and v
                   and all(isinstance(x, dict) for x in v)]
        if len(wrapped) == 1:  # {"data": [{...}, ...]} on one line: records wrapped, not one
            raise not_a_list(path, f"a JSON object holding a list under {wrapped[0]!r}", line)
        raise no_mapping(path, list(rec), line=line, field=missing)
    if missing == "memory_answer":
        raise DataError(path, "missing (or 'parametric_answer')", line=line, field=missing)
    if missing is not None:
        raise DataError(path, f"missing; the record has {', '.join(rec) or 'no fields'}",
                        line=line, field=missing,
                        hint="rename it, or map it with --fields")


def _cells(where, line, rec: object, mapping: Mapping[str, str]) -> dict:
    if not isinstance(rec, dict):
        raise DataError(where, f"expected an object, got {type(rec).__name__}", line=line)
    return {key: rec.get(column) for key, column in mapping.items()}


def save_items(path: str | Path, items: list[ConflictItem]) -> Path:
    """Write items in knowflow's JSONL schema (readable by `load_items`)."""
    return atomic_write_jsonl(path, [it.to_dict() for it in items])


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


def _answer(path: Path, line: int, rec: dict, name: str) -> str:
    """An answer field under the answer-text rule; one left empty by it is refused. One with
    no word generation could match ("The", "???", a letter "A") is kept: log-likelihood scores
    it, and generation leaves the item out as it does equal answers (evaluation/items.py)."""
    text = clean_answer(_text(path, line, rec, name))
    if not text:
        raise DataError(path, f"{answer_problem(text)}: nothing could ever match it",
                        line=line, field=name, hint="give the answer's words")
    return text


def _aliases(path: Path, line: int, rec: dict, name: str, answer: str) -> tuple[str, ...]:
    value = rec.get(name, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(path, "expected a list of strings", line=line, field=name)
    return unique_aliases(answer, value)


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
        cf = _answer(path, line, rec, "counterfactual_answer")
        par = _answer(path, line, rec, "parametric_answer")
        return ConflictItem(
            id=str(ident), suite=suite, context=context, question=question,
            counterfactual_answer=cf, parametric_answer=par,
            counterfactual_aliases=_aliases(path, line, rec, "counterfactual_aliases", cf),
            parametric_aliases=_aliases(path, line, rec, "parametric_aliases", par),
            task=task, relation=_text(path, line, rec, "relation", required=False,
                                      allow_empty=True),
            subject=_text(path, line, rec, "subject", required=False, allow_empty=True),
            meta={**(rec["meta"] if isinstance(rec.get("meta"), dict) else {}),
                  **_agreeing(path, line, rec)})
    memory = "memory_answer" if "memory_answer" in rec else "parametric_answer"
    if memory not in rec:
        raise DataError(path, "missing (or 'parametric_answer')", line=line,
                        field="memory_answer")
    cf, par = _answer(path, line, rec, "answer"), _answer(path, line, rec, memory)
    return ConflictItem(
        id=str(ident), suite=suite, context=context, question=question,
        counterfactual_answer=cf, parametric_answer=par,
        counterfactual_aliases=_aliases(path, line, rec, "answer_aliases", cf),
        parametric_aliases=_aliases(path, line, rec, "memory_aliases", par),
        meta=_agreeing(path, line, rec))


def _agreeing(path: Path, line: int, rec: dict) -> dict:
    """The record's own agreeing context (`agreeing_context`, NQ-Swap's `org_context`, or
    the `meta` of knowflow's JSONL)."""
    meta = rec.get("meta")
    if rec.get(AGREEING) is None and isinstance(meta, dict) and \
            isinstance(meta.get(AGREEING), str):
        rec = meta
    if rec.get(AGREEING) is None:
        return {}
    text = _text(path, line, rec, AGREEING, required=False, allow_empty=True)
    return {AGREEING: text} if text else {}


def _memotrap_item(path, line: int | None, row: dict, suite: str, index: int
                   ) -> ConflictItem:
    """A MemoTrap row; CSV cells are text, parquet/JSON cells may be a list and an int."""
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise DataError(path, "empty" if not prompt else
                        f"expected a string, got {type(prompt).__name__}", line=line,
                        field="prompt")
    prompt = prompt.strip()
    classes = row.get("classes")
    try:
        if isinstance(classes, str):
            classes = ast.literal_eval(classes.strip())
    except (ValueError, SyntaxError):
        raise DataError(path, "expected a list such as [' early', ' never']", line=line,
                        field="classes") from None
    if (not isinstance(classes, (list, tuple)) or len(classes) < 2
            or not all(isinstance(c, str) and c.strip() for c in classes)):
        raise DataError(path, "expected a list of at least two non-empty strings", line=line,
                        field="classes")
    try:
        answer = row.get("answer_index")
        if isinstance(answer, bool) or not isinstance(answer, (int, str)):
            raise ValueError
        answer = int(answer.strip() if isinstance(answer, str) else answer)
    except ValueError:
        raise DataError(path, "expected an integer", line=line, field="answer_index") from None
    if not 0 <= answer < len(classes):
        raise DataError(path, f"{answer} is not an index into classes", line=line,
                        field="answer_index")
    memory = next(c for i, c in enumerate(classes) if i != answer)
    cf, par = (_answer(path, line, {"classes": c}, "classes") for c in (classes[answer], memory))
    context, sep, rest = prompt.partition(":")
    if not sep or not rest.strip():
        context, rest = "", prompt
    return ConflictItem(
        id=f"{suite}-{index:04d}", suite=suite, context=(context + sep).strip(),
        question=rest.strip(), counterfactual_answer=cf, parametric_answer=par, task="complete")


def load_suites(suites: str | Sequence[str] | None = None,
                data: str | Path | Sequence[str | Path] | None = None,
                limit: int | None = None, seed: int = 0,
                quality: dict[str, dict] | None = None,
                fields: dict[str, str] | None = None, preset: str | None = None
                ) -> dict[str, list[ConflictItem]]:
    """Items by suite name: built-in suites by name, external files by their stem (hub
    datasets, `hf:ORG/NAME`, by their name).

    `quality`, if given, receives each file's data-quality counts by suite name; `fields`
    maps knowflow's field names to the files' columns (`data.tables.parse_fields`), `preset`
    names their published layout (`data.presets`)."""
    names = [s.strip() for s in suites.split(",")] if isinstance(suites, str) else \
        list(suites or [])
    files = [data] if isinstance(data, (str, Path)) else list(data or [])
    if isinstance(suites, str) and not any(names):
        raise ConfigError(f"{suites!r} names no suite", "suite",
                          f"give one or more of {', '.join(list_suites())}, comma-separated")
    if not names and not files:
        names = list(list_suites())
    out: dict[str, list[ConflictItem]] = {}
    for name in filter(None, names):
        out[name] = get_suite(name, seed=seed, limit=limit)
    for path in files:
        items, counts = load_items_checked(path, fields, preset)
        name = items[0].suite
        if quality is not None:
            quality[name] = counts
        out[name] = sample([dataclasses.replace(i, suite=name) for i in items], limit, seed,
                           name)
    return out
