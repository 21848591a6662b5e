"""The jobs of `inversion-injected`: stage 1 (inject the memorized subjects' facts by finetuning
on plain text; cached by a hash of everything that determines it) and stage 2 (one arm, one
seed: instruction finetuning on the injected model, tracked by the `RelianceTracker`).

Both stages train through `train.sft.train_model` (the HF Trainer path of `knowflow sft`). Stage 1
records recall every epoch: the share of memorized subjects whose injected value is the
likeliest of its relation's values after the question prompt *without a context* (stage 2's S
layout). It stops `extra_epochs` after recall first reaches `recall_target` (the memory
strength knob), or at `max_epochs`. `cfg` is an `InjectedConfig`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import shutil
import tempfile
import time
from pathlib import Path

import torch

from knowflow.data.instruction_rows import encode_all
from knowflow.data.prompts import SHORT_ANSWER, instruction_prompt
from knowflow.evaluation.items import evaluate_items
from knowflow.evaluation.options import EvalConfig
from knowflow.evaluation.rank import ranks_from_scores
from knowflow.experiments.inversion_injected.world import (
    RELATIONS,
    InjectedWorld,
    Subject,
    instruction,
    make_world,
    stage1_texts,
    stage2_rows,
    tracked_items,
)
from knowflow.experiments.inversion_tiny.model import build_tokenizer, make_model
from knowflow.experiments.inversion_tiny.world import SPECIALS
from knowflow.experiments.ocr_smollm2.experiment import encode_texts
from knowflow.lens.load import cache_dir, load_model
from knowflow.lens.scorer import score_continuations
from knowflow.store.files import atomic_write_json
from knowflow.store.readers import read_json
from knowflow.store.staging import staged_dir
from knowflow.train.callback import EvalCallback
from knowflow.train.criticality import CurateConfig, curate_examples
from knowflow.train.curation import dynamic_curation
from knowflow.train.sft import train_model
from knowflow.train.tracker import RelianceTracker

log = logging.getLogger(__name__)

TINY = "tiny"
CACHE_VERSION = 1  # bump when stage 1 changes in a way the config does not show
STAGE1 = "stage1.json"


# --- models -------------------------------------------------------------------------------

def tiny_tokenizer(world: InjectedWorld):
    """A word-level tokenizer over every word this world can show (names, templates, values,
    the prompt layout); punctuation is a word of its own."""
    from tokenizers.pre_tokenizers import Whitespace

    texts = [SHORT_ANSWER, "Question: Answer:"]
    for question, statements, values in RELATIONS.values():
        texts += [question, *statements, *values]
    texts += [s.name for s in world.subjects]
    pre = Whitespace()
    words = sorted({w for t in texts for w, _ in pre.pre_tokenize_str(t)} - set(SPECIALS))
    return build_tokenizer([*SPECIALS, *words], split_punctuation=True)


def base_model(cfg, world: InjectedWorld, seed: int):
    """(model, tokenizer) before stage 1: the HF model, or a fresh tiny Llama."""
    if cfg.model == TINY:
        tok = tiny_tokenizer(world)
        return make_model(cfg.tiny, len(tok), cfg.stage1.sft.max_length * 2, seed).eval(), tok
    return load_model(cfg.model, device=cfg.device, dtype="float32")


# --- recall -------------------------------------------------------------------------------

def no_context_prompts(tokenizer, subjects: list[Subject]) -> list[list[int]]:
    """Stage 2's S prompt (plain layout, no context) of each subject, as token ids."""
    out = []
    for s in subjects:
        p = instruction_prompt(tokenizer, instruction(s), "", "plain")
        out.append(tokenizer(p.text, add_special_tokens=p.add_special_tokens)["input_ids"])
    return out


def recall_scorer(tokenizer, world: InjectedWorld, subjects: list[Subject], batch_size: int = 16):
    """`model -> recall`: the share of `subjects` whose injected value scores strictly
    highest (summed log-probability) of its relation's values, asked without a context."""
    prompts = no_context_prompts(tokenizer, subjects)
    conts = [[f" {v}" for v in world.values(s.relation)] for s in subjects]
    correct = [world.values(s.relation).index(s.value) for s in subjects]

    def recall(model) -> float:
        scores = score_continuations(model, tokenizer, prompts, conts, batch_size)
        ranks = ranks_from_scores([[lp for lp, _ in row] for row in scores], correct)
        return sum(r == 0 for r in ranks) / len(ranks)

    return recall


