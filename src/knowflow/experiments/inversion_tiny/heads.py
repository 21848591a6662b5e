"""`inversion-tiny-heads`: the inversion's heads, found causally and steered back.

`inversion-tiny` finds the mechanism of the fall in attention: the heads whose attention to
the context tracks counterfactual accuracy over finetuning lose it after the peak. This
experiment asks the causal question of the same `mixed` runs, per seed:

1. finetune the seed's pretrained tiny Llama on the `mixed` arm exactly as `inversion-tiny`
   does (same data, config and tracker), keeping the weights at every evaluation step;
2. at the peak of counterfactual accuracy, sweep every head (`probes.heads.head_effects`:
   zero ablation and blocking its attention to the context, at the answer position) on the
   counterfactual set: *context heads* are those whose zero ablation lowers
   log p(context's answer) - log p(memorized answer), with the 95% interval below zero;
3. compare them with the *tracking heads* (context attention correlated with counterfactual
   accuracy over the run, r > `tracking_r`): their overlap;
4. steer the final model (`evaluation.steer_heads`): scale the peak's top-k context heads by
   gamma, k and gamma chosen on a calibration half of the counterfactual set (in-distribution
   accuracy, the C and C+S sets, may fall at most `max_in_dist_loss`), and measure on the other
   half how much of the fall (peak -> final counterfactual accuracy) it undoes.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from knowflow.config import option, require
from knowflow.evaluation.steer_heads import HeadSteering, steered
from knowflow.experiments.inversion_tiny.experiment import InversionTinyConfig
from knowflow.experiments.inversion_tiny.figures import tiny_heads_figure
from knowflow.experiments.inversion_tiny.jobs import arm_setup
from knowflow.experiments.inversion_tiny.model import answer_logits, encode, encode_words
from knowflow.experiments.inversion_tiny.pretrain import load_pretrained, pretrained_path
from knowflow.experiments.inversion_tiny.track import TinyEvaluator, training_rows
from knowflow.experiments.inversion_tiny.world import (
    Example,
    evaluation_sets,
    finetuning_set,
    make_world,
)
from knowflow.experiments.registry import Summary, register
from knowflow.lens.attention import intercepted
from knowflow.probes.heads import ConflictPrompt, bootstrap_grid, head_effects
from knowflow.store.files import atomic_write_jsonl
from knowflow.store.identity import METRICS
from knowflow.train.callback import EvalCallback
from knowflow.train.sft import train_model


@dataclass(frozen=True)
class InversionTinyHeadsConfig:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    tiny: InversionTinyConfig = field(default_factory=InversionTinyConfig)  # world, model, sft
    tracking_r: float = option(0.5, ge=-1, le=1)  # tracking heads: r(ctx attention, cf acc)
    ks: tuple[int, ...] = option((1, 2, 4), ge=1)  # context heads steered
    gammas: tuple[float, ...] = option((1.5, 2.0, 3.0, 4.0), ge=0)
    max_in_dist_loss: float = option(0.05, ge=0, le=1)
    n_bootstrap: int = option(1000, ge=1)

    def validate(self) -> None:
        """What spans several fields; the ranges are declared on the fields and the `tiny`
        section is checked by `validate_config` before this."""
        require(len(self.seeds) > 0, "seeds", "choose at least one seed")
        require(len(self.ks) > 0 and len(self.gammas) > 0, "ks",
                "give at least one k and one gamma to search")


class _Snapshots:
    """The tracker's evaluator, keeping the weights at every evaluation (in call order, as
    the callback's records are)."""

    def __init__(self, evaluator: TinyEvaluator):
        self.evaluator, self.states = evaluator, []

    def __call__(self, model) -> dict:
        self.states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return self.evaluator(model)


def finetune_mixed(cfg: InversionTinyConfig, seed: int, job_dir: Path):
    """(final model, tokenizer, records, weights per record, evaluation sets) of the `mixed`
    arm, finetuned as `inversion-tiny` finetunes it."""
    torch.set_num_threads(1)
    mix, sft, _, _ = arm_setup(cfg, "mixed")
    world = make_world(cfg.world, seed)
    model, tokenizer, _ = load_pretrained(pretrained_path(cfg.world, cfg.model, cfg.pretrain,
                                                          seed))
    train = finetuning_set(world, mix, seed)
    evals = evaluation_sets(world, seed)
    snaps = _Snapshots(TinyEvaluator(tokenizer, train, evals, cfg.track.train_examples,
                                     mechanism=False))
    callback = EvalCallback(snaps, cfg.track.every, job_dir)
    train_model(model, tokenizer, training_rows(tokenizer, train),
             dataclasses.replace(sft, seed=seed), job_dir, [callback])
    return model.eval(), tokenizer, callback.records, snaps.states, evals


def tracking_heads(records: list[dict], threshold: float) -> list[tuple[int, int]]:
    """Heads whose context attention correlates with counterfactual accuracy over the run."""
    cf = np.array([r["cf_acc"] for r in records])
    grid = np.array([r["attn_context_heads"] for r in records])  # (steps, layers, heads)
    out = []
    for layer in range(grid.shape[1]):
        for head in range(grid.shape[2]):
            series = grid[:, layer, head]
            if series.std() > 0 and cf.std() > 0 and \
                    np.corrcoef(series, cf)[0, 1] > threshold:
                out.append((layer, head))
    return out


def _prompt(tokenizer, i: int, ex: Example) -> ConflictPrompt:
    ids = encode_words(tokenizer, ex.tokens)
    answer, memory = encode_words(tokenizer, [ex.answer, ex.memory])
    return ConflictPrompt(str(i), tuple(ids), answer, memory, tuple(range(*ex.context)))


