"""What a command reads, as options: built-in suites and data files (`SuiteData`, with their
column mapping and layout, `TableOptions`), one context or a file to explain
(`ExplainData`), a probe's prompts (`PromptData`) or conflict items (`ItemData`), an
instruction file (`InstructionData`).

Each is a frozen dataclass whose fields are command-line options (`config.option`), checked
by `validate()` without reading any file: the names of suites, the `--fields` mapping, the
`--preset`, options that exclude each other. The files themselves are read (and refused,
naming the file, line and field) by the entry point that uses them, before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from knowflow.config import option
from knowflow.data.presets import get_preset
from knowflow.data.suites import list_suites
from knowflow.data.tables import parse_fields
from knowflow.errors import ConfigError


def check_suite_names(text: str | None, field: str = "suite") -> None:
    """Comma-separated built-in suite names, each one known (None: none given)."""
    if text is None:
        return
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = list_suites()
    bad = next((n for n in names if n not in known), None if names else text)
    if bad is not None:
        raise ConfigError(f"unknown suite {bad!r}", field,
                          f"give one or more of {', '.join(known)}, comma-separated")


@dataclass(frozen=True)
class TableOptions:
    """How data files' columns are read: a mapping, or a published layout."""

    fields: str | None = option(None, "--data column mapping: context=COL,question=COL,"
                                      "answer=COL,memory_answer=COL (parquet, save_to_disk "
                                      "folders, CSV, JSON/JSONL).")
    preset: str | None = option(None, "--data layout: nq-swap, conflictqa, memotrap or "
                                      "clasheval (default: recognised from the columns).")

    def validate(self) -> None:
        parse_fields(self.fields)
        if self.preset:
            get_preset(self.preset)

    @property
    def mapping(self) -> dict[str, str]:
        """{knowflow's field: the files' column} (`--fields`)."""
        return parse_fields(self.fields)


@dataclass(frozen=True)
class SuiteData:
    """Knowledge-conflict items: built-in suites and/or data files (`knowflow eval`,
    `knowflow export lm-eval`)."""

    suite: str | None = option(None, "Built-in suites, comma-separated: cf-capitals, "
                                     "cf-phrasing, cf-world, cf-bio, cf-quotes, needle-cf, "
                                     "needle-agree, cf-numeric (default: all of them unless "
                                     "--data is given).")
    data: tuple[Path, ...] = option((), "External file: JSON/JSONL (context, question, answer, "
                                        "memory_answer), MemoTrap CSV, or knowflow JSONL; or a "
                                        "hub dataset hf:ORG/NAME[:CONFIG][@SPLIT] (repeatable).")
    table: TableOptions = option(factory=TableOptions, flags="")

    def validate(self) -> None:
        check_suite_names(self.suite)

    @property
    def suites(self) -> list[str]:
        return [n.strip() for n in self.suite.split(",")] if self.suite else []

    @property
    def sources(self) -> list[str | Path] | None:
        """The suites, then the files (None: neither given, the default suites)."""
        return [*self.suites, *self.data] or None


@dataclass(frozen=True)
class ExplainData:
    """What `knowflow explain` explains: one context with its question (and the answer), or
    the items of a data file or a built-in suite."""

    context: str | None = option(None, "The context: text, or a path to a text file.")
    question: str | None = option(None, "The question asked after the context.")
    answer: str | None = option(None, "The answer to explain (default: per --target).")
    data: Path | None = option(None, "Items to explain: any file `knowflow eval` reads.")
    suite: str | None = option(None, "A built-in suite instead (e.g. needle-cf).")
    table: TableOptions = option(factory=TableOptions, flags="")

    def validate(self) -> None:
        given = [name for name in ("context", "data", "suite") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ConfigError("give exactly one of --context (with --question), --data, "
                              "--suite", given[1] if len(given) > 1 else "context")
        if self.context is not None and self.question is None:
            raise ConfigError("a context needs its question", "question")
        if self.context is None and (self.question is not None or self.answer is not None):
            raise ConfigError("goes with --context (one item), not --data/--suite",
                              "question" if self.question is not None else "answer")

    @property
    def source(self) -> str:
        """The context's text (read from the file it names, if it names one), or the data
        file or suite."""
        if self.context is None:
            return str(self.data) if self.data is not None else str(self.suite)
        try:
            is_file = "\n" not in self.context and Path(self.context).is_file()
        except OSError:  # text too long to be a file name
            is_file = False
        return Path(self.context).read_text(encoding="utf-8") if is_file else self.context


@dataclass(frozen=True)
class PromptData:
    """A probe's prompts: a prompts file, a built-in suite, or knowflow's shipped facts."""

    data: Path | None = option(None, "Prompts file (JSONL: prompt, subject, relation, "
                                     "attributes, answer, context). Default: knowflow's "
                                     "shipped well-known facts.")
    suite: str | None = option(None, "A built-in suite instead of --data (e.g. cf-capitals).")
    limit: int | None = option(None, "Use the first N examples.", ge=1)

    def validate(self) -> None:
        if self.data is not None and self.suite is not None:
            raise ConfigError("give --data or --suite, not both", "suite")
        check_suite_names(self.suite)

    @property
    def source(self) -> str | Path | None:
        return self.data if self.data is not None else self.suite


@dataclass(frozen=True)
class ItemData:
    """A probe's knowledge-conflict items: built-in suites or a file in `knowflow eval`'s
    format."""

    data: Path | None = option(None, "Conflict items file (knowflow eval's format: context, "
                                     "question, counterfactual and parametric answers).")
    suite: str = option("cf-capitals", "Built-in conflict suites, comma-separated.")
    limit: int | None = option(None, "Use the first N examples.", ge=1)

    def validate(self) -> None:
        if self.data is None:
            check_suite_names(self.suite)

    @property
    def source(self) -> str | Path:
        return self.data if self.data is not None else self.suite


@dataclass(frozen=True)
class InstructionData:
    """An instruction file (or the built-in mixture) a command reads rows from."""

    data: str = option(help="Instruction file in Alpaca form, or 'builtin'.")
