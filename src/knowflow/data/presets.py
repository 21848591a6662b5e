"""Layout presets: the published column layouts of knowledge-conflict benchmarks, mapped to
knowflow's fields, so `--preset nq-swap` (or no flag at all) reads them without `--fields`.

A preset names the columns it needs (the context, the question, the context's answer and the
memory's answer, or MemoTrap's prompt/classes/answer_index) and the optional ones it uses when
present (NQ-Swap's original passage as the agreeing context). Given no `--preset` and no
`--fields`, a file whose columns hold every required column of exactly one preset is read
with that preset; the loader reports which (`preset` in the data-quality counts, which
`knowflow eval` records in its config and summary). Where each benchmark is published, and the
name that reads it (`--data nq-swap`), is `benchmarks.py`'s registry; each layout, its source and
why FaithEval is left out are listed in docs/commands/eval-data.md ("Benchmarks by name").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from knowflow.errors import ConfigError, DataError


@dataclass(frozen=True)
class Preset:
    """One published layout: `columns` maps knowflow's fields to the required columns,
    `optional` to columns used when present; `kind` is "qa" (a context, a question, two
    answers) or "memotrap" (a prompt and two classes, read by `loaders._memotrap_item`)."""

    name: str
    columns: dict[str, str]
    kind: str = "qa"
    optional: dict[str, str] = field(default_factory=dict)

    def mapping(self, have: set[str]) -> dict[str, str]:
        """knowflow field -> column: the required columns and the optional ones present."""
        return {**self.columns, **{k: c for k, c in self.optional.items() if c in have}}


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("nq-swap", {"context": "sub_context", "question": "question",
                       "answer": "sub_answer", "memory_answer": "org_answer"},
           optional={"agreeing_context": "org_context"}),
    Preset("conflictqa", {"context": "counter_memory", "question": "question",
                          "answer": "counter_answer", "memory_answer": "memory_answer"}),
    Preset("memotrap", {"prompt": "prompt", "classes": "classes",
                        "answer_index": "answer_index"}, kind="memotrap"),
    Preset("clasheval", {"context": "context_mod", "question": "question",
                         "answer": "answer_mod", "memory_answer": "answer_original"}),
)}


def get_preset(name: str) -> Preset:
    """The preset called `name`; an unknown name is a `ConfigError` listing the presets."""
    try:
        return PRESETS[name.strip().lower()]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}", "preset",
                          f"presets are {', '.join(PRESETS)}") from None


# knowflow's own field names: a column of that name tells no preset apart
_OWN_NAMES = frozenset({"context", "question", "answer", "memory_answer", "parametric_answer",
                        "counterfactual_answer"})
ROLES = {"context": "the context", "question": "the question", "answer": "the context's answer",
         "memory_answer": "the memory answer", "prompt": "the prompt",
         "classes": "the two answers", "answer_index": "which answer the prompt asks for"}


def _marks(preset: Preset) -> set[str]:
    """The required columns that only `preset` names (not knowflow's own field names)."""
    others = {c for p in PRESETS.values() if p is not preset for c in p.columns.values()}
    return set(preset.columns.values()) - others - _OWN_NAMES


def detect(where, columns: list[str], line: int | None = None) -> Preset | None:
    """The one preset whose required columns `columns` holds (None if none does); two at once
    is ambiguous and an error, so a guess never decides what is scored. Columns that hold
    some of one preset's own columns but not all are that preset's layout with a column
    missing: the error names the preset and the column (`missing_columns`)."""
    have = set(columns)
    found = [p for p in PRESETS.values() if set(p.columns.values()) <= have]
    if len(found) > 1:
        raise DataError(where, f"the columns fit several presets "
                        f"({', '.join(p.name for p in found)})",
                        hint="choose one with --preset")
    if found:
        return found[0]
    hits = {p.name: sorted(_marks(p) & have, key=columns.index) for p in PRESETS.values()}
    most = max(len(h) for h in hits.values())
    near = [name for name, h in hits.items() if h and len(h) == most]
    if len(near) == 1:
        preset = PRESETS[near[0]]
        raise missing_columns(where, preset, columns, line=line,
                              how=f" (recognised from {', '.join(hits[preset.name])})")
    return None


def missing_columns(where, preset: Preset, columns, line: int | None = None, how: str = "",
                    record: bool = False, mapping: dict[str, str] | None = None) -> DataError:
    """The one error for columns `preset` reads that `columns` (a header, or a `record`'s
    keys) lacks: it names the preset, the first missing column as the field, each missing
    column's role, and the columns there are. `mapping` (field -> column) is the preset's
    with any `--fields` overrides; `how` says how the preset was chosen."""
    mapping = mapping or preset.columns
    have = list(columns)
    missing = [(f, mapping[f]) for f in preset.columns if mapping[f] not in set(have)]
    named = ", ".join(f"{c} ({ROLES.get(f, f)})" for f, c in missing)
    listing = ", ".join(map(str, have)) or "(none)"
    found = f"the record has {listing}" if record else f"columns found: {listing}"
    return DataError(where, f"the {preset.name} preset{how} needs column"
                     f"{'s' if len(missing) > 1 else ''} {named}; {found}", line=line,
                     field=missing[0][1] if missing else None,
                     hint="give the file in that layout, or map its columns with --fields")


def check_columns(where, preset: Preset, columns: list[str], line: int | None = None,
                  mapping: dict[str, str] | None = None, record: bool = False) -> None:
    """`missing_columns`' error if `columns` lacks a column `preset` (with `mapping`'s
    overrides) needs."""
    mapping = mapping or preset.columns
    if any(mapping[f] not in set(columns) for f in preset.columns):
        raise missing_columns(where, preset, columns, line=line, record=record,
                              mapping=mapping)
