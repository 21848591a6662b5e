"""Knowledge-conflict items and the facts tables knowflow ships to build them.

A `ConflictItem` pairs a context that asserts a counterfactual answer with a question whose
memorized (parametric) answer differs. The tables under `data/files/` hold public facts only
(capitals, world relations, biographies, sayings); every sentence shown to a model comes from
knowflow's own templates in `data/files/templates.json`. An `Instruction` is one finetuning row
(Alpaca fields or chat messages); data/ and the worlds build them, train/ tokenizes and scores them.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import resources
from typing import Literal

from knowflow.store.readers import read_json

Task = Literal["qa", "complete"]


@dataclass(frozen=True)
class ConflictItem:
    """One knowledge-conflict example.

    `task` is "qa" (a question answered after the context) or "complete" (MemoTrap style: the
    context is an instruction and the question is text the model continues).
    """

    id: str
    suite: str
    context: str
    question: str
    counterfactual_answer: str
    parametric_answer: str
    counterfactual_aliases: tuple[str, ...] = ()
    parametric_aliases: tuple[str, ...] = ()
    task: Task = "qa"
    relation: str = ""
    subject: str = ""  # what the question is about; a mention of it never counts as an answer
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["counterfactual_aliases"] = list(self.counterfactual_aliases)
        out["parametric_aliases"] = list(self.parametric_aliases)
        return out


def split_aliases(text: str) -> tuple[str, ...]:
    """'A; B' -> ('A', 'B'); empty cells give ()."""
    return tuple(a.strip() for a in (text or "").split(";") if a.strip())


def _data_file(name: str):
    return resources.files("knowflow.data").joinpath("files", name)


@cache
def read_table(name: str) -> tuple[dict[str, str], ...]:
    """Rows of a shipped TSV table (`capitals.tsv`, ...) as dicts keyed by the header."""
    with _data_file(name).open(encoding="utf-8", newline="") as fh:
        rows = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        return tuple({k: (v or "").strip() for k, v in row.items()} for row in rows)


@cache
def templates() -> dict:
    """knowflow's sentence templates (`data/files/templates.json`)."""
    return read_json(_data_file("templates.json"))


@dataclass(frozen=True)
class Instruction:
    """One finetuning example: Alpaca fields, or chat `messages` (then the others are "")."""

    instruction: str = ""
    input: str = ""
    output: str = ""
    messages: tuple[tuple[str, str], ...] = ()      # ((role, content), ...)
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict:
        if self.messages:
            return {"messages": [{"role": r, "content": c} for r, c in self.messages],
                    **self.extra}
        return {"instruction": self.instruction, "input": self.input, "output": self.output,
                **self.extra}
