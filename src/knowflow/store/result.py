"""`Result`: what every public entry point returns, and the run folder it is saved as.

A Result is the run's `records` (one dict per item, example, row or evaluation step), their
`summary` and the run's `config` (plain JSON-able dicts), with `command` naming what made it
(`eval`, `explain`, `probe-<kind>`, `curate`, `augment`, `sft` or an experiment's name).
`save(dir)` writes the run folder `knowflow <command>` writes (`start_run`: config.json
first, then the records file, summary.json, figures/ and report.html); `Result.load(dir)` reads
one back into the Result class its command returns; `to_pandas()` is one row per record.

Figures and the report page are drawn by the layers above (report/). `FINISHERS` names, for
each command, the function that finishes its saved folder (a *finisher*: figures, summary.json,
report.html), and `CLASSES` the Result subclass a command's folder loads as; both are looked up
by name when needed, so `save` and `load` work whatever has been imported before. A command
with no finisher (an experiment, `augment`) saves its records and summary, plus the other
files of the folder it was run in, copied.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from knowflow.config import flatten
from knowflow.errors import ConfigError, DataError
from knowflow.store.identity import (
    CONFIG,
    IDENTITY,
    ITEMS,
    LOCK,
    METRICS,
    RECORDS,
    SUMMARY,
    run_command,
)
from knowflow.store.readers import read_json
from knowflow.store.run_folder import RunFolder, read_result, start_run

# command (a family ends in "-": "probe-") -> its records file; any other: an experiment's
RECORDS_FILES = {"eval": ITEMS, "explain": RECORDS, "probe-": RECORDS,
                 "curate": "curated.scores.jsonl", "augment": "augmented.jsonl"}
# command -> "module:function" that finishes its saved run folder: `fn(result, run)`
FINISHERS = {"eval": "knowflow.report.finish:finish_eval",
             "explain": "knowflow.report.finish:finish_explain",
             "probe-": "knowflow.report.finish:finish_probe"}
# what a notebook shows of a Result and of one of its records (`_repr_html_`)
VIEWS = {"result": "knowflow.report.notebook:result_html",
         "item": "knowflow.report.notebook:item_html"}
# command -> "module:class" its run folder loads as (any other: Result)
CLASSES = {"eval": "knowflow.evaluation.run:EvalResult", "curate": "knowflow.api:CurateResult"}
Finisher = Callable[["Result", RunFolder], None]


def _lookup(table: dict, command: str, default=None):
    """`table`'s entry for `command`: its own, else its family's ("probe-knockout": "probe-")."""
    if command in table:
        return table[command]
    family = command.split("-")[0] + "-"
    return table.get(family, default) if "-" in command else default


def records_file(command: str) -> str:
    """The file a run folder of `command` keeps its records in."""
    return _lookup(RECORDS_FILES, command, METRICS)


def _named(table: dict[str, str], command: str):
    """The object `table` names for `command` ("module:attribute"), imported; or None."""
    name = _lookup(table, command)
    if name is None:
        return None
    module, attr = name.split(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(repr=False)
class Result:
    """One run's records, summary and config; see the module docstring."""

    records: list[dict]
    summary: dict
    config: dict
    command: str = "run"
    out_dir: Path | None = None      # the folder the run is written in, once it is
    seconds: float = 0.0
    inputs: tuple[Path, ...] = field(default=(), repr=False, compare=False)  # files read

    def save(self, out_dir: str | Path | None = None, *, runs_dir: str | Path = "runs"
             ) -> Path:
        """Write the run folder `knowflow <command>` writes to `out_dir` (default: a fresh
        `runs_dir/<command>/<timestamp>/`); returns it. The folder is staged
        (`RunFolder`): any failure while writing leaves `out_dir` as it was."""
        source = self.out_dir
        with start_run(self.config, self.command, runs_dir=runs_dir, out_dir=out_dir,
                       inputs=self.inputs) as run:  # staged: in place once complete
            self._write(run)
            finish: Finisher | None = _named(FINISHERS, self.command)
            if finish is not None:
                finish(self, run)
            else:
                self._copy_rest(source, run.path)
                run.write_summary(self.summary)
        self.out_dir = run.path
        return run.path

    def _write(self, run: RunFolder) -> None:
        """The records file (and what a subclass keeps besides); summary.json comes after."""
        run.write_records(records_file(self.command), self.records)

    def _copy_rest(self, source: Path | None, target: Path) -> None:
        """The files of the folder the run was made in that `save` does not write itself
        (an experiment's checkpoints, figures, report)."""
        if source is None or not Path(source).is_dir() or \
                Path(source).resolve() == target.resolve():
            return
        own = {CONFIG, IDENTITY, LOCK, SUMMARY, records_file(self.command)}
        for path in Path(source).iterdir():
            if path.name in own:
                continue
            if path.is_dir():
                shutil.copytree(path, target / path.name, dirs_exist_ok=True)
            else:
                shutil.copy2(path, target / path.name)

    def to_pandas(self):
        """One row per record, nested numbers spread into `outer_inner` columns."""
        import pandas as pd  # a base dependency, imported only when asked for (slow import)

        return pd.DataFrame([flatten(r, sep="_") for r in self.records])

    @classmethod
    def load(cls, run_dir: str | Path) -> Result:
        """The Result a run folder holds, as the class its command returns (records,
        summary and config as written; a run without summary.json has an empty one)."""
        if not isinstance(run_dir, (str, Path)):
            raise ConfigError(f"a run folder's path is text or a Path, not "
                              f"{type(run_dir).__name__} {run_dir!r}", "run_dir")
        run_dir = Path(run_dir)
        command = run_command(run_dir)
        if command is None:
            raise DataError(run_dir, "not a knowflow run folder (no config.json or run.json)",
                            hint="give a folder `save` or a knowflow command wrote")
        records = run_dir / records_file(command)
        summary = run_dir / SUMMARY
        target = _named(CLASSES, command) or Result
        return target(records=read_result(run_dir, records.name) if records.exists() else [],
                      summary=read_result(run_dir, SUMMARY) if summary.exists() else {},
                      config=read_json(run_dir / CONFIG), command=command, out_dir=run_dir,
                      **target._read_rest(run_dir))

    @classmethod
    def _read_rest(cls, run_dir: Path) -> dict:
        """A subclass's own fields, read from its folder."""
        return {}

    def __repr__(self) -> str:
        """One line, whatever the run's size: the class, the command, how many records, the
        summary's first keys and the folder (`.records`, `.summary` hold the rest)."""
        keys = list(self.summary)
        shown = ", ".join(map(str, keys[:5])) + (f", ... ({len(keys)} keys)" if len(keys) > 5
                                                  else "")
        n = len(self.records)
        return (f"{type(self).__name__}({self.command!r}, {n} record{'s' * (n != 1)}, "
                f"summary: {shown or 'empty'}, out_dir={self.out_dir})")

    def _repr_html_(self) -> str:
        """What a notebook shows: the run's finding, its headline numbers and tables (an
        eval's metrics per suite, an explain run's cards, a heads probe's ranked heads)."""
        return _named(VIEWS, "result")(self)

    def item(self, index: int) -> Record:
        """Record `index`, shown in a notebook as its own view (an explained answer: its
        context shaded by attribution, its verdict and numbers)."""
        return Record(self.records[index], self.command)


class Record(dict):
    """One record of a Result: a plain dict that a notebook shows as its own view."""

    def __init__(self, record: dict, command: str):
        super().__init__(record)
        self.command = command

    def _repr_html_(self) -> str:
        return _named(VIEWS, "item")(dict(self), self.command)
