"""The experiment registry: a name -> (config class, run function, figure function).

Every experiment follows one signature, `run(cfg, out_dir) -> Summary`, where `Summary` is a
JSON-able dict; `plot(run_dir)` draws the figures from the records on disk (never from models).

Each reproduction lives in its own folder (`experiments/<name>/`: world, model, training,
config, findings and figures); its `experiment.py` registers it. The built-in modules are
imported on the first lookup, so importing one experiment's world does not import the others.
"""

from __future__ import annotations

import importlib
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
BUILTIN = (
    "knowflow.experiments.cpi_toy.experiment",
    "knowflow.experiments.ocr_toy.experiment",
    "knowflow.experiments.inversion_tiny.experiment",
    "knowflow.experiments.inversion_tiny.heads",
    "knowflow.experiments.inversion_injected.experiment",
    "knowflow.experiments.inversion_smollm2.experiment",
    "knowflow.experiments.ocr_smollm2.experiment",
    "knowflow.experiments.sft_experiment",
)


def _load_builtin() -> None:
    for module in BUILTIN:
        importlib.import_module(module)


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
    _load_builtin()
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ConfigError(f"unknown experiment {name!r} (known: {known})")
    return _REGISTRY[name]


def list_experiments() -> list[Experiment]:
    _load_builtin()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
