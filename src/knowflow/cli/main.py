"""The `knowflow` command: one Typer app over the command groups in this package.

Each command parses, calls the library and renders; the library never prints. Every command
runs inside `knowflow.cli.errors.guard`, the one error boundary.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer
from rich.logging import RichHandler

from knowflow.cli import eval as eval_cli
from knowflow.cli import experiments, probe_heads, sft
from knowflow.cli.common import err_console
from knowflow.cli.errors import Settings, guard
from knowflow.cli.explain import explain_cmd
from knowflow.cli.export import export_app
from knowflow.cli.probe import probe_app

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="knowflow: where does a model's answer come from — context or weights?")


@app.callback()
def main(verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Log progress; on an error, show the full traceback.")] = False
         ) -> None:
    Settings.verbose = verbose
    for stream in (sys.stdout, sys.stderr):  # PYTHONIOENCODING=ascii: é shown as \xe9
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        os.getcwd()  # torch's libraries fail to load (a oneMKL fatal error) without one
    except FileNotFoundError:
        err_console.print("error: the working folder no longer exists (deleted or moved); "
                          "cd to an existing folder and run the command again",
                          highlight=False, markup=False)
        raise typer.Exit(2) from None
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s",
                        handlers=[RichHandler(console=err_console, show_path=False)])


for _name, _command in (("list", experiments.list_cmd), ("config", experiments.config_cmd),
                        ("run", experiments.run_cmd), ("report", experiments.report_cmd),
                        ("eval", eval_cli.eval_cmd), ("sft", sft.sft_cmd),
                        ("curate", sft.curate_cmd), ("augment", sft.augment_cmd),
                        ("explain", explain_cmd)):
    app.command(_name)(guard(_command))
for _name, _command in (("heads", probe_heads.heads_cmd),
                        ("head-project", probe_heads.head_project_cmd)):
    probe_app.command(_name)(guard(_command))
app.add_typer(probe_app, name="probe")
app.add_typer(export_app, name="export")


def entry() -> None:  # pragma: no cover - for `python -m knowflow`
    sys.exit(app())
