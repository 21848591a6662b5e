"""The experiment registry: a name -> (config class, run function, figure function).

Every experiment follows one signature, `run(cfg, out_dir) -> Summary`, where `Summary` is a
JSON-able dict; `plot(run_dir)` draws the figures from the records on disk (never from models).

The built-in experiments are registered by `knowflow/experiments/__init__.py`, which imports
each of their modules. Python runs a package's `__init__` before any of its submodules, so they
are registered before this module is first used; this module imports no experiment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowflow.errors import ConfigError

Summary = dict[str, Any]


@dataclass(frozen=True)
class Experiment:
    name: str
    config_cls: type
    run: Callable[[Any, Path], Summary]
    plot: Callable[[Path], list[Path]]
    description: str
    columns: tuple[str, ...] = ()  # summary metrics the CLI shows in its table
    # checks that need more than the config (a device, a model folder): run before the run
    # directory is made, so a refusal leaves nothing behind
    check: Callable[[Any], None] | None = None


_REGISTRY: dict[str, Experiment] = {}


def register(name: str, config_cls: type, plot: Callable[[Path], list[Path]],
             description: str, columns: tuple[str, ...] = (),
             check: Callable[[Any], None] | None = None) -> Callable:
    """Decorator: register `run(cfg, out_dir) -> Summary` under `name`."""

    def wrap(run: Callable[[Any, Path], Summary]) -> Callable[[Any, Path], Summary]:
        if name in _REGISTRY:
            raise ValueError(f"experiment {name!r} registered twice")
        _REGISTRY[name] = Experiment(name, config_cls, run, plot, description, columns,
                                     check)
        return run

    return wrap


def get_experiment(name: str) -> Experiment:
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ConfigError(f"unknown experiment {name!r} (known: {known})")
    return _REGISTRY[name]


def list_experiments() -> list[Experiment]:
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
