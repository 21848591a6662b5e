"""The CLI's one error boundary: every command runs inside `guard`.

What the user can fix (bad input, a missing or unwritable file, a device this machine lacks,
a damaged file knowflow wrote) becomes one line, `error: <where>: <what is wrong>; <what to
do>`, and exit code 2. Ctrl-C is one line and exit code 130; SIGTERM is handled the same way,
exit code 143 (a run is left resumable). A reader of the output that went away (`| head -1`)
ends the command quietly with exit code 141, as SIGPIPE would; a full device for the output
(`> /dev/full`) is one line naming standard output. Anything else is a bug: one line and
exit code 1. `--verbose`/`-v` adds the full traceback.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import shutil
import signal
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

import typer
from rich.text import Text

from knowflow.cli.common import STDOUT, err_console
from knowflow.errors import Interrupted, KnowflowError, Terminated, memory_error, out_of_memory
from knowflow.store.identity import run_command
from knowflow.store.staging import target_of

_OS_ERRORS = {
    errno.ENOENT: ("no such file or folder", "check the path"),
    errno.EACCES: ("permission denied", "fix its permissions or choose another path"),
    errno.EPERM: ("operation not permitted", "fix its permissions or choose another path"),
    errno.EISDIR: ("is a folder, not a file", "give a file path"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "give a folder path"),
    errno.EEXIST: ("already exists (as a file)", "give a folder path or remove the file"),
    errno.ENOSPC: ("no space left on the device", "free some space or write elsewhere"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or write elsewhere"),
    errno.EROFS: ("read-only file system", "write somewhere else"),
}


def _free_space(path: Path) -> str:
    """How much room the file system holding `path` has left, in words."""
    for folder in (path, *path.parents):
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(folder).free
            return f"{free / 2**20:.1f} MiB free there"
    return "free space unknown"


def _what_was_kept(exc: BaseException) -> str:
    """What a failed run left (`runs.RunFolder` notes it on the error): its target as it
    was, or the run so far, kept to be resumed."""
    kept, untouched = getattr(exc, "knowflow_kept", None), getattr(exc, "knowflow_untouched",
                                                                     None)
    if kept is not None:
        experiment = run_command(Path(kept)) or Path(kept).parent.name
        command = "sft" if experiment == "sft" else f"run {experiment}"
        return (f"; the run so far is kept in {kept}: continue it with `knowflow {command} "
                f"--resume --run-dir {kept}`")
    return f"; nothing was written ({untouched} is as it was)" if untouched else ""


def describe(exc: BaseException) -> tuple[str, int] | None:
    """(the one-line message, the exit code) for an error the user can act on, else None."""
    if isinstance(exc, KnowflowError):
        return str(exc), 2
    if isinstance(exc, OSError) and not isinstance(exc, (ConnectionError, TimeoutError)):
        what, fix = _OS_ERRORS.get(exc.errno, (exc.strerror or type(exc).__name__,
                                               "check the path"))
        if exc.filename == STDOUT:
            return (f"{STDOUT}: {what}{_what_was_kept(exc)}; send the output elsewhere (a file "
                    "on a disk with room, or a pipe)"), 2
        where = target_of(exc.filename) if exc.filename is not None else "file system"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) and exc.filename is not None:
            what += f" ({_free_space(Path(exc.filename))}; the file was not written)"
        return f"{where}: {what}{_what_was_kept(exc)}; {fix}", 2
    if isinstance(exc, UnicodeDecodeError):
        return (f"input: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                f"{exc.start}); save the file as UTF-8"), 2
    if isinstance(exc, json.JSONDecodeError):
        return (f"JSON, line {exc.lineno}: {exc.msg}; a file knowflow reads is damaged "
                "(rerun with --verbose to see which)"), 2
    if out_of_memory(exc):
        return str(memory_error()), 2
    return None


FINISHED = "finished"  # a Terminated raised after the command returned (see below)


def _interrupted(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The one line, and exit code 130 (SIGINT) or 143 (SIGTERM), of an interrupted command."""
    signum = getattr(exc, "signal", None) or signal.SIGINT
    what = "terminated" if signum == signal.SIGTERM else "interrupted"
    code = 128 + int(signum)
    run_dir = exc.run_dir if isinstance(exc, Interrupted) else None
    if exc.args == (FINISHED,):
        return f"{what} after the command had finished; what it wrote is complete", code
    if not run_dir:
        return f"{what}; nothing was written", code
    experiment = run_command(Path(run_dir)) or Path(run_dir).parent.name
    command = "sft" if experiment == "sft" else f"run {experiment}"
    return (f"{run_dir}: {what}; continue it with `knowflow {command} --resume "
            f"--run-dir {run_dir}`"), code


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises `Terminated` where SIGINT raises KeyboardInterrupt (main thread only),
    so both unwind the same way; the previous handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[int] = []

    def handler(signum, frame):
        received.append(signum)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
    if received:
        # A library caught the exception (some wrap imports or loops in broad handlers) and the
        # command ran on to its end: the signal still ends it as terminated, with its work kept.
        raise Terminated(FINISHED)


class Settings:
    """What the top-level options ask of the boundary (set once per invocation)."""

    verbose: bool = False


def guard(command: Callable) -> Callable:
    """Run `command` inside the error boundary (see the module docstring)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            with _sigterm_as_interrupt():
                return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except BrokenPipeError as exc:
            if exc.filename != STDOUT:
                raise
            raise typer.Exit(code=128 + signal.SIGPIPE) from None  # as a shell reports SIGPIPE
        except KeyboardInterrupt as exc:
            message, code = _interrupted(exc)
            _report(message, exc)
            raise typer.Exit(code=code) from None
        except Exception as exc:
            known = describe(exc)
            message, code = known or (f"internal error ({type(exc).__name__}: {exc})"
                                      f"{_what_was_kept(exc)}; rerun with --verbose for the "
                                      "traceback and report it", 1)
            _report(message, exc)
            raise typer.Exit(code=code) from None

    return wrapper


def _report(message: str, exc: BaseException) -> None:
    if Settings.verbose:
        err_console.print("".join(traceback.format_exception(exc)), highlight=False,
                          markup=False, soft_wrap=True)
    line = " ".join(message.split())  # one line, whatever the message held
    err_console.print(Text.assemble(("error:", "bold red"), " " + line), highlight=False,
                      soft_wrap=True)
