"""`inversion-smollm2`: context-parametric inversion in a real model, and its mitigations.

SmolLM2-135M-Instruct is finetuned with LoRA on knowflow's built-in C/C+S/S mixture while the
`RelianceTracker` scores counterfactual accuracy on held-out subjects (never in the mixture).
Then the same run is repeated with each mitigation of Goyal et al. (ICLR 2025):
- `curated`: the mixture without the 25% of examples with the lowest no-context loss under the
  model before finetuning (`knowflow curate`);
- `qk_only`: only the query and key projections are trained (full rank, its own learning rate);
- `augmented`: entity-substituted counterfactual examples added (`knowflow augment`).
Each arm is an ordinary `knowflow sft` run in `arms/<arm>/` (resumable on its own); arms run
in parallel worker processes.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from knowflow.config import require
from knowflow.experiments.cpi_toy import INVERSION_FALL, INVERSION_RISE
from knowflow.experiments.parallel import run_jobs
from knowflow.experiments.registry import Summary, register
from knowflow.io import atomic_write_json, atomic_write_jsonl, read_json, read_jsonl
from knowflow.report.reliance import plot_arms
from knowflow.runs import METRICS, SUMMARY
from knowflow.train.sft import SFTConfig
from knowflow.train.tracker import TrackerConfig
from knowflow.worlds.instructions import MixtureConfig

log = logging.getLogger(__name__)

ARMS = ("lora", "curated", "qk_only", "augmented")


@dataclass(frozen=True)
class InversionSmolConfig:
    model: str = "smollm2-135m-instruct"
    arms: tuple[str, ...] = ARMS
    workers: int = 4                  # one process per arm (each one torch thread)
    qk_lr: float = 1e-4               # qk_only trains full-rank weights: a smaller step
    curate_drop: float = 0.25
    augment_ratio: float = 0.25
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(
        train="lora", lr=1e-3, steps=60, batch_size=8, prompt_format="plain", save_every=20,
        log_every=5))
    mixture: MixtureConfig = field(default_factory=MixtureConfig)
    track: TrackerConfig = field(default_factory=lambda: TrackerConfig(
        every=10, limit=24, prompt_format="plain", scoring="loglik"))

    def validate(self) -> None:
        require(bool(self.arms), "arms", "name at least one arm")
        for arm in self.arms:
            require(arm in ARMS, "arms", f"unknown arm {arm!r} (known: {', '.join(ARMS)})")
        require(self.workers >= 1, "workers", "must be at least 1")
        require(self.qk_lr > 0, "qk_lr", "must be positive")
        require(0 < self.curate_drop < 1, "curate_drop", "must lie in (0, 1)")
        require(self.augment_ratio > 0, "augment_ratio", "must be positive")
        require(self.sft.train == "lora", "sft.train", "the base arm is LoRA; qk_only is an arm")
        self.job("lora").validate()

    def job(self, arm: str, data: str = "builtin"):
        from knowflow.train.sft_job import SFTJobConfig

        sft = self.sft
        if arm == "qk_only":
            sft = dataclasses.replace(sft, train="qk_only", lr=self.qk_lr)
        return SFTJobConfig(model=self.model, data=data, sft=sft, mixture=self.mixture,
                            track=self.track, save_model=False, track_items="heldout")


def _prepare_data(cfg: InversionSmolConfig, arm: str, arm_dir: Path) -> str:
    """The training file of `arm` (written once into its folder)."""
    from knowflow.train.sft_data import save_instructions
    from knowflow.worlds.instructions import builtin_mixture

    if arm in ("lora", "qk_only"):
        return "builtin"
    path = arm_dir / "train.jsonl"
    if path.exists():
        return str(path)
    rows = builtin_mixture(cfg.mixture)
    if arm == "augmented":
        from knowflow.curate.augment import augment

        rows = augment(rows, cfg.augment_ratio, cfg.mixture.seed)
    else:
        from knowflow.curate.criticality import CurateConfig, curate_examples
        from knowflow.models.hf import load_model

        model, tok = load_model(cfg.model)
        ccfg = CurateConfig(drop=cfg.curate_drop, prompt_format=cfg.sft.prompt_format)
        rows, scores = curate_examples(model, tok, rows, ccfg)
        atomic_write_jsonl(arm_dir / "scores.jsonl", scores)
    save_instructions(path, rows)
    return str(path)


def run_arm(cfg: InversionSmolConfig, arm: str, out_dir: Path) -> dict:
    from knowflow.train.sft_job import run_sft_job

    arm_dir = out_dir / "arms" / arm
    if (arm_dir / SUMMARY).exists():
        return read_json(arm_dir / SUMMARY)
    data = _prepare_data(cfg, arm, arm_dir)
    summary = run_sft_job(cfg.job(arm, data), arm_dir)
    if arm == "curated":
        scores = read_jsonl(arm_dir / "scores.jsonl")
        dropped = [s for s in scores if s["dropped"]]
        summary["dropped_by_kind"] = {k: sum(s["kind"] == k for s in dropped)
                                      for k in ("C", "C+S", "S")}
    atomic_write_json(arm_dir / SUMMARY, summary)
    return summary


def _row(s: dict) -> dict:
    keys = ("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
            "param_acc_start", "param_acc_final", "attn_context_start", "attn_context_final",
            "train_loss", "n_examples", "trainable_params", "seconds", "tracking_seconds")
    row = {k: s.get(k) for k in keys}
    row["rise"] = s["cf_acc_peak"] - s["cf_acc_start"]
    row["fall"] = s["cf_acc_peak"] - s["cf_acc_final"]
    if "dropped_by_kind" in s:
        row["dropped_by_kind"] = s["dropped_by_kind"]
    return row


@register("inversion-smollm2", InversionSmolConfig, plot_arms,
          "Reliance during SmolLM2-135M LoRA finetuning, and curated/QK-only/augmented runs",
          columns=("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final", "rise",
                   "fall", "param_acc_final", "attn_context_final", "seconds"))
def run(cfg: InversionSmolConfig, out_dir: Path) -> Summary:
    """Run the arms (in parallel), then gather their records and summaries."""
    out_dir = Path(out_dir)
    if "curated" in cfg.arms:  # score with the model once, before the workers start
        _prepare_data(cfg, "curated", out_dir / "arms" / "curated")
    results = run_jobs(run_arm, [(cfg, arm, out_dir) for arm in cfg.arms], cfg.workers)
    summary = {arm: _row(s) for arm, s in zip(cfg.arms, results, strict=True)}
    records = [{**r, "arm": arm} for arm in cfg.arms
               for r in read_jsonl(out_dir / "arms" / arm / METRICS)]
    atomic_write_jsonl(out_dir / METRICS, records)
    summary["findings"] = findings(summary)
    return summary


def findings(summary: dict) -> dict:
    """Each arm's fall, and a verdict on the plain LoRA arm (the inversion criterion of the
    toy models); no verdict when the `lora` arm did not run."""
    arms = {k: v for k, v in summary.items() if isinstance(v, dict) and "fall" in v}
    out: dict = {f"{arm}_fall": row["fall"] for arm, row in arms.items()}
    base = arms.get("lora")
    if base is None:
        return out
    shown = base["rise"] >= INVERSION_RISE and base["fall"] >= INVERSION_FALL
    others = ", ".join(f"{arm} {row['fall']:.3f}" for arm, row in arms.items() if arm != "lora")
    verdict = (
        f"{'Inversion' if shown else 'No inversion'} in LoRA finetuning: counterfactual "
        f"accuracy {base['cf_acc_start']:.3f} -> peak {base['cf_acc_peak']:.3f} (step "
        f"{base['cf_acc_peak_step']}) -> {base['cf_acc_final']:.3f}, fall {base['fall']:.3f}"
        + (f" (mitigations fall {others})" if others else "")
        + f"; criterion: rise >= {INVERSION_RISE}, fall >= {INVERSION_FALL}.")
    return {"verdict": verdict, **out}
