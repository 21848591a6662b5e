"""The jobs of `inversion-tiny`: pretraining one seed (cached), and finetuning one (arm, seed)
through the HF Trainer path of `knowflow sft`, with the tiny-world tracker and, for the
`dynamic` arm, dynamic curation. Jobs run in worker processes (`experiments.parallel`), one
torch thread each; `cfg` is an `InversionTinyConfig` (or a phase cell's variant of it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from knowflow.experiments.inversion_tiny.pretrain import SHIPPED, load_pretrained, pretrained_path
from knowflow.experiments.inversion_tiny.track import TinyEvaluator, training_rows
from knowflow.experiments.inversion_tiny.world import (
    Mixture,
    evaluation_sets,
    finetuning_set,
    make_world,
)
from knowflow.lens.adapt import ALL_PROJECTIONS
from knowflow.train.callback import EvalCallback
from knowflow.train.criticality import drop_lowest_no_context_loss, no_context_loss
from knowflow.train.curation import DynamicCuration
from knowflow.train.sft import SFTConfig, train_model


def arm_setup(cfg, arm: str) -> tuple[Mixture, SFTConfig, float, bool]:
    """(mixture, finetuning config, static filter fraction, dynamic curation) of an arm."""
    mix, sft = cfg.mixture, cfg.sft
    if arm == "c_only":
        mix = dataclasses.replace(mix, c=1.0, cs=0.0, s=0.0, aug=0)
    elif arm == "augmented":
        mix = dataclasses.replace(mix, aug=mix.aug + round(cfg.aug_share * mix.size))
    elif arm == "qk_only":
        sft = dataclasses.replace(sft, train="qk_only")
    elif arm == "lora":
        sft = dataclasses.replace(sft, train="lora", lora_targets=ALL_PROJECTIONS)
    return mix, sft, cfg.filter_fraction if arm == "filtered" else 0.0, arm == "dynamic"


def job_arm(cfg, arm: str) -> str:
    """The arm whose job gives `arm`'s records: the first arm with the same setup."""
    return next(a for a in cfg.arms if arm_setup(cfg, a) == arm_setup(cfg, arm))


def pretrain_job(cfg, seed: int) -> dict:
    torch.set_num_threads(1)
    path = pretrained_path(cfg.world, cfg.model, cfg.pretrain, seed)
    info = load_pretrained(path)[2]
    return {"path": str(path), "source": "shipped" if path.parent == SHIPPED else "pretrained",
            **{k: v for k, v in info.items() if k != "history"}}


def finetune_job(cfg, arm: str, seed: int, job_dir: Path
                 ) -> tuple[list[dict], dict]:
    """Load the seed's pretrained model, build the arm's data, finetune through the HF Trainer
    path of `knowflow sft` (checkpoints in `job_dir`, resumed if there); (records, extra)."""
    torch.set_num_threads(1)
    mix, sft, fraction, dynamic = arm_setup(cfg, arm)
    world = make_world(cfg.world, seed)
    model, tokenizer, _ = load_pretrained(pretrained_path(cfg.world, cfg.model, cfg.pretrain,
                                                          seed))
    train = finetuning_set(world, mix, seed)
    extra: dict = {"n_train": len(train)}
    if fraction > 0:
        kept = drop_lowest_no_context_loss(model, train, fraction, tokenizer)
        for kind in ("C", "C+S", "S"):
            extra[f"n_dropped_{kind}"] = (sum(ex.kind == kind for ex in train)
                                          - sum(ex.kind == kind for ex in kept))
        train = kept
        extra["n_train"] = len(train)
    evaluator = TinyEvaluator(tokenizer, train, evaluation_sets(world, seed),
                              cfg.track.train_examples, arm in cfg.track.mechanism_arms)
    callbacks = [EvalCallback(evaluator, cfg.track.every, job_dir)]
    if dynamic:
        callbacks.append(DynamicCuration(
            lambda m: no_context_loss(m, train, tokenizer), len(train),
            cfg.dynamic,
            job_dir, kinds=[ex.kind for ex in train], seed=seed))
    train_model(model, tokenizer, training_rows(tokenizer, train),
             dataclasses.replace(sft, seed=seed), job_dir, callbacks, resume=True)
    if dynamic:  # the drop set at the last re-scoring, by kind (wall times left out)
        last = callbacks[1].history[-1]
        extra.update(curation_rescorings=len(callbacks[1].history),
                     **{f"n_dropped_{k}": n for k, n in last["dropped_by_kind"].items()})
    return [_strip(r) for r in callbacks[0].records], extra


def _strip(record: dict) -> dict:
    """A tiny-world record without the callback's bookkeeping (kept out of metrics.jsonl so
    that two runs of one config give identical files)."""
    return {k: v for k, v in record.items() if k not in ("epoch", "train_loss", "eval_seconds")}
