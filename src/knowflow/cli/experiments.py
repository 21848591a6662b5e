"""`knowflow list`, `config`, `run` and `report`: the registered experiments and their reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from knowflow.cli.common import console, print_paths
from knowflow.cli.flags import SET_HELP, command


def list_cmd() -> None:
    """List the registered experiments, the built-in suites and the benchmarks `--data` takes
    by name (with where each comes from and its size where recorded)."""
    from knowflow.data.benchmarks import list_benchmarks
    from knowflow.data.suites import list_suites
    from knowflow.experiments.registry import list_experiments

    table = Table("experiment", "what it does")
    for exp in list_experiments():
        table.add_row(exp.name, exp.description)
    console.print(table)
    suites = Table("suite (--suite)", "what it holds")
    for name, description in list_suites().items():
        suites.add_row(name, description)
    console.print(suites)
    benchmarks = Table("benchmark (--data NAME)", "read from", "preset", "rows", "published in",
                       caption="rows: '-' where no count is recorded; a run's summary counts "
                               "its items (n)")
    for row in list_benchmarks():
        benchmarks.add_row(str(row["name"]), str(row["hub"] or "files (see the error it gives)"),
                           str(row["preset"]), str(row["rows"] or "-"), str(row["source"]))
    console.print(benchmarks)


def config_cmd(name: Annotated[str, typer.Argument(help="Experiment name.")]) -> None:
    """Print an experiment's default config: every key `--set` accepts."""
    from knowflow.config import flatten
    from knowflow.experiments.runner import default_config_dict

    cfg = default_config_dict(name)
    for key, value in flatten(cfg).items():
        console.print(f"{key}={json.dumps(value)}", highlight=False)


def print_summary(summary: dict, columns: tuple[str, ...]) -> None:
    """One row per section of the summary that has the experiment's table columns."""
    rows: dict[str, dict] = {}
    for key, value in summary.items():
        if not isinstance(value, dict):
            continue
        if any(c in value for c in columns):
            rows[key] = value
        else:  # one level down, e.g. summary["mitigations"][arm]
            rows.update({f"{key}.{sub}": row for sub, row in value.items()
                         if isinstance(row, dict) and any(c in row for c in columns)})
    if rows:
        table = Table("", *columns)
        for name, row in rows.items():
            table.add_row(name, *[f"{row[c]:.3f}" if isinstance(row.get(c), float)
                                  else str(row.get(c, "")) for c in columns])
        console.print(table)
    for key, value in summary.get("findings", {}).items():
        console.print(f"{key}: {value:.4f}" if isinstance(value, float) and
                      not isinstance(value, bool) else f"{key}: {value}", highlight=False)


def _run_sections() -> dict[str, type]:
    from knowflow.lens.device import ExperimentThreads
    from knowflow.store.run_folder import ResumeOptions

    return {"resume": ResumeOptions, "threads": ExperimentThreads}


@command(_run_sections, sets=SET_HELP)
def run_cmd(name: Annotated[str, typer.Argument(
        help="Registered experiment (see `knowflow list`).")], resume, threads,
            sets: list[str]) -> None:
    """Run a registered experiment; writes runs/<name>/<timestamp>/ with a report.html."""
    from knowflow.api import run_experiment
    from knowflow.experiments.registry import get_experiment
    from knowflow.store.identity import REPORT

    threads.apply()
    result = run_experiment(name, sets, runs_dir=resume.runs_dir, resume=resume.target)
    print_summary(result.summary, get_experiment(name).columns)
    print_paths(result.out_dir, result.out_dir / REPORT, result.seconds)


def _report_sections() -> dict[str, type]:
    from knowflow.store.run_folder import ReportFile

    return {"page": ReportFile}


@command(_report_sections)
def report_cmd(run_dirs: Annotated[list[Path], typer.Argument(
        help="Run directories to include.")], page) -> None:
    """Write a self-contained report.html (figures embedded, config, summary tables); several
    runs' reliance curves overlaid. A folder a RelianceTracker wrote (metrics.jsonl, no
    config.json) gets its curves, intervals, peak, fall and verdict."""
    from knowflow.api import report_runs

    path, verdicts = report_runs(run_dirs, out=page.out)
    for folder, verdict in verdicts.items():
        console.print(f"{folder}: {verdict}", highlight=False)
    console.print(f"report: {path}", highlight=False)
