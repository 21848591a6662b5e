"""What every `knowflow` command shares: the one console pair, the option checks that run
before any work, and the option types several commands declare alike.

Commands import the library inside their bodies, so `knowflow --help` and a bad flag answer
without importing torch or transformers (seconds); everything here is light.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from knowflow.errors import ConfigError, DataError

# Results go to stdout, wide enough for result tables when the output is a file or a pipe
# (rich assumes 80 columns); errors, logs and progress bars go to stderr.
console = Console(width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True)

Opt = typer.Option
ThreadsOpt = Annotated[int, Opt("--threads", help="torch CPU threads.")]
DeviceOpt = Annotated[str, Opt("--device", help="auto, cpu, cuda, mps.")]
DtypeOpt = Annotated[str, Opt("--dtype", help="auto, float32, bfloat16, float16.")]
SetOpt = Annotated[list[str] | None, Opt("--set", help="Override a config field: key=value "
                                                       "(repeatable).")]
RunsOpt = Annotated[Path, Opt("--runs-dir", help="Where run directories go.")]


def check_threads(threads: int) -> None:
    """--threads: at least one torch thread, at most one per CPU this process may use (more
    only slows torch down; tens of thousands crash it)."""
    if threads < 1:
        raise ConfigError(f"must be at least 1, got {threads}", "--threads",
                          "give --threads 1 (fastest for small models) or more")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1
    if threads > cpus:
        raise ConfigError(f"must be at most {cpus} (the CPUs this process may use), got "
                          f"{threads}", "--threads", "more threads than CPUs only slow torch "
                          "down")


def set_threads(threads: int) -> None:
    """Check --threads, then give torch that many (imports torch: call it once checks pass)."""
    check_threads(threads)
    import torch  # heavy: only once a command runs

    torch.set_num_threads(threads)


def check_seed(seed: int) -> None:
    if seed < 0:
        raise ConfigError(f"must not be negative, got {seed}", "--seed")


def check_suites(suite: str | None) -> None:
    """--suite: comma-separated built-in suite names."""
    if suite is None:
        return
    from knowflow.worlds.suites import list_suites

    names = [n.strip() for n in suite.split(",") if n.strip()]
    known = list_suites()
    if not names or any(n not in known for n in names):
        bad = next((n for n in names if n not in known), suite)
        raise ConfigError(f"unknown suite {bad!r}", "--suite",
                          f"give one or more of {', '.join(known)}, comma-separated")


def check_run_dir(run_dir: Path | None, resume: bool) -> None:
    """--run-dir names the run that --resume continues; alone it would be ignored."""
    if run_dir is not None and not resume:
        raise ConfigError("only works with --resume", "--run-dir",
                          "add --resume to continue that run, or drop --run-dir")


def check_run_folders(run_dirs: list[Path]) -> None:
    """Each path is an existing knowflow run folder whose files are readable."""
    from knowflow.runs import CONFIG, check_run_files

    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise DataError(run_dir, "no such run folder" if not run_dir.exists() else
                            "a file, not a run folder", hint="give runs/<experiment>/<timestamp>")
        if not (run_dir / CONFIG).exists():
            raise DataError(run_dir, f"not a knowflow run directory (no {CONFIG})",
                            hint="give runs/<experiment>/<timestamp>")
        check_run_files(run_dir, resume=False)


def print_paths(run_dir: Path, report: Path | None = None, seconds: float | None = None,
                label: str = "run directory") -> None:
    """The closing lines every run-writing command prints."""
    extra = f"  ({seconds:.1f} s)" if seconds is not None else ""
    console.print(f"{label}: {run_dir}{extra}", highlight=False)
    if report is not None:
        console.print(f"report: {report}", highlight=False)