class RecallStop(EvalCallback):
    """Records recall every `every` steps and stops training `extra` steps after it first
    reaches `target`. Stage 1 is cached whole, so no Trainer checkpoint is written."""

    def __init__(self, evaluator, every: int, target: float, extra: int):
        super().__init__(evaluator, every)
        self.target, self.extra, self.reached_step = target, extra, None

    def on_record(self, record, model, state, control) -> None:
        if self.reached_step is None and record["recall"] >= self.target:
            self.reached_step = record["step"]
        if self.reached_step is not None and record["step"] >= self.reached_step + self.extra:
            control.should_training_stop = True

    def on_step_end(self, args, state, control, model=None, **kwargs):
        super().on_step_end(args, state, control, model=model, **kwargs)
        control.should_save = False


# --- stage 1 ------------------------------------------------------------------------------

def stage1_key(cfg, seed: int, extra_epochs: int) -> str:
    """Hash of everything that determines the stage-1 model: the base model (and the tiny
    model's size), the world (its subjects and the injection text), the stage-1 training,
    the strength and the seed."""
    stage1 = dataclasses.asdict(dataclasses.replace(cfg.stage1, extra_epochs=extra_epochs))
    blob = json.dumps({"model": cfg.model,
                       "tiny": dataclasses.asdict(cfg.tiny) if cfg.model == TINY else None,
                       "world": dataclasses.asdict(cfg.world), "stage1": stage1, "seed": seed,
                       "version": CACHE_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _quiet() -> None:
    """No transformers progress bars: library code does not print."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def stage1_path(cfg, seed: int, extra_epochs: int) -> Path:
    """The cached stage-1 model folder of this config; trained (once) if missing."""
    _quiet()
    target = cache_dir() / "injected" / stage1_key(cfg, seed, extra_epochs)
    if (target / STAGE1).exists():
        return target
    world = make_world(cfg.world, seed)
    model, tok = base_model(cfg, world, seed)
    s1 = cfg.stage1
    data = encode_texts(tok, stage1_texts(world, seed), s1.sft.max_length)
    per_epoch = math.ceil(len(data) / s1.sft.batch_size)
    sft = dataclasses.replace(s1.sft, steps=per_epoch * s1.max_epochs, seed=seed,
                              save_every=per_epoch * s1.max_epochs)
    memorized = world.group("mem_train") + world.group("mem_eval")
    recall = recall_scorer(tok, world, memorized)
    stop = RecallStop(lambda m: {"recall": recall(m)}, per_epoch, s1.recall_target,
                      per_epoch * extra_epochs)
    start, cpu = time.time(), time.process_time()
    with tempfile.TemporaryDirectory() as work:
        result = train_model(model, tok, data, sft, work, [stop])
    model = result.model.merge_and_unload() if hasattr(result.model, "merge_and_unload") \
        else result.model
    curve = [{"step": r["step"], "epoch": r["step"] / per_epoch, "recall": r["recall"],
              "train_loss": r["train_loss"]} for r in stop.records]
    info = {"key": target.name, "seed": seed, "extra_epochs": extra_epochs,
            "n_texts": len(data), "steps": result.steps, "epochs": result.steps / per_epoch,
            "recall": curve[-1]["recall"], "recall_target": s1.recall_target,
            "reached_step": stop.reached_step,
            "reached_epoch": None if stop.reached_step is None else stop.reached_step / per_epoch,
            "seconds": round(time.time() - start, 1),
            "cpu_seconds": round(time.process_time() - cpu, 1), "curve": curve}
    if stop.reached_step is None:
        log.warning("stage 1 (seed %d) ended after %d epochs with recall %.3f, below the "
                    "target %.2f; raise stage1.max_epochs or stage1.sft.lr", seed,
                    s1.max_epochs, info["recall"], s1.recall_target)

    with staged_dir(target, complete=STAGE1) as folder:
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        atomic_write_json(folder / STAGE1, info)
    return target


def load_stage1(path: Path, device: str = "cpu"):
    """(model in eval mode, tokenizer, stage-1 log) of a stage-1 folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    if device not in ("auto", "cpu"):
        model = model.to(device)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok, read_json(Path(path) / STAGE1)


def stage1_job(cfg, seed: int, extra_epochs: int) -> dict:
    """Make sure the stage-1 model of (seed, strength) exists; its log."""
    torch.set_num_threads(1)
    return read_json(stage1_path(cfg, seed, extra_epochs) / STAGE1)


# --- stage 2 ------------------------------------------------------------------------------

def arm_rows(cfg, arm: str, world: InjectedWorld, seed: int, model, tok) -> tuple[list, dict]:
    """(rows, extra) of an arm: the mixture, C only, filtered once by no-context loss under
    the stage-1 model, or with counterfactual rows added."""
    mix = cfg.mixture
    if arm == "c_only":
        mix = dataclasses.replace(mix, c=1.0, cs=0.0, s=0.0)
    augment = round(cfg.aug_share * mix.size) if arm == "augmented" else 0
    rows = stage2_rows(world, mix, seed, augment)
    extra: dict = {}
    if arm == "filtered":
        rows, scores = curate_examples(model, tok, rows, CurateConfig(
            drop=cfg.filter_fraction, prompt_format="plain"))
        extra["n_dropped"] = {k: sum(s["dropped"] and s["kind"] == k for s in scores)
                              for k in ("C", "C+S", "S")}
    return rows, extra


def _renamed(record: dict) -> dict:
    """The held-out C and C+S sets' numbers under the schema's names (c_acc, cs_acc)."""
    out = {}
    for suite, name in (("C", "c_acc"), ("C+S", "cs_acc")):
        for suffix in ("", "_gen"):
            if f"{suite}/cf_acc{suffix}" in record:
                out[f"{name}{suffix}"] = record[f"{suite}/cf_acc{suffix}"]
    return out


def audit(model, tok, items, batch_size: int = 16) -> dict:
    """Each counterfactual item's label checked against generated text: with the context, the
    output names the context's answer only, the injected one only, both or neither (the last
    two counted apart, not as wrong); without it, whether the output names the injected value
    (the label is then confirmed)."""
    cfg = EvalConfig(scoring="generate", prompt_format="plain", known_by="generate",
                     max_new_tokens=8, batch_size=batch_size)
    recs = evaluate_items(model, tok, "counterfactual", items, cfg, None)
    n = len(recs)
    counts = {"cf_only": 0, "param_only": 0, "both": 0, "neither": 0}
    for r in recs:
        cf, par = r["generate"]["counterfactual"], r["generate"]["parametric"]
        counts["both" if cf and par else "cf_only" if cf else "param_only" if par
               else "neither"] += 1
    out = {k: v / n for k, v in counts.items()}
    out["label_confirmed"] = sum(bool(r["known"]) for r in recs) / n
    out["n"] = n
    return out


def arm_job(cfg, arm: str, seed: int, extra_epochs: int, job_dir: Path) -> dict:
    """Stage 2 of one (arm, seed, strength): records and summary, saved into `job_dir`."""
    torch.set_num_threads(1)
    job_dir = Path(job_dir)
    world = make_world(cfg.world, seed)
    path = stage1_path(cfg, seed, extra_epochs)  # normally ready: stage1_job ran first
    start, cpu = time.time(), time.process_time()
    model, tok, info = load_stage1(path, cfg.device)
    rows, extra = arm_rows(cfg, arm, world, seed, model, tok)
    encoded, too_long = encode_all(tok, rows, "plain", cfg.sft.max_length)
    items = tracked_items(world)
    tracker = RelianceTracker(tok, cfg.track, job_dir, items={"counterfactual":
                                                               items["counterfactual"]})
    side = RelianceTracker(tok, dataclasses.replace(cfg.track, attention=False),
                           items={"C": items["C"], "C+S": items["C+S"]})
    recall = recall_scorer(tok, world, world.group("mem_eval"))
    indist = EvalCallback(lambda m: {**_renamed(side.measure(m)), "recall_acc": recall(m)},
                          cfg.track.every, job_dir / "indist")
    callbacks = [tracker, indist]
    sft = dataclasses.replace(cfg.sft, seed=seed)
    if arm == "dynamic":
        callbacks.append(dynamic_curation(tok, rows, too_long, cfg.dynamic, sft, job_dir))
    audit_start = audit(model, tok, items["counterfactual"])
    result = train_model(model, tok, encoded, sft, job_dir, callbacks, resume=True)
    audit_end = audit(result.model, tok, items["counterfactual"])
    by_step = {r["step"]: r for r in indist.records}
    records = [{k: v for k, v in {**r, **by_step.get(r["step"], {})}.items()
                if k not in ("epoch", "eval_seconds", "is_peak")} for r in tracker.records]
    summary = {"arm": arm, "seed": seed, "extra_epochs": extra_epochs,
               "n_train": len(encoded), "n_too_long": len(too_long),
               "n_by_kind": {k: sum(r.extra["kind"] == k for r in rows)
                             for k in ("C", "C+S", "S", "CF")},
               "stage1": {k: v for k, v in info.items() if k != "curve"},
               "audit_start": audit_start, "audit_end": audit_end,
               "train_loss": result.train_loss, "trainable_params": result.trainable_params,
               "seconds": round(time.time() - start, 1),
               "cpu_seconds": round(time.process_time() - cpu, 1), **extra}
    if arm == "dynamic":
        summary.update(callbacks[2].summary())
    shutil.rmtree(job_dir / "checkpoints", ignore_errors=True)
    return {"records": records, "summary": summary}
