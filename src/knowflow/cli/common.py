"""What every `knowflow` command shares: the one console pair and the closing lines.

Commands import the library inside their bodies, so `knowflow --help` and a refused command
name answer without importing torch or transformers; everything here is light.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from pathlib import Path

from rich.console import Console

# Results go to stdout, wide enough for result tables when the output is a file or a pipe
# (rich assumes 80 columns); errors, logs and progress bars go to stderr.
# A closed stream (`knowflow run x >&-`) is None in Python: what would be shown is dropped and
# the command still runs and writes its files.
# A reader that goes away (`knowflow list | head -1`) ends the command quietly, as SIGPIPE
# would (exit 141, `errors.guard`); a full device (`> /dev/full`) is an OSError naming
# standard output.
_NOWHERE = open(os.devnull, "w") if sys.stdout is None or sys.stderr is None else None  # noqa: SIM115
STDOUT = "standard output"  # the file name of an error writing results


class _Stdout:
    """sys.stdout as it is at each write (a test's capture too), its write errors naming
    standard output."""

    def write(self, text: str) -> int:
        return self._call("write", text)

    def flush(self) -> None:
        self._call("flush")

    def _call(self, name: str, *args):
        try:
            return getattr(sys.stdout, name)(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, STDOUT) from None

    def __getattr__(self, name: str):
        return getattr(sys.stdout, name)


class _Results(Console):
    def on_broken_pipe(self) -> None:
        """The reader went away: nothing more is shown, and Python's last flush of stdout
        goes to os.devnull (no 'Exception ignored' at exit); `guard` ends the command."""
        self.quiet = True
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away", STDOUT)


console = _Results(width=None if sys.stdout and sys.stdout.isatty() else 150,
                   file=_Stdout() if sys.stdout else _NOWHERE)
err_console = Console(stderr=True, file=None if sys.stderr else _NOWHERE)


def print_paths(run_dir: Path, report: Path | None = None, seconds: float | None = None,
                label: str = "run directory") -> None:
    """The closing lines every run-writing command prints."""
    extra = f"  ({seconds:.1f} s)" if seconds is not None else ""
    console.print(f"{label}: {run_dir}{extra}", highlight=False)
    if report is not None:
        console.print(f"report: {report}", highlight=False)
