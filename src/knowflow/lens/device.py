"""Where a model runs: the device a name means (checked against this machine), the dtype
`auto` means there, and the torch CPU threads of a command (`--threads`).

Threads: by default every CPU this process may use (its affinity mask, under taskset or a
container's cpuset), which was fastest in benchmarks/scale/bench_threads.py (docs/concepts.md,
threads); more than that only slows torch down, and tens of thousands crash it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from knowflow.config import option
from knowflow.errors import ConfigError, KnowflowError


def check_device(device: str) -> torch.device | None:
    """The device `device` names, if this machine has it; else a `KnowflowError` saying what
    to use instead. None for "auto"."""
    if device == "auto":
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise KnowflowError(f"device {device!r}: unknown device",
                            "use auto, cpu, cuda, cuda:N or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise KnowflowError(f"device {device!r}: CUDA is not available on this machine",
                                "use --device cpu (or auto)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise KnowflowError(f"device {device!r}: this machine has "
                                f"{torch.cuda.device_count()} CUDA device(s)",
                                "use cuda:0 or auto")
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if not (mps and mps.is_available()):
            raise KnowflowError(f"device {device!r}: MPS (Apple GPU) is not available on this "
                                "machine", "use --device cpu (or auto)")
    elif dev.type != "cpu":
        raise KnowflowError(f"device {device!r}: not supported",
                            "use auto, cpu, cuda, cuda:N or mps")
    return dev


def resolve_device(device: str = "auto") -> torch.device:
    if device != "auto":
        return check_device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        value = getattr(torch, dtype)
    except AttributeError:
        raise KnowflowError(f"unknown dtype {dtype!r} (use auto, float32, bfloat16, float16)"
                            ) from None
    if not isinstance(value, torch.dtype):
        raise KnowflowError(f"unknown dtype {dtype!r}")
    return value


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), not the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


@dataclass(frozen=True)
class Threads:
    """--threads: torch CPU threads, at least one, at most one per CPU this process may use;
    None: every usable CPU."""

    threads: int | None = option(None, "torch CPU threads (default: every CPU this process "
                                       "may use).")

    def validate(self) -> None:
        if self.threads is None:
            return
        if self.threads < 1:
            raise ConfigError(f"must be at least 1, got {self.threads}", "threads",
                              "give 1 or more, or leave it out (every usable CPU)")
        cpus = usable_cpus()
        if self.threads > cpus:
            raise ConfigError(f"must be at most {cpus} (the CPUs this process may use), got "
                              f"{self.threads}", "threads", "more threads than CPUs only "
                              "slow torch down")

    def apply(self) -> int:
        """Give torch the threads (every usable CPU when None); returns the count."""
        count = self.threads or usable_cpus()
        torch.set_num_threads(count)
        return count


@dataclass(frozen=True)
class ExperimentThreads(Threads):
    """An experiment's threads: one per process unless given (its workers are processes)."""

    threads: int = option(1, "torch threads per process (1 is fastest for small models).")
