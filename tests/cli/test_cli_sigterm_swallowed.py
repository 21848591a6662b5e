"""A SIGTERM whose exception a library swallows still ends the command: exit 143, one line
(the signal trial in test_fault_kill once saw `sft` finish with exit 0 after a SIGTERM)."""

import contextlib
import os
import signal

import typer
from typer.testing import CliRunner

from knowflow.cli.errors import guard

app = typer.Typer()


@app.command()
@guard
def swallowing() -> None:
    with contextlib.suppress(BaseException):  # what a broad handler in a library does
        os.kill(os.getpid(), signal.SIGTERM)


@app.command()
@guard
def quiet() -> None:
    pass


def test_a_swallowed_sigterm_still_exits_143_with_one_line():
    res = CliRunner().invoke(app, ["swallowing"])
    assert res.exit_code == 143
    lines = res.output.strip().splitlines()
    assert lines == ["error: terminated after the command had finished; what it wrote is complete"]


def test_no_signal_no_exit_code_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    res = CliRunner().invoke(app, ["quiet"])
    assert res.exit_code == 0 and res.output == ""
    assert signal.getsignal(signal.SIGTERM) is before
