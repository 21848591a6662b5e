"""The `knowflow` command: one Typer app over the command groups in this package.

Each command parses, calls the library and renders; the library never prints. Every command
runs inside `knowflow.cli.errors.guard`, the one error boundary, and is built from its config
dataclasses when it runs (`knowflow.cli.flags`), so listing the commands imports no library.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer
from rich.logging import RichHandler

from knowflow.cli import eval as eval_cli
from knowflow.cli import experiments, sft
from knowflow.cli.common import err_console
from knowflow.cli.errors import Settings, guard
from knowflow.cli.explain import explain_cmd, fit_cmd
from knowflow.cli.export import lm_eval_cmd
from knowflow.cli.flags import add, group
from knowflow.cli.probe import HELP as PROBE_HELP
from knowflow.cli.probe import VIEWS, probe_command

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


for _name, _command in (("list", experiments.list_cmd), ("config", experiments.config_cmd)):
    app.command(_name)(guard(_command))
for _name, _spec in (("run", experiments.run_cmd), ("report", experiments.report_cmd),
                     ("eval", eval_cli.eval_cmd), ("sft", sft.sft_cmd),
                     ("curate", sft.curate_cmd), ("augment", sft.augment_cmd)):
    add(app, _name, _spec, guard)

explain_app = group(explain_cmd, guard)
add(explain_app, "fit", fit_cmd, guard)
app.add_typer(explain_app, name="explain", help=explain_cmd.fn.__doc__)

probe_app = typer.Typer(add_completion=False, no_args_is_help=True, help=PROBE_HELP)
for _kind in VIEWS:
    add(probe_app, _kind, probe_command(_kind), guard)
app.add_typer(probe_app, name="probe")

export_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Export knowflow suites for other tools.")
add(export_app, "lm-eval", lm_eval_cmd, guard)
app.add_typer(export_app, name="export")


def entry() -> None:  # pragma: no cover - for `python -m knowflow`
    sys.exit(app())
