"""`sft`: finetune a causal LM on an instruction file or the built-in mixture while tracking
context reliance (what `knowflow sft` runs; see `knowflow.train.sft_job`)."""

from __future__ import annotations

from pathlib import Path

from knowflow.experiments.registry import register
from knowflow.report.reliance import plot_sft
from knowflow.train.sft_job import SFTJobConfig, run_sft_job


@register("sft", SFTJobConfig, plot_sft,
          "Finetune an HF causal LM (full, LoRA or QK-only) with context-reliance tracking",
          columns=("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                   "train_loss", "seconds"))
def run(cfg: SFTJobConfig, out_dir: Path, progress=None) -> dict:
    return run_sft_job(cfg, out_dir, progress=progress)
