"""Instruction finetuning of a pretrained tiny-world model on `context + question -> answer`,
with the loss on the answer token only, and tracking every `eval_every` steps.

Which weights train: `full` (all), `lora` (peft adapters on the attention and MLP
projections) or `qk` (only q_proj and k_proj: the attention pattern changes, the values and
everything that stores facts stay as pretrained). Batches are drawn from per-epoch
permutations seeded by (seed, epoch), so the batch of step t is a function of t alone and a
run resumed from a checkpoint (weights, optimizer state, records) continues the same curve.
"""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from knowflow.io import atomic_write_bytes
from knowflow.train.tiny_track import _select, answer_loss, encode, tracking_record
from knowflow.worlds.tiny_world import Example

log = logging.getLogger(__name__)

TrainMode = Literal["full", "lora", "qk"]


@dataclass(frozen=True)
class TinySFTConfig:
    steps: int = 1000
    batch_size: int = 16
    lr: float = 3e-3
    train: TrainMode = "qk"  # the theory's setting; `lora` trains values and MLPs too
    lora_r: int = 8
    eval_every: int = 20
    checkpoint_every: int = 5  # evaluations between resumable checkpoints
    track_train: int = 480  # training examples (evenly spaced) whose loss each record tracks


def select_trainable(model, mode: TrainMode, lora_r: int = 8):
    """Return the model to train with only the `mode` parameters requiring grad."""
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
            warnings.simplefilter("ignore", FutureWarning)
            return get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=2 * lora_r,
                                                    lora_dropout=0.0, target_modules=targets))
    for name, param in model.named_parameters():
        param.requires_grad = mode == "full" or name.endswith(("q_proj.weight",
                                                               "k_proj.weight"))
    return model


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> torch.Tensor:
    """Rows of step `step` (1-based): consecutive slices of per-epoch seeded permutations."""
    start = (step - 1) * batch_size
    out = []
    while len(out) < batch_size:
        epoch, offset = divmod(start + len(out), n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        out += perm[offset:offset + batch_size - len(out)].tolist()
    return torch.tensor(out)


def _save(path: Path, state: dict) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def finetune(model, tokenizer, train: list[Example], evals: dict[str, list[Example]],
             cfg: TinySFTConfig, seed: int, checkpoint: Path | None = None,
             stop: Callable[[int], bool] | None = None) -> list[dict]:
    """Finetune `model` in place; returns one record per evaluation (step 0 included).

    With `checkpoint`, state is saved there every `checkpoint_every` evaluations and a saved
    state is resumed from. `stop(step)` returning True ends the run early (an interruption).
    """
    torch.manual_seed(seed)  # LoRA adapters start random; same seed, same run
    model = select_trainable(model, cfg.train, cfg.lora_r)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    data = encode(tokenizer, train)
    # the per-kind training loss is read on a fixed, evenly spaced subset: scoring all of a
    # large training set at every evaluation would cost more than the training itself
    tracked = torch.linspace(0, len(train) - 1, min(len(train), cfg.track_train)).long()
    track_data = _select(data, tracked)
    kinds = [train[i].kind for i in tracked.tolist()]
    eval_batches = {name: (encode(tokenizer, exs), exs) for name, exs in evals.items()}
    records: list[dict] = []
    first = 1
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        records, first = state["records"], state["step"] + 1
        log.info("resuming finetuning at step %d", first)
    if not records:
        records.append(tracking_record(model, 0, eval_batches, track_data, kinds))
    model.train()
    for step in range(first, cfg.steps + 1):
        batch = _select(data, batch_indices(len(train), cfg.batch_size, step, seed))
        loss = answer_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            records.append(tracking_record(model, step, eval_batches, track_data, kinds))
            n_evals = step // cfg.eval_every
            if checkpoint is not None and (n_evals % cfg.checkpoint_every == 0
                                           or step == cfg.steps):
                _save(checkpoint, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                   "records": records, "step": step})
        if stop is not None and stop(step):
            break
    return records
