"""Choosing the `heads` method's heads, k and gamma on a calibration split of the items.

Each suite's items are split once (seeded): a calibration share and the held-out rest. On the
calibration items (pooled over suites, shown with their conflicting context) every head's
zero-ablation effect on `log p(cf) - log p(parametric)` at the answer position is measured with
the batched sweep of `lens.heads` (the one `knowflow probe heads` runs): the most negative are
context heads, the most positive memory heads. Candidates are the top-k context heads scaled
by each gamma and the top-k memory heads pruned (PH3), for each k. Each candidate is scored on
the calibration items by log-likelihood: counterfactual accuracy under the conflicting context
and robustness (memorized answer kept) under an irrelevant one. The chosen candidate has the
highest counterfactual accuracy among those losing at most `max_robustness_loss` robustness
against the unsteered model (which is itself a candidate: k = 0); ties go to fewer heads.
Every method of the evaluation is then scored on the held-out items only.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import numpy as np
import torch

from knowflow.data.conditions import condition_item
from knowflow.data.facts import ConflictItem
from knowflow.data.prompts import PromptConfig, render
from knowflow.evaluation.decoding import HEADS, parse_methods
from knowflow.evaluation.items import evaluate_items
from knowflow.evaluation.normalize import primary
from knowflow.evaluation.options import EvalConfig
from knowflow.evaluation.steer_heads import HeadSteering
from knowflow.lens.heads import ablation_rows, answer_split, head_shape, log_odds_rows
from knowflow.store.run_folder import Progress


@dataclass(frozen=True)
class CalibrationConfig:
    share: float = 0.5                       # of each suite's items, for calibration
    ks: tuple[int, ...] = (1, 2, 4, 8)       # heads steered
    gammas: tuple[float, ...] = (2.0, 4.0)   # scales of context heads (memory heads: 0)
    max_robustness_loss: float = 0.05
    sweep_batch: int = 64                    # rows per forward pass of the ranking sweep


def split_items(by_suite: dict[str, list[ConflictItem]], share: float, seed: int = 0
                ) -> tuple[list[ConflictItem], dict[str, list[ConflictItem]]]:
    """(calibration items pooled over suites, held-out items by suite); each suite keeps at
    least one held-out item, and its order."""
    calibration, held_out = [], {}
    for name, items in by_suite.items():
        order = list(range(len(items)))
        random.Random(f"{seed}:{name}:calibration").shuffle(order)
        n = min(len(items) - 1, round(share * len(items)))
        chosen = set(order[:n])
        calibration += [it for i, it in enumerate(items) if i in chosen]
        held_out[name] = [it for i, it in enumerate(items) if i not in chosen]
    return calibration, held_out


@torch.no_grad()
def rank_heads(model, tokenizer, items: list[ConflictItem], prompt_format: str = "auto",
               batch_size: int = 64, progress: Progress | None = None) -> np.ndarray:
    """Mean zero-ablation effect of every head on the log-odds, (layers, heads)."""
    n_layers, n_heads, head_dim = head_shape(model)
    _, scale, fill = ablation_rows(("zero",), n_layers, n_heads, head_dim)
    effects = []
    for done, item in enumerate(items, start=1):
        prompt = render(item, tokenizer, PromptConfig(prompt_format))
        split = answer_split(tokenizer, *(prompt.answer_prefix + primary(a) for a in
                                          (item.counterfactual_answer, item.parametric_answer)))
        if split is not None:
            ids = tokenizer(prompt.text, add_special_tokens=prompt.add_special_tokens
                            )["input_ids"] + list(split[0])
            odds = log_odds_rows(model, ids, split[1], split[2], scale, fill, batch_size)
            effects.append((odds[1:] - odds[0]).view(n_layers, n_heads).numpy())
        if progress is not None:
            progress(done, len(items), "heads: ranking")
    if not effects:
        return np.zeros((n_layers, n_heads))
    return np.mean(effects, axis=0)


def candidates(effects: np.ndarray, cfg: CalibrationConfig) -> list[HeadSteering]:
    """No steering, then per k: the k most negative heads scaled by each gamma, the k most
    positive heads pruned."""
    flat = [(float(effects[layer, head]), layer, head) for layer in range(effects.shape[0])
            for head in range(effects.shape[1])]
    context = [(la, h) for e, la, h in sorted(flat) if e < 0]
    memory = [(la, h) for e, la, h in sorted(flat, reverse=True) if e > 0]
    out = [HeadSteering()]
    for k in cfg.ks:
        if len(context) >= k:
            out += [HeadSteering(tuple(context[:k]), g) for g in cfg.gammas]
        if len(memory) >= k:
            out.append(HeadSteering(tuple(memory[:k]), 0.0))
    return out


def score(model, tokenizer, items: list[ConflictItem], cfg: EvalConfig,
          steering: HeadSteering) -> dict:
    """Counterfactual accuracy (conflicting context) and robustness (irrelevant context) of
    one steering on `items`, by log-likelihood."""
    run = dataclasses.replace(cfg, method=f"{HEADS}:{steering.spec}", scoring="loglik",
                              known_filter=False, conditions="conflicting")
    out = {"heads": [list(h) for h in steering.heads], "gamma": steering.gamma}
    for cond, key, answer in (("conflicting", "cf_acc", "counterfactual"),
                              ("irrelevant", "robustness", "parametric")):
        shown = [c for c in (condition_item(it, cond) for it in items) if c]
        recs = evaluate_items(model, tokenizer, f"calibration [{cond}]", shown, run, None) \
            if shown else []
        out[key] = (sum(r["loglik"]["choice"] == answer for r in recs) / len(recs)
                    if recs else None)
    return out


def choose(scored: list[dict], max_loss: float) -> dict:
    """The best counterfactual accuracy among candidates within `max_loss` of the first's
    (unsteered) robustness; ties to fewer heads."""
    base = scored[0]["robustness"]
    ok = [s for s in scored if base is None or s["robustness"] is None
          or s["robustness"] >= base - max_loss - 1e-12]
    return max(ok, key=lambda s: (s["cf_acc"] or 0.0, -len(s["heads"])))


def calibrate(model, tokenizer, cfg: EvalConfig, by_suite: dict[str, list[ConflictItem]],
              calib: CalibrationConfig = CalibrationConfig(), progress: Progress | None = None
              ) -> tuple[EvalConfig, dict[str, list[ConflictItem]], dict | None]:
    """With a bare `heads` among `cfg.method`: (cfg with the chosen `heads:SPEC`, the held-out
    items by suite, the calibration record); otherwise (cfg, by_suite, None) unchanged."""
    methods = parse_methods(cfg.method, cfg.alpha)
    if not any(m.base == HEADS and not m.heads for m in methods):
        return cfg, by_suite, None
    calibration, held_out = split_items(by_suite, calib.share, cfg.seed)
    effects = rank_heads(model, tokenizer, calibration, cfg.prompt_format, calib.sweep_batch,
                         progress)
    scored = [score(model, tokenizer, calibration, cfg, s) for s in candidates(effects, calib)]
    best = choose(scored, calib.max_robustness_loss)
    chosen = HeadSteering(tuple(tuple(h) for h in best["heads"]), best["gamma"])
    specs = [dataclasses.replace(m, heads=chosen.spec).spec if m.base == HEADS and not m.heads
             else m.spec for m in methods]
    record = {"n_calibration": len(calibration), "share": calib.share, "chosen": best,
              "spec": f"{HEADS}:{chosen.spec}", "candidates": scored,
              "head_effects": effects.tolist(),
              "n_held_out": {name: len(items) for name, items in held_out.items()}}
    return dataclasses.replace(cfg, method=",".join(dict.fromkeys(specs))), held_out, record

