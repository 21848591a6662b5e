"""What every `knowflow` command shares: the one console pair, the option checks that run
before any work, and the option types several commands declare alike.

Commands import the library inside their bodies, so `knowflow --help` and a bad flag answer
without importing torch or transformers (seconds); everything here is light.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from knowflow.errors import ConfigError, DataError

# Results go to stdout, wide enough for result tables when the output is a file or a pipe
# (rich assumes 80 columns); errors, logs and progress bars go to stderr.
# A closed stream (`knowflow run x >&-`) is None in Python: what would be shown is dropped and
# the command still runs and writes its files.
_NOWHERE = open(os.devnull, "w") if sys.stdout is None or sys.stderr is None else None  # noqa: SIM115
console = Console(width=None if sys.stdout and sys.stdout.isatty() else 150,
                  file=None if sys.stdout else _NOWHERE)
err_console = Console(stderr=True, file=None if sys.stderr else _NOWHERE)

Opt = typer.Option
ThreadsOpt = Annotated[int | None, Opt(
    "--threads", help="torch CPU threads (default: every CPU this process may use).")]
DeviceOpt = Annotated[str, Opt("--device", help="auto, cpu, cuda, mps.")]
DtypeOpt = Annotated[str, Opt("--dtype", help="auto, float32, bfloat16, float16.")]
SetOpt = Annotated[list[str] | None, Opt("--set", help="Override a config field: key=value "
                                                       "(repeatable).")]
RunsOpt = Annotated[Path, Opt("--runs-dir", help="Where run directories go.")]
# How --model loads, beside every --model (knowflow.lens.hub.ModelSource; `model_source`)
REVISION_HELP = "The hub id's branch, tag or commit (default: main)."
TRUST_REMOTE_CODE_HELP = ("Let the model's repository run its own Python code (its auto_map); "
                          "off unless given.")
OFFLINE_HELP = "Only the Hugging Face cache, never the network (as HF_HUB_OFFLINE=1)."
RevisionOpt = Annotated[str | None, Opt("--revision", help=REVISION_HELP)]
TrustRemoteCodeOpt = Annotated[bool, Opt("--trust-remote-code", help=TRUST_REMOTE_CODE_HELP)]
OfflineOpt = Annotated[bool, Opt("--offline", help=OFFLINE_HELP)]


MAX_MEMORY_HELP = ("GiB the model and its largest batch may hold on the device (weights + "
                   "activations, estimated from the model's shape before the job starts; "
                   "Python's and torch's own memory not counted): a job that would need more "
                   "is refused with the numbers and a batch size that fits.")
MaxMemoryOpt = Annotated[float | None, Opt(
    "--max-memory", help="GiB the model and one batch of variant rows may hold (estimated "
    "from the model's shape; lens/memory.py): fewer rows per pass where the default would not "
    "fit, refused with the numbers when one row does not.")]


@dataclasses.dataclass(frozen=True)
class ConfigFlag:
    """An option that sets config fields one to one, declared once: `--name` (dashes for
    underscores) sets each of `keys` (dotted config paths) to its value. `default` None: unset
    unless given (the config's own default applies; `--help` shows none); else the default
    `--help` shows, which must be the config's (tests/cli/test_cli_flags.py checks the keys, types
    and defaults against the configs). `switch`: a bool flag that, when given, sets the keys to
    this value (`--no-track` sets `tracking` to False)."""

    name: str
    keys: tuple[str, ...]
    type: Any
    help: str
    default: Any = None
    switch: Any = None

    def parameter(self) -> inspect.Parameter:
        if self.switch is not None:
            option, tp, default = Opt(f"--{self.name.replace('_', '-')}", help=self.help), \
                bool, False
        else:
            option, default = Opt(help=self.help), self.default
            tp = self.type | None if default is None else self.type
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=Annotated[tp, option])

    def given(self, value: Any) -> dict[str, Any]:
        """{key: value} this flag sets: none when it is unset (None, or a switch left off)."""
        if self.switch is not None:
            return dict.fromkeys(self.keys, self.switch) if value else {}
        return {} if value is None else dict.fromkeys(self.keys, value)


def flag(name: str, keys: str | tuple[str, ...], tp: Any, help: str, default: Any = None,
         switch: Any = None) -> ConfigFlag:
    return ConfigFlag(name, (keys,) if isinstance(keys, str) else keys, tp, help, default, switch)


def config_flags(*layout: ConfigFlag | str) -> Callable[[Callable], Callable]:
    """Give a command the options of the `ConfigFlag`s in `layout`, in that order among its
    own parameters (named by the strings). The command receives `given`: {config key: value}
    for each flag set, in layout order, instead of one parameter per flag."""

    def wrap(fn: Callable) -> Callable:
        own = inspect.signature(fn, eval_str=True).parameters
        flags = [item for item in layout if isinstance(item, ConfigFlag)]
        params = [own[item].replace(kind=inspect.Parameter.KEYWORD_ONLY) if isinstance(item, str)
                  else item.parameter() for item in layout]
        if set(own) - {p.name for p in params} != {"given"}:
            raise TypeError(f"{fn.__name__}: layout must name every parameter but 'given'")

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            given: dict[str, Any] = {}
            for item in flags:
                given.update(item.given(kwargs.pop(item.name)))
            return fn(given=given, **kwargs)

        command.__signature__ = inspect.Signature(params)  # what typer reads
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return wrap


def model_source(revision: str | None, trust_remote_code: bool, offline: bool):
    """The `ModelSource` of --revision, --trust-remote-code and --offline (checked)."""
    from knowflow.lens.hub import ModelSource

    source = ModelSource(revision, trust_remote_code, offline)
    try:
        source.validate()
    except ConfigError as exc:
        raise ConfigError(exc.message, "--revision", exc.hint) from None
    return source


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. under taskset or a
    container's cpuset), not the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def check_threads(threads: int | None) -> None:
    """--threads: at least one torch thread, at most one per CPU this process may use (more
    only slows torch down; tens of thousands crash it). None: every usable CPU."""
    if threads is None:
        return
    if threads < 1:
        raise ConfigError(f"must be at least 1, got {threads}", "--threads",
                          "give --threads 1 or more, or leave it out (every usable CPU)")
    cpus = usable_cpus()
    if threads > cpus:
        raise ConfigError(f"must be at most {cpus} (the CPUs this process may use), got "
                          f"{threads}", "--threads", "more threads than CPUs only slow torch "
                          "down")


def set_threads(threads: int | None) -> int:
    """Check --threads, then give torch that many, every usable CPU when None (measured in
    benchmarks/scale/bench_threads.py: see docs/concepts.md, threads); returns the count. Imports
    torch: call it once checks pass."""
    check_threads(threads)
    import torch  # heavy: only once a command runs

    count = threads or usable_cpus()
    torch.set_num_threads(count)
    return count


def check_seed(seed: int) -> None:
    if seed < 0:
        raise ConfigError(f"must not be negative, got {seed}", "--seed")


def check_suites(suite: str | None) -> None:
    """--suite: comma-separated built-in suite names."""
    if suite is None:
        return
    from knowflow.data.suites import list_suites

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
    from knowflow.store.checks import check_run_files
    from knowflow.store.identity import CONFIG

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
