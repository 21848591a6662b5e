"""`sft`: finetune a causal LM on an instruction file or the built-in mixture while tracking
context reliance (what `knowflow sft` runs; see `knowflow.train.sft_job`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from knowflow.config import require
from knowflow.data.instruction_rows import read_instruction_file
from knowflow.data.quality import warn_duplicate_keys
from knowflow.data.suites import list_suites
from knowflow.errors import ConfigError
from knowflow.experiments.registry import register
from knowflow.lens.device import check_device
from knowflow.lens.load import check_model
from knowflow.report.reliance import plot_sft
from knowflow.store.run_folder import Progress
from knowflow.train.curation import DynamicCurationConfig
from knowflow.train.resume import check_checkpoints
from knowflow.train.sft import SFTConfig
from knowflow.train.sft_job import BUILTIN, SFTJobConfig, run_sft_job
from knowflow.train.tracker import is_data, tracked_items


def check(cfg: SFTJobConfig, run_dir: Path | None = None) -> None:
    """What the config alone cannot show: the device, the model, the names of suites and
    schedulers, and options that only make sense together. Runs before the run folder exists
    (`run_dir`: a run to resume, whose checkpoints must fit the config; before it is claimed)."""
    from transformers.trainer_utils import SchedulerType

    s, t = cfg.sft, cfg.track
    require(s.weight_decay >= 0, "sft.weight_decay", f"must not be negative, got {s.weight_decay}")
    schedulers = [v.value for v in SchedulerType]
    require(s.scheduler in schedulers, "sft.scheduler",
            f"unknown scheduler {s.scheduler!r} (known: {', '.join(schedulers)})")
    if cfg.tracking:
        known = list_suites()
        for suite in t.suites:
            require(suite in known or is_data(suite), "track.suites",
                    f"unknown suite {suite!r} and no such file (suites: {', '.join(known)})")
        require(len(t.suites) > 0, "track.suites", "name at least one suite (or --no-track)")
        files = [s for s in t.suites if is_data(s)]
        if files:  # a malformed tracked file fails here, before the run folder exists
            tracked_items(files, t.fields, t.limit, t.seed, t.preset or None)
    else:
        require(not t.keep_peak, "track.keep_peak",
                "--keep-peak needs tracking; drop --no-track or --keep-peak")
        require(t.stop_drop is None, "track.stop_drop",
                "--stop-drop needs tracking; drop --no-track or --stop-drop")
    if cfg.curate.mode != "dynamic":
        require(cfg.curate == DynamicCurationConfig(), "curate.mode",
                "--curate-every, --curate-fraction and --curate-threshold need "
                "--curate dynamic")
    else:
        require(s.trainer == "hf", "curate.mode", "dynamic curation needs --trainer hf")
    check_device(cfg.device)
    check_model(cfg.model, cfg.source)
    if run_dir is not None:
        check_checkpoints(run_dir, cfg.sft)
    if cfg.data != BUILTIN:  # the file validate() read, not a second reading
        warn_duplicate_keys(Path(cfg.data), read_instruction_file(cfg.data).duplicate_key_lines)


@register("sft", SFTJobConfig, plot_sft,
          "Finetune an HF causal LM (full, LoRA or QK-only) with context-reliance tracking",
          columns=("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                   "train_loss", "seconds"), check=check)
def run(cfg: SFTJobConfig, out_dir: Path, progress: Progress | None = None) -> dict:
    try:
        summary = run_sft_job(cfg, out_dir, progress=progress)
    except ConfigError as exc:  # found late, by the training code, under SFTConfig's names
        sft_fields = {f.name for f in dataclasses.fields(SFTConfig)}
        raise exc.under("sft.") if exc.field in sft_fields else exc from None
    if cfg.data != BUILTIN:
        summary["n_duplicate_keys"] = len(read_instruction_file(cfg.data).duplicate_key_lines)
    return summary
