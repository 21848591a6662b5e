"""Layout presets: the published column layouts of knowledge-conflict benchmarks, mapped to
knowflow's fields, so `--preset nq-swap` (or no flag at all) reads them without `--fields`.

A preset names the columns it needs (the context, the question, the context's answer and the
memory's answer, or MemoTrap's prompt/classes/answer_index) and the optional ones it uses when
present (NQ-Swap's original passage as the agreeing context). Given no `--preset` and no
`--fields`, a file whose columns hold every required column of exactly one preset is read
with that preset; the loader reports which (`preset` in the data-quality counts, which
`knowflow eval` records in its config and summary). Each layout, its source and why FaithEval
is left out are listed in docs/commands/eval.md ("Benchmarks by name").
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
    hub: str = ""  # where the benchmark is published: hf:ORG/NAME[:CONFIG][@SPLIT]

    def mapping(self, have: set[str]) -> dict[str, str]:
        """knowflow field -> column: the required columns and the optional ones present."""
        return {**self.columns, **{k: c for k, c in self.optional.items() if c in have}}


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("nq-swap", {"context": "sub_context", "question": "question",
                       "answer": "sub_answer", "memory_answer": "org_answer"},
           optional={"agreeing_context": "org_context"}, hub="hf:pminervini/NQ-Swap@dev"),
    Preset("conflictqa", {"context": "counter_memory", "question": "question",
                          "answer": "counter_answer", "memory_answer": "memory_answer"},
           hub="hf:osunlp/ConflictQA:ConflictQA-popQA-chatgpt@test"),
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


def detect(where, columns: list[str]) -> Preset | None:
    """The one preset whose required columns `columns` holds (None if none does); two at once
    is ambiguous and an error, so a guess never decides what is scored."""
    have = set(columns)
    found = [p for p in PRESETS.values() if set(p.columns.values()) <= have]
    if len(found) > 1:
        raise DataError(where, f"the columns fit several presets "
                        f"({', '.join(p.name for p in found)})",
                        hint="choose one with --preset")
    return found[0] if found else None


def check_columns(where, preset: Preset, columns: list[str], line: int | None = None) -> None:
    """A `DataError` naming the first column `preset` needs that `columns` lacks, and the
    columns there are."""
    missing = [c for c in preset.columns.values() if c not in set(columns)]
    if missing:
        raise DataError(where, f"--preset {preset.name} needs column(s) "
                        f"{', '.join(missing)}; columns found: {', '.join(columns) or '(none)'}",
                        line=line, field=missing[0],
                        hint="give the file in that layout, or map its columns with --fields")
