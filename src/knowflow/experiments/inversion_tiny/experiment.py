"""`inversion-tiny`: context-parametric inversion in a small Llama trained from scratch.

A tiny world (see `knowflow.experiments.inversion_tiny.world`) is pretrained into an HF
`LlamaForCausalLM`
for a fixed budget (cached by config hash; the default config's seeds 0-4 ship with knowflow,
see `experiments.inversion_tiny.pretrain`), then instruction-finetuned on `context + question ->
answer` in these
arms (all but `dynamic` by default), each for every seed:

- `mixed`: the default mixture of C, C+S and S examples, training `sft.train` (by default
  only q_proj/k_proj, the theory model's setting);
- `c_only`: the same number of examples, all context-critical (the control);
- `filtered`: the mixture minus the share with the lowest no-context loss under the
  pretrained model (the paper's mitigation);
- `augmented`: the mixture plus counterfactual examples (memorized subject, conflicting
  context, answer from the context);
- `qk_only`: the mixture with only q_proj/k_proj trainable (the same job as `mixed` when
  `sft.train` is `qk_only`: its records are then `mixed`'s, not a second run);
- `lora`: the mixture with LoRA adapters on every projection (values and MLPs train too);
- `dynamic`: the mixture under dynamic curation (`train.curation`): every `dynamic.every`
  steps each example's no-context loss is re-scored under the *current* model, and of the
  `dynamic.fraction` of the examples still in with the lowest loss, those below
  `dynamic.threshold` (the model answers them from memory alone) are left out for good
  (`dynamic.readmit=true`: only until the next re-scoring).

Counterfactual accuracy is tracked on memorized subjects that finetuning never sees. Each
(arm, seed) is an independent job: jobs run in parallel processes with one torch thread each,
checkpoint their finetuning state as they go, and save their records when done, so `--resume`
continues an interrupted run along the same curve.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from knowflow.config import option, require
from knowflow.experiments.inversion_tiny.curves import arm_summary, mean_curve
from knowflow.experiments.inversion_tiny.figures import plot_inversion_tiny
from knowflow.experiments.inversion_tiny.findings import findings, mechanism_summary
from knowflow.experiments.inversion_tiny.jobs import finetune_job, job_arm, pretrain_job
from knowflow.experiments.inversion_tiny.model import TinyModelConfig
from knowflow.experiments.inversion_tiny.phase import run_phase
from knowflow.experiments.inversion_tiny.pretrain import PretrainConfig
from knowflow.experiments.inversion_tiny.world import Mixture, TinyWorldConfig
from knowflow.experiments.mitigations import (
    TINY_ARMS,
    TINY_DEFAULT_ARMS,
    check_dynamic_arm,
    dynamic_arm,
    renamed_to_dynamic,
)
from knowflow.experiments.parallel import run_pipeline
from knowflow.experiments.phase import PhaseConfig
from knowflow.experiments.phase_figure import with_phase
from knowflow.experiments.registry import Summary, register
from knowflow.store.files import atomic_write_jsonl
from knowflow.store.identity import METRICS
from knowflow.store.run_folder import PartStore
from knowflow.train.curation import DynamicCurationConfig
from knowflow.train.sft import SFTConfig

log = logging.getLogger(__name__)

ARMS, DEFAULT_ARMS = TINY_ARMS, TINY_DEFAULT_ARMS  # (`--set arms=...,dynamic` adds dynamic)


@dataclass(frozen=True)
class TinyTrackConfig:
    every: int = option(20, ge=1)  # evaluate every N finetuning steps (and at 0 and the end)
    # training examples (evenly spaced) whose loss each record has
    train_examples: int = option(480, ge=1)
    mechanism_arms: tuple[str, ...] = ("mixed",)  # arms that also record gradient projections


def tiny_sft_defaults() -> SFTConfig:
    """Finetuning of the tiny model: QK-only (the theory's setting), constant lr, answer-token
    loss, resumable Trainer checkpoints every 100 steps."""
    return SFTConfig(train="qk_only", lr=3e-3, steps=500, batch_size=64, save_every=100,
                     save_limit=1, log_every=20, max_length=64, prompt_format="plain")


@dataclass(frozen=True)
class InversionTinyConfig:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    arms: tuple[str, ...] = DEFAULT_ARMS
    workers: int = 2  # processes; each uses one torch thread
    # `filtered`: share dropped (lowest no-context loss)
    filter_fraction: float = option(0.25, ge=0, lt=1)
    # the `dynamic` arm: every `every` steps, of the rows still in, at most `fraction` with
    # the lowest no-context loss under the current model, only those below `threshold`, are
    # left out (`readmit`: until the next re-scoring; `batch_size` is unused: the tiny model
    # scores all rows at once)
    dynamic: DynamicCurationConfig = field(default_factory=dynamic_arm)
    # `augmented`: counterfactual examples added, as a share of size
    aug_share: float = option(0.25, ge=0)
    world: TinyWorldConfig = field(default_factory=TinyWorldConfig)
    model: TinyModelConfig = field(default_factory=TinyModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    mixture: Mixture = field(default_factory=Mixture)
    sft: SFTConfig = field(default_factory=tiny_sft_defaults)
    track: TinyTrackConfig = field(default_factory=TinyTrackConfig)
    study: Literal["arms", "phase"] = "arms"  # phase: C+S share x reliability diagram
    phase: PhaseConfig = field(default_factory=PhaseConfig)
    RENAMED = renamed_to_dynamic("curate_")

    def validate(self) -> None:
        """What spans several fields; each field's own range is declared on it (`option`),
        and the sections (world, model, pretrain, mixture, sft, track, dynamic, phase) are
        checked by `validate_config` before this."""
        w, m, p = self.world, self.model, self.pretrain
        check_dynamic_arm(self.dynamic)
        require(len(self.seeds) > 0, "seeds", "choose at least one seed")
        require(len(self.arms) > 0, "arms", "choose at least one arm")
        for arm in self.arms:
            require(arm in ARMS, "arms", f"unknown arm {arm!r} (known: {', '.join(ARMS)})")
        require(w.scratch >= max(p.lookup_facts, w.context_facts), "world.scratch",
                "must be at least pretrain.lookup_facts and world.context_facts")
        require(m.d_model % m.heads == 0, "model.d_model", "must be a multiple of model.heads")
        require(2 <= p.lookup_facts <= p.facts_per_doc, "pretrain.lookup_facts",
                "must lie between 2 and pretrain.facts_per_doc")
        require(p.facts_per_doc <= (w.mem_train + w.mem_eval) * w.n_relations,
                "pretrain.facts_per_doc", "exceeds the number of memorized facts")


@register("inversion-tiny", InversionTinyConfig, with_phase(plot_inversion_tiny),
          "Context-parametric inversion in a small Llama trained from scratch (6 arms x seeds)",
          columns=("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                   "cf_acc_rise", "cf_acc_fall", "param_acc_final", "c_acc_final",
                   "attn_context_at_peak", "attn_context_final"))
def run(cfg: InversionTinyConfig, out_dir: Path) -> Summary:
    """Pretrain (cached) per seed, then run every (arm, seed) job once, in parallel. With
    `study=phase`, the phase diagram instead (`experiments.inversion_tiny.phase`)."""
    if cfg.study == "phase":
        return run_phase(cfg, out_dir)
    store = PartStore(out_dir)
    keys = {(arm, seed): f"{job_arm(cfg, arm)}-seed{seed}" for arm in cfg.arms
            for seed in cfg.seeds}
    todo = [(cfg, arm, seed, store.dir / key) for (arm, seed), key in keys.items()
            if job_arm(cfg, arm) == arm and store.load(key) is None]
    log.info("%d jobs, %d to run", len(keys), len(todo))

    def save(job: tuple, result: tuple[list[dict], dict]) -> None:
        store.save(keys[job[1], job[2]], *result)
        shutil.rmtree(job[3], ignore_errors=True)  # the finished job's Trainer checkpoints

    # a seed's finetuning jobs start as soon as its pretraining ends
    pre = run_pipeline(pretrain_job, [(cfg, seed) for seed in cfg.seeds], finetune_job,
                       lambda job, _: [t for t in todo if t[2] == job[1]], cfg.workers, save)
    summary: dict = {}
    all_records: list[dict] = []
    for arm in cfg.arms:
        saved = {seed: store.load(keys[arm, seed]) for seed in cfg.seeds}
        summary[arm] = arm_summary({s: v["records"] for s, v in saved.items()},
                                   {s: v["summary"] for s, v in saved.items()})
        all_records += [{**r, "arm": arm, "seed": seed} for seed, v in saved.items()
                        for r in v["records"]]
    atomic_write_jsonl(out_dir / METRICS, all_records)
    # wall times stay in the cache's pretrain.json: the summary holds only what the seed
    # determines, so two runs of one config write identical summaries
    summary["pretrain"] = {str(seed): {k: v for k, v in p.items() if k not in ("path",
                                                                              "seconds")}
                           for seed, p in zip(cfg.seeds, pre, strict=True)}
    if "mixed" in cfg.arms:
        mixed = [store.load(keys["mixed", seed])["records"] for seed in cfg.seeds]
        summary["mechanism"] = mechanism_summary(mean_curve(mixed), cfg.mixture, cfg.sft.train,
                                                 mixed)
    summary["findings"] = findings(summary)
    return summary
