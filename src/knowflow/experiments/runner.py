"""Run a registered experiment under the run contract (see `knowflow.runs`)."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowflow.config import apply_overrides, config_from_dict, config_to_dict
from knowflow.errors import ConfigError, KnowflowError
from knowflow.experiments.registry import get_experiment
from knowflow.io import atomic_write_json, read_json
from knowflow.runs import CONFIG, REPORT, SUMMARY, latest_unfinished, new_run_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    columns: tuple[str, ...]
    figures: list[Path]
    report: Path
    seconds: float


def build_config(name: str, overrides: list[str] | dict | None = None) -> Any:
    """The experiment's default config with overrides applied, validated."""
    exp = get_experiment(name)
    cfg = apply_overrides(exp.config_cls(), overrides or [])
    validate = getattr(cfg, "validate", None)
    if validate is not None:
        validate()
    return cfg


def run_experiment(name: str, overrides: list[str] | dict | None = None,
                   runs_root: str | Path = "runs", resume: bool | str | Path = False,
                   progress=None) -> RunResult:
    """Run experiment `name` and write its run directory; returns where and what.

    `resume=True` continues the newest unfinished run of `name`; a path continues that run.
    The config is validated before anything is written, so bad input leaves no directory.
    """
    from knowflow.report.html import write_report

    exp = get_experiment(name)
    if resume:
        if overrides:
            raise ConfigError("--resume continues a run with its saved config; drop --set")
        run_dir = latest_unfinished(Path(runs_root), name) if resume is True else Path(resume)
        if not (run_dir / CONFIG).exists():
            raise ConfigError(f"--resume: {run_dir} has no {CONFIG}")
        cfg = config_from_dict(exp.config_cls, read_json(run_dir / CONFIG))
        log.info("resuming %s", run_dir)
    else:
        cfg = build_config(name, overrides)
        run_dir = new_run_dir(Path(runs_root), name)
        atomic_write_json(run_dir / CONFIG, config_to_dict(cfg))
    start = time.perf_counter()
    # `progress(done, total)` reaches experiments whose run function takes it
    try:
        summary = exp.run(cfg, run_dir, progress=progress) if progress is not None and \
            "progress" in inspect.signature(exp.run).parameters else exp.run(cfg, run_dir)
    except KnowflowError:
        if not resume:  # bad input found late (e.g. a module the model lacks): leave nothing
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    seconds = time.perf_counter() - start
    figures = exp.plot(run_dir)
    atomic_write_json(run_dir / SUMMARY, summary)
    report = write_report([run_dir], run_dir / REPORT)
    return RunResult(run_dir, summary, exp.columns, figures, report, seconds)


def default_config_dict(name: str) -> dict:
    return dataclasses.asdict(get_experiment(name).config_cls())
