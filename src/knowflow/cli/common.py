"""What every `knowflow` command shares: the one console pair and the closing lines.

Commands import the library inside their bodies, so `knowflow --help` and a refused command
name answer without importing torch or transformers; everything here is light.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console

# Results go to stdout, wide enough for result tables when the output is a file or a pipe
# (rich assumes 80 columns); errors, logs and progress bars go to stderr.
# A closed stream (`knowflow run x >&-`) is None in Python: what would be shown is dropped and
# the command still runs and writes its files.
_NOWHERE = open(os.devnull, "w") if sys.stdout is None or sys.stderr is None else None  # noqa: SIM115
console = Console(width=None if sys.stdout and sys.stdout.isatty() else 150,
                  file=None if sys.stdout else _NOWHERE)
err_console = Console(stderr=True, file=None if sys.stderr else _NOWHERE)


def print_paths(run_dir: Path, report: Path | None = None, seconds: float | None = None,
                label: str = "run directory") -> None:
    """The closing lines every run-writing command prints."""
    extra = f"  ({seconds:.1f} s)" if seconds is not None else ""
    console.print(f"{label}: {run_dir}{extra}", highlight=False)
    if report is not None:
        console.print(f"report: {report}", highlight=False)
