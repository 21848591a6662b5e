"""Knowledge-conflict items from files in other people's layouts.

`--data` reads rows from JSON/JSONL files, CSV files, parquet files (pyarrow) and folders
written by `datasets`' `save_to_disk`, then finds which columns hold the context, question,
context answer and memory answer:

- an explicit mapping, `--fields context=sub_context,question=question,answer=sub_answer,
  memory_answer=org_answer` (knowflow field = the file's column);
- knowflow's own names (`context`, `question`, `answer`, `memory_answer`/`parametric_answer`,
  or `ConflictItem.to_dict()`'s), used as they are;
- a layout preset (`presets.py`: NQ-Swap, ConflictQA, MemoTrap, ClashEval), named with
  `--preset` or recognised from the column names alone when exactly one preset fits (answer
  lists give aliases: the first is the answer, the rest aliases).

A table whose columns match none of these is an error that names the file and the columns it
found; a cell of the wrong type names the row and the column.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

from knowflow.data.presets import Preset, check_columns, detect
from knowflow.errors import ConfigError, DataError

QA_FIELDS = ("context", "question", "answer", "memory_answer")
OPTIONAL_FIELDS = ("id", "answer_aliases", "memory_aliases", "agreeing_context")
MEMOTRAP_FIELDS = ("prompt", "classes", "answer_index")
FIELD_NAMES = QA_FIELDS + OPTIONAL_FIELDS + MEMOTRAP_FIELDS

TABLE_SUFFIXES = (".parquet", ".pq")

Rows = Iterator[tuple[int, object]]  # (line or row number, record)


def parse_fields(text: str | None) -> dict[str, str]:
    """'context=sub_context,answer=sub_answer' -> {"context": "sub_context", ...}."""
    if not text:
        return {}
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, column = (s.strip() for s in part.partition("="))
        if not sep or not key or not column:
            raise ConfigError(f"{part.strip()!r} is not FIELD=COLUMN", "fields",
                              "give e.g. context=sub_context,answer=sub_answer")
        if key not in FIELD_NAMES:
            raise ConfigError(f"unknown field {key!r}", "fields",
                              f"fields are {', '.join(FIELD_NAMES)}")
        if key in out:
            raise ConfigError(f"field {key!r} is mapped twice", "fields")
        out[key] = column
    return out


def is_table(path: Path) -> bool:
    """A parquet file or a `save_to_disk` folder (read by this module, not loaders.py's JSON)."""
    return path.is_dir() or path.suffix.lower() in TABLE_SUFFIXES


def table_rows(path: Path) -> tuple[list[str], Rows]:
    """Columns and (row number, record) of a parquet file or a `save_to_disk` folder."""
    if path.is_dir():
        table = _disk_table(path)
    else:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError(path, "reading parquet needs pyarrow, one of knowflow's "
                            "dependencies", hint="pip install pyarrow (or reinstall "
                            "knowflow)") from None
        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
            raise DataError(path, f"not a readable parquet file ({_first_line(exc)})") from None
    return arrow_rows(table)


def arrow_rows(table) -> tuple[list[str], Rows]:
    """Columns and (row number, record) of an Arrow table (parquet, save_to_disk, the Hub)."""
    return list(table.column_names), \
        ((n, rec) for n, rec in enumerate(table.to_pylist(), start=1))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _disk_table(path: Path):
    """The Arrow table of a `datasets.save_to_disk` folder (one split of a DatasetDict)."""
    if (path / "dataset_dict.json").exists():
        splits = sorted(p.name for p in path.iterdir() if (p / "state.json").exists())
        raise DataError(path, f"a DatasetDict with splits {', '.join(splits) or '(none)'}",
                        hint=f"give one split's folder, e.g. {path / (splits or ['test'])[0]}")
    if not (path / "state.json").exists():
        raise DataError(path, "no such file (a folder, but not one written by datasets' "
                        "save_to_disk: no state.json)", hint="give a file or a save_to_disk folder")
    try:
        from datasets import load_from_disk
    except ImportError:
        raise DataError(path, "reading a save_to_disk folder needs the datasets package, one "
                        "of knowflow's dependencies", hint="pip install datasets (or reinstall "
                        "knowflow)") from None
    try:
        return load_from_disk(str(path)).data
    except Exception as exc:  # damaged arrow files, version mismatches, ...
        raise DataError(path, f"not a readable datasets folder ({_first_line(exc)})") from None


def resolve_columns(path: Path, columns: list[str], fields: Mapping[str, str],
                    header_line: int | None = None, preset: Preset | None = None
                    ) -> tuple[str, dict[str, str], str | None]:
    """("qa" | "memotrap" | "knowflow", knowflow field -> column, the preset used or None)
    for a table's columns (`header_line`: where a CSV file names them). `fields` overrides
    single fields of a `preset`."""
    have = set(columns)
    if fields:
        missing = [f"{k}={c}" for k, c in fields.items() if c not in have]
        if missing:
            raise DataError(path, f"--fields names column(s) the file does not have "
                            f"({', '.join(missing)}); columns found: {_listing(columns)}")
    if preset is not None:
        mapping = preset.mapping(have) | dict(fields)
        check_columns(path, preset, columns, line=header_line, mapping=mapping)
        return preset.kind, mapping, preset.name
    if fields:
        mapping = {k: k for k in FIELD_NAMES if k in have} | dict(fields)
        if all(k in mapping for k in MEMOTRAP_FIELDS) and not any(
                k in fields for k in QA_FIELDS):
            return "memotrap", mapping, None
        return "qa", _complete(path, columns, mapping), None
    if "counterfactual_answer" in have:
        return "knowflow", {}, None
    if {"context", "question", "answer"} <= have and \
            have & {"memory_answer", "parametric_answer"}:
        memory = "memory_answer" if "memory_answer" in have else "parametric_answer"
        return "qa", {k: k for k in FIELD_NAMES if k in have} | {"memory_answer": memory}, None
    found = known_layout(path, columns, line=header_line)
    if found is not None:
        return found
    raise no_mapping(path, columns, line=header_line)


def known_layout(path, columns: list[str], line: int | None = None
                 ) -> tuple[str, dict[str, str], str] | None:
    """(kind, mapping, preset name) of the one preset whose columns `columns` has, if any;
    columns of one preset's layout with some missing are that preset's error
    (`presets.detect`)."""
    preset = detect(path, columns, line=line)
    return None if preset is None else (preset.kind, preset.mapping(set(columns)), preset.name)


def no_mapping(path: Path, columns: list[str], line: int | None = None,
               field: str | None = None) -> DataError:
    """The error for columns that name no knowflow field and match no known layout."""
    return DataError(path, f"missing column(s): no usable column mapping; columns found: "
                     f"{_listing(columns)}", line=line, field=field,
                     hint="name them with --fields context=COL,question=COL,answer=COL,"
                          "memory_answer=COL")


def _complete(path: Path, columns: list[str], mapping: dict[str, str]) -> dict[str, str]:
    if "memory_answer" not in mapping and "parametric_answer" in columns:
        mapping["memory_answer"] = "parametric_answer"
    missing = [f for f in QA_FIELDS if f not in mapping]
    if missing:
        raise DataError(path, f"no column for {', '.join(missing)}; columns found: "
                        f"{_listing(columns)}", hint="add them to --fields, e.g. "
                        f"--fields {missing[0]}=COLUMN")
    return mapping


def _listing(columns: list[str]) -> str:
    return ", ".join(columns) if columns else "(none)"


def _answers(where: str, line: int, value: object, column: str) -> list[str]:
    """A string, a number, or a non-empty list of strings (first: the answer, rest:
    aliases)."""
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and \
            math.isfinite(value):
        value = [_number_text(value)]
    if not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(v, str) for v in value):
        got = "an empty list" if isinstance(value, (list, tuple)) and not value else \
            type(value).__name__
        raise DataError(where, f"expected a string or a list of strings, got {got}",
                        line=line, field=column)
    return [v for v in value if v.strip()] or [""]