def context_heads_at(model, tokenizer, examples: list[Example], n_boot: int) -> dict:
    """The sweep on the counterfactual set: mean effects and intervals per edit, and the
    context heads (zero ablation lowers the log-odds, interval below zero), most negative
    first."""
    effects = []
    with intercepted(model) as layer_of:
        for i, ex in enumerate(examples):
            effects.append(head_effects(model, _prompt(tokenizer, i, ex), ("zero", "block"),
                                        layer_of=layer_of)[1].numpy())
    mean, ci = bootstrap_grid(np.stack(effects), n_boot)          # (2, layers, heads)
    zero, hi = mean[0], ci[0, ..., 1]
    heads = sorted(((layer, head) for layer in range(zero.shape[0])
                    for head in range(zero.shape[1]) if hi[layer, head] < 0),
                   key=lambda h: zero[h])
    return {"zero": zero.tolist(), "block": mean[1].tolist(), "context_heads": heads}


@torch.no_grad()
def accuracy(model, tokenizer, examples: list[Example], steering: HeadSteering | None = None
             ) -> float:
    batch = encode(tokenizer, examples)
    with steered(model, steering):
        logits, _ = answer_logits(model, batch)
    return float((logits.argmax(-1) == batch["answer"]).float().mean())


def _halves(examples: list[Example], seed: int) -> tuple[list[Example], list[Example]]:
    order = list(range(len(examples)))
    random.Random(f"{seed}:tiny-heads").shuffle(order)
    half = len(order) // 2
    return [examples[i] for i in order[:half]], [examples[i] for i in order[half:]]


def steer_final(model, tokenizer, peak_model, evals: dict, ranked: list[tuple[int, int]],
                cfg: InversionTinyHeadsConfig, seed: int) -> dict:
    """Choose k and gamma on a calibration half of the counterfactual set; report the other
    half (and the in-distribution sets) with and without the steering."""
    cal, held = _halves(evals["cf"], seed)
    in_dist = evals["c"] + evals["cs"]
    base_in = accuracy(model, tokenizer, in_dist)
    best, best_acc = HeadSteering(), accuracy(model, tokenizer, cal)
    for k in cfg.ks:
        if k > len(ranked):
            continue
        for gamma in cfg.gammas:
            s = HeadSteering(tuple(ranked[:k]), gamma)
            acc = accuracy(model, tokenizer, cal, s)
            if acc > best_acc and accuracy(model, tokenizer, in_dist, s) >= \
                    base_in - cfg.max_in_dist_loss:
                best, best_acc = s, acc
    final, steered_acc = accuracy(model, tokenizer, held), accuracy(model, tokenizer, held, best)
    peak = accuracy(peak_model, tokenizer, held)
    fall = peak - final
    return {"heads": [list(h) for h in best.heads], "gamma": best.gamma,
            "cf_acc_peak": peak, "cf_acc_final": final, "cf_acc_steered": steered_acc,
            "fall_undone": (steered_acc - final) / fall if fall > 0 else None,
            "indist_final": base_in, "indist_steered": accuracy(model, tokenizer, in_dist,
                                                                  best),
            "n_calibration": len(cal), "n_held_out": len(held)}


def seed_result(cfg: InversionTinyHeadsConfig, seed: int, job_dir: Path) -> dict:
    model, tokenizer, records, states, evals = finetune_mixed(cfg.tiny, seed, job_dir)
    peak = int(np.argmax([r["cf_acc"] for r in records]))
    peak_model = copy.deepcopy(model)
    peak_model.load_state_dict(states[peak])
    sweep = context_heads_at(peak_model, tokenizer, evals["cf"], cfg.n_bootstrap)
    tracking = tracking_heads(records, cfg.tracking_r)
    ctx = sweep["context_heads"]
    both = sorted(set(ctx) & set(tracking))
    union = set(ctx) | set(tracking)
    return {"seed": seed, "peak_step": records[peak]["step"],
            "cf_acc_peak": records[peak]["cf_acc"], "cf_acc_final": records[-1]["cf_acc"],
            "context_heads": [list(h) for h in ctx], "tracking_heads": [list(h) for h in
                                                                        tracking],
            "overlap": len(both), "jaccard": len(both) / len(union) if union else None,
            "effects_at_peak": sweep,
            "steering": steer_final(model, tokenizer, peak_model, evals, ctx, cfg, seed)}


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


@register("inversion-tiny-heads", InversionTinyHeadsConfig, tiny_heads_figure,
          "inversion-tiny's mixed arm: context heads at the peak vs the attention-tracking "
          "heads, and steering them back at the end", columns=("mean_overlap",
                                                               "mean_fall_undone"))
def run(cfg: InversionTinyHeadsConfig, out_dir: Path) -> Summary:
    per_seed = []
    for seed in cfg.seeds:
        job_dir = out_dir / f"job-seed{seed}"
        per_seed.append(seed_result(cfg, seed, job_dir))
        shutil.rmtree(job_dir, ignore_errors=True)  # the job's Trainer checkpoints
    atomic_write_jsonl(out_dir / METRICS, per_seed)  # one record per seed (the figure's)
    return {"seeds": per_seed,
            "mean_overlap": _mean(r["overlap"] for r in per_seed),
            "mean_jaccard": _mean(r["jaccard"] for r in per_seed),
            "mean_fall_undone": _mean(r["steering"]["fall_undone"] for r in per_seed),
            "mean_indist_change": _mean(r["steering"]["indist_steered"]
                                        - r["steering"]["indist_final"] for r in per_seed)}
