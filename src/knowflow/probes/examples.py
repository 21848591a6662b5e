"""Probe examples: a prompt, the subject in it, and what the probes need to know about it.

A prompts file is JSONL (one object per line) or a JSON list, with fields `prompt` (required),
`subject`, `relation` (words of the prompt), `attributes` (strings the subject is known for;
the attributes rate counts projected tokens that belong to them), `answer` (the expected
completion: an example is "known" when the model's top next token starts it) and `context`
(the context passage: a substring of the prompt, or a [start, end) character span). knowflow
ships `data/known_facts.json`: capitals, landmarks and products, written for knowflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from knowflow.errors import DataError, KnowflowError
from knowflow.store.readers import input_file, json_records, read_text

FIELDS = ("id", "prompt", "subject", "relation", "attributes", "answer", "context")


@dataclass(frozen=True)
class ProbeExample:
    prompt: str
    subject: str | None = None
    relation: str | None = None
    attributes: tuple[str, ...] = ()
    answer: str | None = None
    context: tuple[int, int] | None = None  # [start, end) characters of the prompt
    id: str = ""


def find_text(haystack: str, needle: str) -> tuple[int, int] | None:
    """Character span of `needle` in `haystack`: the first exact match, else case-insensitive."""
    start = haystack.find(needle)
    if start < 0:
        start = haystack.lower().find(needle.lower())
    return None if start < 0 or not needle else (start, start + len(needle))


def example_from_dict(data: Mapping[str, Any], source: str = "<examples>",
                      line: int | None = None) -> ProbeExample:
    """Validate one record; a problem is a DataError naming `source`, `line` and the field."""
    def bad(field: str, message: str) -> DataError:
        return DataError(source, message, line=line, field=field)

    if not isinstance(data, Mapping):
        raise DataError(source, "expected a JSON object", line=line)
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise bad(unknown[0], f"unknown field (known: {', '.join(FIELDS)})")
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise bad("prompt", "must be a non-empty string")
    for name in ("subject", "relation", "answer", "id"):
        value = data.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise bad(name, "must be a non-empty string")
    for name in ("subject", "relation"):
        value = data.get(name)
        if value is not None and find_text(prompt, value) is None:
            raise bad(name, f"{value!r} does not occur in the prompt {prompt!r}")
    attributes = data.get("attributes", ())
    if not isinstance(attributes, (list, tuple)) or not all(
            isinstance(a, str) and a.strip() for a in attributes):
        raise bad("attributes", "must be a list of non-empty strings")
    context = data.get("context")
    span = None
    if isinstance(context, str):
        span = find_text(prompt, context)
        if span is None:
            raise bad("context", "the context text does not occur in the prompt")
    elif isinstance(context, (list, tuple)):
        if (len(context) != 2 or not all(isinstance(c, int) for c in context)
                or not 0 <= context[0] < context[1] <= len(prompt)):
            raise bad("context", f"a span must be [start, end) with 0 <= start < end <= "
                                 f"{len(prompt)}")
        span = (int(context[0]), int(context[1]))
    elif context is not None:
        raise bad("context", "must be the context text or a [start, end) character span")
    return ProbeExample(prompt=prompt, subject=data.get("subject"),
                        relation=data.get("relation"), attributes=tuple(attributes),
                        answer=data.get("answer"), context=span,
                        id=str(data.get("id") or (f"{line}" if line is not None else "")))


def as_example(item: ProbeExample | Mapping[str, Any]) -> ProbeExample:
    return item if isinstance(item, ProbeExample) else example_from_dict(item)


def load_examples(path: str | Path) -> list[ProbeExample]:
    """Read a prompts file (.jsonl, or .json holding a list); errors name file, line, field."""
    path = input_file(path)
    if path.suffix == ".json" and not read_text(path).lstrip().startswith("["):
        raise DataError(path, "a .json prompts file must hold a list of objects")
    rows = list(json_records(path))  # the one reader: BOM, line numbers, huge numbers
    examples = []
    for index, (number, row) in enumerate(rows):
        ex = example_from_dict(row, str(path), line=number)
        examples.append(ex if ex.id else replace(ex, id=str(index)))
    if not examples:
        raise DataError(path, "no examples")
    return examples


def builtin_facts() -> list[ProbeExample]:
    """knowflow's shipped prompts of well-known facts (capitals, landmarks, products)."""
    ref = resources.files("knowflow.probes") / "data" / "known_facts.json"
    with resources.as_file(ref) as path:
        return load_examples(path)


def require_subject(examples: list[ProbeExample], probe: str) -> None:
    for i, ex in enumerate(examples):
        if ex.subject is None:
            raise KnowflowError(f"{probe}: example {ex.id or i} ({ex.prompt!r}) has no subject")
