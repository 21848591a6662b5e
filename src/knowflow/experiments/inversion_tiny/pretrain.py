"""Pretraining a small HF `LlamaForCausalLM` from scratch on a tiny world's text.

The model reads fact documents (memorized facts) and lookup documents (random facts, one
repeated, or a quiz line that asks for memory) with the ordinary next-token loss for a fixed
budget of `steps`, chosen in advance. There is no early stop: the lookup skill appears in a
sudden transition whose step varies from seed to seed and machine to machine, and a stop rule
at a threshold turned those small differences into different models. Recall of the memorized
facts (`<bos> s r` -> v, greedy) and lookup accuracy (the repeated value, on fresh lookups
without quiz lines) are recorded every `eval_every` steps, and a warning is logged if either
ends below its target. The result (model, tokenizer and a log) is cached by a hash of
everything that determines it, under `$KNOWFLOW_CACHE` (default `~/.cache/knowflow`)
/tiny-pretrained/<hash>, written to a temp folder and renamed into place, so a reader
never sees half a checkpoint and concurrent runs of the same config are safe.

knowflow ships the default config's checkpoints for seeds 0-4 (`SHIPPED`, 0.8 MB each), made
by this code on the reference machine: a config whose hash matches one loads it instead of
pretraining (`pretrain.shipped=false` pretrains anyway). Pretraining differs in its last bits
from one CPU's kernels to another's, and those bits grow into different models; the shipped
checkpoints give every machine the same pretrained models, so only finetuning's rounding
differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from knowflow.config import option
from knowflow.experiments.inversion_tiny.model import (
    TinyModelConfig,
    build_tokenizer,
    encode_words,
    make_model,
)
from knowflow.experiments.inversion_tiny.world import (
    BOS,
    TinyWorldConfig,
    World,
    make_world,
    pretraining_documents,
)
from knowflow.lens.load import cache_dir
from knowflow.store.files import atomic_write_json
from knowflow.store.readers import read_json
from knowflow.store.staging import staged_dir

log = logging.getLogger(__name__)

CACHE_VERSION = 4  # bump when pretraining changes in a way the config does not show
# The default config's checkpoints for seeds 0-4, made by `pretrain_model` on the reference
# machine (each folder's pretrain.json has its log): `make demo` starts from them instead of
# spending 5 x ~75 CPU s pretraining, and every machine finetunes the same models.
SHIPPED = Path(__file__).resolve().parent / "tiny-pretrained"


@dataclass(frozen=True)
class PretrainConfig:
    steps: int = option(4000, ge=1)  # fixed budget (no early stop)
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 100
    facts_per_doc: int = option(3, ge=2)
    lookup_share: float = option(0.5, ge=0, le=1)  # share of documents that end in a lookup
    lookup_facts: int = 2  # statements in a lookup (the last repeats one of the others)
    # share of lookup statements about memorized subjects
    lookup_memorized: float = option(1.0, ge=0, le=1)
    # P(the repeat states the value read earlier): delta_C
    lookup_reliability: float = option(0.9, ge=0, le=1)
    quiz_share: float = 0.3  # share of lookups about memorized subjects ending in a quiz line
    # warn if recall of memorized facts ends below this
    recall_target: float = option(0.98, ge=0, le=1)
    lookup_target: float = option(0.95, ge=0, le=1)  # ... or lookup accuracy ends below this
    eval_every: int = option(100, ge=1)
    shipped: bool = True  # use the checkpoint shipped with knowflow when one matches (not hashed)


def _ids(tokenizer, docs: list[list[str]]) -> torch.Tensor:
    return torch.tensor([encode_words(tokenizer, d) for d in docs])  # (batch, seq)


@torch.no_grad()
def next_token_accuracy(model, tokenizer, prompts: list[list[str]], answers: list[str],
                        batch_size: int = 256) -> float:
    """Greedy accuracy of the next token after each prompt (prompts of one length per call
    are batched; mixed lengths are grouped)."""
    model.eval()
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    correct = 0
    for idx in by_len.values():
        for start in range(0, len(idx), batch_size):
            chunk = idx[start:start + batch_size]
            ids = _ids(tokenizer, [prompts[i] for i in chunk])
            pred = model(input_ids=ids, logits_to_keep=1).logits[:, -1].argmax(-1)  # (batch,)
            gold = torch.tensor(encode_words(tokenizer, [answers[i] for i in chunk]))
            correct += int((pred == gold).sum())
    return correct / max(1, len(prompts))


def recall_accuracy(model, tokenizer, world: World) -> float:
    facts = world.memorized_facts()
    return next_token_accuracy(model, tokenizer, [[BOS, s, r] for s, r, _ in facts],
                               [v for _, _, v in facts])


def lookup_accuracy(model, tokenizer, world: World, cfg: PretrainConfig, n: int = 256) -> float:
    """Accuracy on the repeated statement's value in fresh lookup documents."""
    rng = random.Random(f"lookup-eval-{world.seed}")
    docs = pretraining_documents(world, n, cfg.facts_per_doc, 1.0, rng, cfg.lookup_facts,
                                 cfg.lookup_memorized)
    return next_token_accuracy(model, tokenizer, [d[:-2] for d in docs], [d[-2] for d in docs])


