"""Run a registered experiment under the run contract (see `knowflow.store.run_folder`).

Everything that can be checked is checked before the run directory is made (the config, the
experiment's own `check`, that the runs folder is writable). The run is staged: written under
a hidden name and renamed into place when complete, so bad input found later, Ctrl-C, SIGTERM
or a full disk leave the filesystem as it was, unless the run already holds a complete
checkpoint: then it is kept, marked in progress, and `Interrupted` names it for `--resume`.

`finish_run` (`report.finish`) is the last step of every run folder (an experiment's here).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from pathlib import Path
from typing import Any

from knowflow.config import config_from_dict, config_to_dict, resolve_config, validate_config
from knowflow.errors import (
    ConfigError,
    DataError,
    Interrupted,
    memory_error,
    out_of_memory,
)
from knowflow.experiments.registry import get_experiment
from knowflow.report.finish import finish_run
from knowflow.store.checks import check_run_files, remove_stale_temps
from knowflow.store.identity import CONFIG, METRICS, check_identity
from knowflow.store.outputs import check_out_dir
from knowflow.store.readers import read_json, read_jsonl
from knowflow.store.result import Result
from knowflow.store.run_folder import Progress, RunFolder, latest_unfinished, start_run

log = logging.getLogger(__name__)


def build_config(name: str, overrides: list[str] | dict | None = None, config: Any = None,
                 **fields: Any) -> Any:
    """The experiment's config (`config`, default its defaults) with `overrides` ("key=value"
    strings or a dict) and then `fields` applied, validated."""
    return resolve_config(get_experiment(name).config_cls, config, overrides, fields)


def _resumed_config(exp, run_dir: Path) -> Any:
    """The saved config of `run_dir`, with every file the run keeps checked for damage."""
    if not run_dir.is_dir():
        raise ConfigError(f"--run-dir {run_dir}: no such run directory",
                          hint="give an existing runs/<experiment>/<timestamp> folder")
    if not (run_dir / CONFIG).exists():
        raise ConfigError(f"--resume: {run_dir} has no {CONFIG}",
                          hint="it is not a knowflow run; start a fresh run instead")
    check_identity(run_dir, exp.name)
    remove_stale_temps(run_dir)
    check_run_files(run_dir, resume=True)
    hint = "start a fresh run (without --resume); this saved config does not fit this version"
    try:
        cfg = config_from_dict(exp.config_cls, read_json(run_dir / CONFIG))
        cfg = _saved_data(cfg, run_dir)
        validate_config(cfg)
    except ConfigError as exc:
        raise DataError(run_dir / CONFIG, str(exc.args[0]).split("; ")[0], hint=hint) from None
    except TypeError as exc:  # a field the dataclass does not accept
        raise DataError(run_dir / CONFIG, f"not this experiment's config ({exc})",
                        hint=hint) from None
    return cfg


def _saved_data(cfg: Any, run_dir: Path) -> Any:
    """A run that saved its training rows (`data.jsonl`) resumes from them, not from the
    `data` path it was started with (which may have changed or moved since)."""
    saved = run_dir / "data.jsonl"
    if isinstance(getattr(cfg, "data", None), str) and cfg.data != "builtin" and saved.is_file():
        return dataclasses.replace(cfg, data=str(saved))
    return cfg


def run_experiment(name: str, overrides: list[str] | dict | None = None, *, config: Any = None,
                   runs_dir: str | Path = "runs", resume: bool | str | Path = False,
                   progress: Progress | None = None, **fields: Any) -> Result:
    """Run experiment `name` and write its run directory runs_dir/<name>/<timestamp>/. No
    model or data: the experiment builds its own, from `config` (its config class), with
    `overrides` ("key=value" strings, the CLI's --set, or a dict) and `fields` applied.

    `resume=True` continues the newest unfinished run of `name`; a path continues that run.
    The config is validated before anything is written, so bad input leaves no directory.
    The Result's records are the run's metrics.jsonl (one per evaluation step).
    """
    exp = get_experiment(name)
    if overrides is not None and not isinstance(overrides, (list, tuple, dict)):
        raise ConfigError("give a list of 'key=value' strings (the CLI's --set) or a dict, got "
                          f"{type(overrides).__name__} {overrides!r}", "overrides")
    if isinstance(overrides, (list, tuple)) and not all(isinstance(o, str) for o in overrides):
        raise ConfigError("each override is a 'key=value' string (the CLI's --set)",
                          "overrides")
    if resume:
        if overrides or fields or config is not None:
            raise ConfigError("--resume continues a run with its saved config",
                              hint="drop --set and the other options")
        run_dir = latest_unfinished(Path(runs_dir), name) if resume is True else Path(resume)
        cfg = _resumed_config(exp, run_dir)
        if exp.check is not None:  # a check that takes the run also checks its checkpoints
            exp.check(cfg, run_dir=run_dir) if "run_dir" in inspect.signature(
                exp.check).parameters else exp.check(cfg)
        log.info("resuming %s", run_dir)
        run = RunFolder(run_dir).claim()  # never removed; one process at a time
    else:
        cfg = build_config(name, overrides, config, **fields)
        if exp.check is not None:
            exp.check(cfg)
        check_out_dir(Path(runs_dir) / name, what="runs folder")
        run = start_run(config_to_dict(cfg), name, runs_dir=runs_dir, resumable=True)
    start = time.perf_counter()
    # `progress(done, total)` reaches experiments whose run function takes it
    try:
        with run:  # staged (a resumed run: in place); see runs.RunFolder
            summary = exp.run(cfg, run.path, progress=progress) if progress is not None and \
                "progress" in inspect.signature(exp.run).parameters else exp.run(cfg, run.path)
            seconds = time.perf_counter() - start
            finish_run(run, summary, exp.plot)
    except (MemoryError, RuntimeError) as exc:
        if not out_of_memory(exc):
            raise
        raise memory_error(f"choose smaller sizes (see `knowflow config {name}`)") from None
    except KeyboardInterrupt as exc:  # kept only once it holds a checkpoint (or resumed)
        raise Interrupted(run.path if run.kept or resume else None,
                          signal=getattr(exc, "signal", None)) from None
    metrics = run.path / METRICS
    return Result(read_jsonl(metrics) if metrics.exists() else [], summary,
                  read_json(run.path / CONFIG), name, out_dir=run.path, seconds=seconds)


def default_config_dict(name: str) -> dict:
    return dataclasses.asdict(get_experiment(name).config_cls())
