"""The `knowflow` command. It parses, calls the library, and renders; the library never prints."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from knowflow.errors import KnowflowError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="knowflow: where does a model's answer come from — context or weights?")
# Wide enough for result tables when the output is a file or a pipe (rich assumes 80 columns).
console = Console(width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True)


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress.")] = False
         ) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s",
                        handlers=[RichHandler(console=err_console, show_path=False)])


@app.command("list")
def list_cmd() -> None:
    """List the registered experiments."""
    from knowflow.experiments.registry import list_experiments

    table = Table("experiment", "what it does")
    for exp in list_experiments():
        table.add_row(exp.name, exp.description)
    console.print(table)


@app.command("config")
def config_cmd(name: Annotated[str, typer.Argument(help="Experiment name.")]) -> None:
    """Print an experiment's default config: every key `--set` accepts."""
    from knowflow.config import flatten
    from knowflow.experiments.runner import default_config_dict

    try:
        cfg = default_config_dict(name)
    except KnowflowError as exc:
        raise _fail(exc) from None
    for key, value in flatten(cfg).items():
        console.print(f"{key}={json.dumps(value)}", highlight=False)


def _print_summary(summary: dict, columns: tuple[str, ...]) -> None:
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
    scalars = {k: v for k, v in summary.get("findings", {}).items()}
    for key, value in scalars.items():
        console.print(f"{key}: {value:.4f}" if isinstance(value, float) and
                      not isinstance(value, bool) else f"{key}: {value}", highlight=False)


@app.command("run")
def run_cmd(
    name: Annotated[str, typer.Argument(help="Registered experiment (see `knowflow list`).")],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config field: key=value (repeatable).")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where run directories go.")] = Path("runs"),
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the newest unfinished run of this experiment.")] = False,
    run_dir: Annotated[Path | None, typer.Option(
        help="With --resume: the run directory to continue.")] = None,
    threads: Annotated[int, typer.Option(
        help="torch threads per process (1 is fastest for small models).")] = 1,
) -> None:
    """Run a registered experiment; writes runs/<name>/<timestamp>/ with a report.html."""
    import torch

    from knowflow.experiments.runner import run_experiment

    torch.set_num_threads(max(1, threads))
    try:
        result = run_experiment(name, set_ or [], runs_root=runs_dir,
                                resume=(run_dir or True) if resume else False)
    except KnowflowError as exc:
        raise _fail(exc) from None
    _print_summary(result.summary, result.columns)
    console.print(f"run directory: {result.run_dir}  ({result.seconds:.1f} s)", highlight=False)
    console.print(f"report: {result.report}", highlight=False)


@app.command("report")
def report_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories to include.")],
    out: Annotated[Path | None, typer.Option(
        help="Output file (default: RUN_DIR/report.html for one run, ./report.html for many)."
    )] = None,
) -> None:
    """Write a self-contained report.html (figures embedded, config, summary tables)."""
    from knowflow.report.html import write_report

    target = out or (run_dirs[0] / "report.html" if len(run_dirs) == 1 else Path("report.html"))
    try:
        path = write_report(run_dirs, target)
    except KnowflowError as exc:
        raise _fail(exc) from None
    console.print(f"report: {path}", highlight=False)

from knowflow.cli_probe import probe_app  # noqa: E402, I001
app.add_typer(probe_app, name="probe")


def entry() -> None:  # pragma: no cover - for `python -m knowflow`
    sys.exit(app())
