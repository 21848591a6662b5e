"""`knowflow list`, `config`, `run` and `report`: the registered experiments and their reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from knowflow.cli.common import (
    Opt,
    SetOpt,
    check_run_dir,
    check_run_folders,
    check_threads,
    console,
    print_paths,
    set_threads,
)


def list_cmd() -> None:
    """List the registered experiments."""
    from knowflow.experiments.registry import list_experiments

    table = Table("experiment", "what it does")
    for exp in list_experiments():
        table.add_row(exp.name, exp.description)
    console.print(table)


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


def run_cmd(
    name: Annotated[str, typer.Argument(help="Registered experiment (see `knowflow list`).")],
    set_: SetOpt = None,
    runs_dir: Annotated[Path, Opt(help="Where run directories go.")] = Path("runs"),
    resume: Annotated[bool, Opt(
        "--resume", help="Continue the newest unfinished run of this experiment.")] = False,
    run_dir: Annotated[Path | None, Opt(
        help="With --resume: the run directory to continue.")] = None,
    threads: Annotated[int, Opt(
        help="torch threads per process (1 is fastest for small models).")] = 1,
) -> None:
    """Run a registered experiment; writes runs/<name>/<timestamp>/ with a report.html."""
    from knowflow.experiments.registry import get_experiment
    from knowflow.experiments.runner import run_experiment
    from knowflow.store.identity import REPORT

    check_threads(threads)
    check_run_dir(run_dir, resume)
    set_threads(threads)
    result = run_experiment(name, set_ or [], runs_dir=runs_dir,
                            resume=(run_dir or True) if resume else False)
    print_summary(result.summary, get_experiment(name).columns)
    print_paths(result.out_dir, result.out_dir / REPORT, result.seconds)


def report_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories to include.")],
    out: Annotated[Path | None, Opt(
        help="Output file (default: RUN_DIR/report.html for one run, ./report.html for many)."
    )] = None,
) -> None:
    """Write a self-contained report.html (figures embedded, config, summary tables); several
    runs' reliance curves overlaid. A folder a RelianceTracker wrote (metrics.jsonl, no
    config.json) gets its curves, intervals, peak, fall and verdict."""
    from knowflow.report.html import write_report
    from knowflow.report.tracker_run import read_tracker_records, tracker_figure, tracker_summary
    from knowflow.store.identity import CONFIG
    from knowflow.store.outputs import check_out_files

    target = out or (run_dirs[0] / "report.html" if len(run_dirs) == 1 else Path("report.html"))
    trackers = [d for d in run_dirs if d.is_dir() and not (d / CONFIG).exists()]
    check_run_folders([d for d in run_dirs if d not in trackers])
    records = {d: read_tracker_records(d) for d in trackers}  # every folder checked first
    check_out_files({"report": target})
    for folder, recs in records.items():
        tracker_figure(folder, recs)
    path = write_report(run_dirs, target)
    for folder, recs in records.items():
        console.print(f"{folder}: {tracker_summary(recs)['findings']['verdict']}",
                      highlight=False)
    console.print(f"report: {path}", highlight=False)