def pretrain_model(world: World, model_cfg: TinyModelConfig, cfg: PretrainConfig, seed: int
                   ) -> tuple[object, object, dict]:
    """Train from scratch; returns (model, tokenizer, log)."""
    tokenizer = build_tokenizer(world.vocab)
    doc_len = 1 + 4 * cfg.facts_per_doc
    model = make_model(model_cfg, len(world.vocab), doc_len + 16, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg.warmup))
    rng = random.Random(f"pretrain-{world.seed}-{seed}")
    start, history, recall, lookup, step = time.perf_counter(), [], 0.0, 0.0, 0
    for step in range(1, cfg.steps + 1):
        model.train()
        docs = pretraining_documents(world, cfg.batch_size, cfg.facts_per_doc,
                                     cfg.lookup_share, rng, cfg.lookup_facts,
                                     cfg.lookup_memorized, cfg.lookup_reliability,
                                     cfg.quiz_share)
        ids = _ids(tokenizer, docs)  # (batch, seq)
        logits = model(input_ids=ids).logits  # (batch, seq, vocab)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            recall = recall_accuracy(model, tokenizer, world)
            lookup = lookup_accuracy(model, tokenizer, world, cfg)
            history.append({"step": step, "loss": loss.item(), "recall": recall,
                            "lookup_acc": lookup})
            log.info("pretrain step %d loss %.3f recall %.3f lookup %.3f", step, loss.item(),
                     recall, lookup)
    info = {"steps": step, "recall": recall, "lookup_acc": lookup,
            "seconds": time.perf_counter() - start,
            "reached_targets": recall >= cfg.recall_target and lookup >= cfg.lookup_target,
            "history": history}
    return model.eval(), tokenizer, info


def _quiet() -> None:
    """No transformers progress bars: library code does not print."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def cache_key(world_cfg: TinyWorldConfig, model_cfg: TinyModelConfig, cfg: PretrainConfig,
              seed: int) -> str:
    world = dataclasses.asdict(world_cfg)
    del world["context_facts"]  # finetuning only
    pretrain = dataclasses.asdict(cfg)
    del pretrain["shipped"]  # where the checkpoint comes from, not what it is
    blob = json.dumps({"world": world,
                       "model": dataclasses.asdict(model_cfg),
                       "pretrain": pretrain, "seed": seed,
                       "version": CACHE_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pretrained_path(world_cfg: TinyWorldConfig, model_cfg: TinyModelConfig,
                    cfg: PretrainConfig, seed: int) -> Path:
    """The checkpoint folder for this config: the cached one; else, with `cfg.shipped`, the
    one shipped with knowflow for this exact config (`SHIPPED`); else trained (once) into the
    cache."""
    key = cache_key(world_cfg, model_cfg, cfg, seed)
    target = cache_dir() / "tiny-pretrained" / key
    if (target / "pretrain.json").exists():
        return target
    if cfg.shipped and (SHIPPED / key / "pretrain.json").exists():
        return SHIPPED / key
    _quiet()
    world = make_world(world_cfg, seed)
    model, tokenizer, info = pretrain_model(world, model_cfg, cfg, seed)
    if not info["reached_targets"]:
        log.warning("pretraining (seed %d) ended after %d steps with recall %.3f and lookup "
                    "accuracy %.3f, below the targets (%.2f, %.2f): the model may not have "
                    "learned to read a context; raise pretrain.steps", seed, info["steps"],
                    info["recall"], info["lookup_acc"], cfg.recall_target, cfg.lookup_target)
    with staged_dir(target, complete="pretrain.json") as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        atomic_write_json(folder / "pretrain.json", info)
    return target


def load_pretrained(path: Path) -> tuple[object, object, dict]:
    """(model in eval mode with SDPA attention, tokenizer, pretraining log)."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    _quiet()
    model = LlamaForCausalLM.from_pretrained(path, attn_implementation="sdpa",
                                             dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model.eval(), tokenizer, read_json(Path(path) / "pretrain.json")