def _number_text(value: int | float) -> str:
    """A numeric answer cell (ClashEval's doses and years) as text: 1990.0 -> "1990"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def renamed(where: str, line: int, rec: object, mapping: Mapping[str, str]) -> object:
    """A record in knowflow's field names (the one `loaders._record_item` reads)."""
    if not isinstance(rec, dict):
        return rec  # loaders reports the wrong type
    out: dict = {}
    for key, column in mapping.items():
        if column not in rec:
            continue
        value = rec[column]
        if key in ("answer", "memory_answer"):
            first, *rest = _answers(where, line, value, column)
            aliases = "answer_aliases" if key == "answer" else "memory_aliases"
            extra = rec.get(mapping.get(aliases, ""), [])
            extra = [extra] if isinstance(extra, str) else extra or []
            if not isinstance(extra, (list, tuple)) or \
                    not all(isinstance(v, str) for v in extra):
                raise DataError(where, f"expected a string or a list of strings, got "
                                f"{type(extra).__name__}", line=line, field=mapping[aliases])
            out[key] = first
            out[aliases] = [*rest, *extra]
        elif key not in out:
            if key in ("context", "question") and value is not None and \
                    not isinstance(value, str):
                raise DataError(where, f"expected a string, got {type(value).__name__}",
                                line=line, field=column)
            out[key] = value
    return out
