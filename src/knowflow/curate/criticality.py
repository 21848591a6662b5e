"""Context-criticality of finetuning examples, scored with the model about to be finetuned.

For each example the response's mean token loss is computed twice: with its context (Alpaca's
`input`) and without it. An example whose response the model already predicts without the
context (low no-context loss) teaches it nothing about reading contexts; Goyal et al. (ICLR
2025) show such non-context-critical points cause the inversion and drop the 25% with the
lowest no-context loss. Criticality = loss without context - loss with it.

    kept, scores = curate_examples(model, tokenizer, examples, CurateConfig(drop=0.25))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from knowflow.config import require
from knowflow.evaluate.prompts import FORMATS
from knowflow.train.sft_data import IGNORE, Instruction, encode

BY = ("no_context_loss", "criticality")


@dataclass(frozen=True)
class CurateConfig:
    drop: float = 0.25               # share of examples dropped
    by: str = "no_context_loss"      # the paper's rule; or "criticality" (lowest dropped)
    prompt_format: str = "chat"
    batch_size: int = 8

    def validate(self) -> None:
        require(0 <= self.drop < 1, "drop", "must lie in [0, 1)")
        require(self.by in BY, "by", f"{self.by!r} is not one of {', '.join(BY)}")
        require(self.prompt_format in FORMATS, "prompt_format",
                f"{self.prompt_format!r} is not one of {', '.join(FORMATS)}")
        require(self.batch_size >= 1, "batch_size", "must be at least 1")


@torch.no_grad()
def response_losses(model, encoded: Sequence[dict], pad_id: int, batch_size: int = 8,
                    progress: Callable[[int, int], None] | None = None) -> list[float]:
    """Mean token loss of each example's labelled tokens (the response)."""
    device = next(model.parameters()).device
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]["input_ids"]))
    out = [0.0] * len(encoded)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(encoded[i]["input_ids"]) for i in idx)
        ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        labels = torch.full((len(idx), width), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            n = len(encoded[i]["input_ids"])
            ids[row, :n] = torch.tensor(encoded[i]["input_ids"])
            labels[row, :n] = torch.tensor(encoded[i]["labels"])
            mask[row, :n] = 1
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logits = logits[:, :-1].float()                    # (batch, seq-1, vocab)
        target = labels[:, 1:].to(device)                  # (batch, seq-1)
        nll = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=IGNORE,
                              reduction="none")            # (batch, seq-1)
        counts = (target != IGNORE).sum(1).clamp(min=1)
        for row, i in enumerate(idx):
            out[i] = float(nll[row].sum() / counts[row])
        if progress:
            progress(min(start + batch_size, len(order)), len(order))
    return out


def score_examples(model, tokenizer, examples: Sequence[Instruction], cfg: CurateConfig,
                   progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """Per example: `loss_with_context`, `loss_without_context`, `criticality`."""
    cfg.validate()
    with_ctx = [encode(tokenizer, ex, cfg.prompt_format, context=True) for ex in examples]
    without = [encode(tokenizer, ex, cfg.prompt_format, context=False) for ex in examples]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else \
        tokenizer.eos_token_id
    both = response_losses(model, with_ctx + without, pad, cfg.batch_size, progress)
    n = len(examples)
    return [{"index": i, "kind": ex.extra.get("kind"), "has_context": bool(ex.input),
             "loss_with_context": both[i], "loss_without_context": both[n + i],
             "criticality": both[n + i] - both[i]} for i, ex in enumerate(examples)]


def dropped_indices(scores: Sequence[dict], cfg: CurateConfig) -> set[int]:
    """The `cfg.drop` share of examples with the lowest `cfg.by` score (ties: earlier kept)."""
    key = "loss_without_context" if cfg.by == "no_context_loss" else "criticality"
    order = sorted(range(len(scores)), key=lambda i: (scores[i][key], -i))
    return set(order[:round(len(scores) * cfg.drop)])


def curate_examples(model, tokenizer, examples: Sequence[Instruction], cfg: CurateConfig,
                    progress: Callable[[int, int], None] | None = None
                    ) -> tuple[list[Instruction], list[dict]]:
    """(the examples kept, every example's scores with a `dropped` flag)."""
    scores = score_examples(model, tokenizer, examples, cfg, progress)
    drop = dropped_indices(scores, cfg)
    for s in scores:
        s["dropped"] = s["index"] in drop
    return [ex for i, ex in enumerate(examples) if i not in drop], scores
