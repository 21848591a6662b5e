"""The schemas of the structured files knowflow reads back, declared once, and the one check.

A file read at an input boundary (a run folder's `run.json`, `config.json`, `summary.json` and
records that `knowflow report` and `--resume` read; an lm-eval `--log_samples` file that
`knowflow eval --from-lm-eval` reads) is checked against its schema where it is read, before a
model loads and before anything is written, so a wrong type is one `DataError` naming the file,
the line (JSONL) and the field, not a KeyError deep inside a reader. The schemas are pydantic
models and type adapters; `check` turns pydantic's first error into that message, its `loc`
written as a field path (`doc.suite`, `choices[1]`). Extra fields are kept: a schema states
what its reader needs, not everything a file may hold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    TypeAdapter,
    ValidationError,
)

from knowflow.errors import DataError
from knowflow.io import decode_json, jsonl_lines, read_json, read_text


class _Record(BaseModel):
    """A JSON object whose named fields have the declared types; other fields are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)


class RunIdentity(_Record):
    """`run.json`, the marker every run folder knowflow writes carries (outputs.IDENTITY)."""

    command: Annotated[str, Field(min_length=1)]
    config_sha256: str | None = None  # the hash of config.json (`--resume` requires it)
    in_progress: StrictBool = False


class MetricRecord(_Record):
    """One line of an experiment's or an sft run's `metrics.jsonl` (one per evaluation)."""

    step: Annotated[StrictInt, Field(ge=0)] | None = None


class ItemRecord(_Record):
    """One line of an eval's `items.jsonl` or `conditions.jsonl` (one per item and method);
    the eval page groups them by suite and method."""

    suite: str
    method: str | None = None


class LmEvalDoc(_Record):
    """The document of a task `knowflow export lm-eval` wrote (`task_docs`): an item's fields,
    its prompt and its two scored continuations (memorized, context)."""

    id: str
    suite: Annotated[str, Field(min_length=1)]
    context: str
    question: str
    counterfactual_answer: str
    parametric_answer: str
    counterfactual_aliases: list[str] = []
    parametric_aliases: list[str] = []
    task: Literal["qa", "complete"] = "qa"
    relation: str = ""
    subject: str = ""
    choices: Annotated[list[str], Field(min_length=2, max_length=2)]


class LmEvalSample(_Record):
    """One line of an lm-eval `--log_samples` file of such a task (its responses are read by
    `evaluation.lm_eval_task`, which accepts both of lm-eval's response shapes)."""

    doc: LmEvalDoc
    doc_id: StrictInt | None = None
    acc: float | None = None


JSON_OBJECT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
EVAL_SUMMARY: TypeAdapter[dict[str, dict[str, Any]]] = TypeAdapter(dict[str, dict[str, Any]])
"""An eval's `summary.json`: per suite, per scoring mode, its metrics."""

# pydantic's error types, said in JSON's words
_SAID = {"missing": "is missing", "string_type": "must be a string",
         "int_type": "must be an integer", "int_from_float": "must be an integer",
         "int_parsing": "must be an integer", "bool_type": "must be true or false",
         "float_type": "must be a number", "float_parsing": "must be a number",
         "list_type": "must be a list", "dict_type": "must be a JSON object",
         "model_type": "must be a JSON object", "model_attributes_type": "must be a JSON object",
         "too_short": "must have at least {min_length} items",
         "too_long": "must have at most {max_length} items",
         "string_too_short": "must have at least {min_length} character(s)",
         "greater_than_equal": "must be at least {ge}"}


def _field(loc: tuple) -> str | None:
    parts = ""
    for part in loc:
        parts += f"[{part}]" if isinstance(part, int) else f".{part}" if parts else str(part)
    return parts or None


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _message(error: dict) -> str:
    kind = error["type"]
    said = _SAID[kind].format(**error.get("ctx", {})) if kind in _SAID else \
        error["msg"].replace("Input should", "must", 1)
    if kind == "missing":
        return said
    return f"{said}, got {_shown(error['input'])}"


def check(schema: type[BaseModel] | TypeAdapter, value: Any, path: str | Path,
          line: int | None = None, hint: str | None = None) -> Any:
    """`value` (read from `path`, at `line` of a JSONL file) validated by `schema`: a model
    instance, or the value itself for a type adapter. A mismatch is a `DataError` naming the
    file, the line and the field of the first error."""
    adapter = schema if isinstance(schema, TypeAdapter) else None
    try:
        if adapter is not None:
            return adapter.validate_python(value)
        return schema.model_validate(value)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise DataError(path, _message(error), line=line, field=_field(error["loc"]),
                        hint=hint) from None


def read_checked(path: str | Path, schema: type[BaseModel] | TypeAdapter,
                 hint: str | None = None) -> Any:
    """A JSON file knowflow wrote (`io.read_json`), checked by `schema`."""
    return check(schema, read_json(path, hint=hint), path, hint=hint)


def read_checked_lines(path: str | Path, schema: type[BaseModel] | TypeAdapter,
                       hint: str | None = None) -> list:
    """A JSONL file knowflow wrote (`io.read_jsonl`), each line checked by `schema`."""
    return [check(schema, decode_json(text, path, line=n, what="damaged JSON line", hint=hint,
                                      strict=False), path, line=n, hint=hint)
            for n, text in jsonl_lines(read_text(path, hint)) if text.strip()]
