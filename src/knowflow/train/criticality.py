"""Context-criticality of finetuning examples: knowflow's one curation rule, for every model.

For each example the response's mean token loss is computed twice: with its context (Alpaca's
`input`) and without it. An example whose response the model already predicts without the
context (low no-context loss) teaches it nothing about reading contexts; Goyal et al. (ICLR
2025) show such non-context-critical points cause the inversion and drop the 25% with the
lowest no-context loss. Criticality = loss without context - loss with it.

    kept, scores = curate_examples(model, tokenizer, examples, CurateConfig(drop=0.25))

The rule is the same for every kind of data knowflow finetunes on: `no_context_loss` scores
each example's answer without its context (instruction rows of an HF model here; a
reproduction registers its own data type with `register_no_context`, as the theory model's
`ToyData` and the tiny world's examples do), `lowest_share` picks the share to drop, and
`drop_lowest_no_context_loss` does both. Dynamic curation (`train.curation`) calls the same
scoring on the model being trained, every N steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from knowflow.config import option, validate_config
from knowflow.data.facts import Instruction
from knowflow.data.instruction_rows import IGNORE, encode
from knowflow.data.prompts import FORMAT_HELP, FORMATS
from knowflow.lens.arch import check_fits
from knowflow.lens.batching import pad_id as tokenizer_pad_id
from knowflow.lens.batching import right_pad
from knowflow.store.run_folder import Progress

# The experiments' dynamic arms (README, "Dynamic curation"): drop, for good, up to 3/4 of the
# rows still in at each re-scoring, of those only rows the model answers from memory alone
# (no-context loss below ln 2, i.e. answer probability above 1/2). Chosen by a search over the
# share (0.25, 0.5, 0.75), readmission and the threshold in inversion-tiny (all five seeds).
MEMORY_LOSS = 0.693
ARM_FRACTION = 0.75

BY = ("no_context_loss", "criticality")

# data type -> fn(model, data, tokenizer) -> (n,) no-context losses; see `register_no_context`
_NO_CONTEXT: dict[type, Callable] = {}


def register_no_context(data_type: type) -> Callable:
    """Decorator: score `data_type` (a dataset object, or the type of a list's items) with
    `fn(model, data, tokenizer) -> (n,) losses`, the model already in eval mode."""

    def wrap(fn: Callable) -> Callable:
        _NO_CONTEXT[data_type] = fn
        return fn

    return wrap


@dataclass(frozen=True)
class CurateConfig:
    drop: float = option(0.25, "Share of examples to drop.", ge=0, lt=1)
    by: str = option("no_context_loss", "no_context_loss (the paper's rule) or criticality.",
                     one_of=BY)
    prompt_format: str = option("auto", FORMAT_HELP, one_of=FORMATS)
    batch_size: int = option(8, "Examples per forward pass.", ge=1)
    seed: int = option(0, "Seed of the built-in mixture.")


@torch.no_grad()
def response_losses(model, encoded: Sequence[dict], pad_id: int, batch_size: int = 8,
                    progress: Progress | None = None) -> list[float]:
    """Mean token loss of each example's labelled tokens (the response)."""
    device = next(model.parameters()).device
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]["input_ids"]))
    out = [0.0] * len(encoded)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        ids, mask = right_pad([encoded[i]["input_ids"] for i in idx], pad_id)  # (batch, seq)
        labels, _ = right_pad([encoded[i]["labels"] for i in idx], IGNORE)       # (batch, seq)
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
                   progress: Progress | None = None) -> list[dict]:
    """Per example: `loss_with_context`, `loss_without_context`, `criticality`."""
    validate_config(cfg)
    with_ctx = [encode(tokenizer, ex, cfg.prompt_format, context=True) for ex in examples]
    without = [encode(tokenizer, ex, cfg.prompt_format, context=False) for ex in examples]
    for i, enc in enumerate(with_ctx):  # the longer of the two
        check_fits(model, len(enc["input_ids"]), f"row {i + 1}")
    both = response_losses(model, with_ctx + without, tokenizer_pad_id(tokenizer),
                           cfg.batch_size, progress)
    n = len(examples)
    return [{"index": i, "kind": ex.extra.get("kind"), "has_context": bool(ex.input),
             "loss_with_context": both[i], "loss_without_context": both[n + i],
             "criticality": both[n + i] - both[i]} for i, ex in enumerate(examples)]


def lowest_share(scores: Sequence[float] | torch.Tensor, fraction: float) -> list[int]:
    """Indices of the round(fraction * n) lowest scores, lowest first. The one tie-break of
    every curation rule (static, dynamic, `knowflow curate`): of equal scores the earlier
    example is dropped first (a stable sort)."""
    values = torch.as_tensor(scores, dtype=torch.float64).flatten()  # (n,)
    n_drop = int(round(fraction * len(values)))
    return torch.argsort(values, stable=True)[:n_drop].tolist()


def dropped_indices(scores: Sequence[dict], cfg: CurateConfig) -> set[int]:
    """The `cfg.drop` share of examples with the lowest `cfg.by` score (`lowest_share`)."""
    key = "loss_without_context" if cfg.by == "no_context_loss" else "criticality"
    return set(lowest_share([s[key] for s in scores], cfg.drop))


def curate_examples(model, tokenizer, examples: Sequence[Instruction], cfg: CurateConfig,
                    progress: Progress | None = None
                    ) -> tuple[list[Instruction], list[dict]]:
    """(the examples kept, every example's scores with a `dropped` flag)."""
    scores = score_examples(model, tokenizer, examples, cfg, progress)
    drop = dropped_indices(scores, cfg)
    for s in scores:
        s["dropped"] = s["index"] in drop
    return [ex for i, ex in enumerate(examples) if i not in drop], scores


def instruction_rows_no_context(tokenizer, examples: Sequence[Instruction], prompt_format: str
                                ) -> list[dict]:
    """Encoded rows of `examples` with their context (Alpaca `input`) removed."""
    return [encode(tokenizer, ex, prompt_format, context=False) for ex in examples]


def no_context_loss(model, data, tokenizer=None, prompt_format: str = "auto",
                    batch_size: int = 8) -> torch.Tensor:
    """Each example's answer loss with its context removed, under `model` as it is now. (n,)

    `data` is a list of `Instruction` rows (with the HF `tokenizer`), a list of already
    encoded no-context rows (`input_ids`, `labels`; from `instruction_rows_no_context`), or a
    type a reproduction registered (`register_no_context`).
    """
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        scorer = _NO_CONTEXT.get(type(data))
        if scorer is not None:
            return scorer(model, data, tokenizer)
        rows = list(data)
        scorer = _NO_CONTEXT.get(type(rows[0])) if rows else None
        if scorer is not None:
            return scorer(model, rows, tokenizer)
        if rows and isinstance(rows[0], Instruction):
            rows = instruction_rows_no_context(tokenizer, rows, prompt_format)
        return torch.tensor(response_losses(model, rows, tokenizer_pad_id(tokenizer),
                                            batch_size))
    finally:
        model.train(was_training)


def drop_lowest_no_context_loss(model, data, fraction: float, tokenizer=None, **kw):
    """`data` without the `fraction` of examples with the lowest no-context loss, order kept
    (the paper's static filter, scored once with the model before finetuning)."""
    drop = set(lowest_share(no_context_loss(model, data, tokenizer, **kw), fraction))
    if not drop:
        return data if not isinstance(data, list) else list(data)
    keep = [i not in drop for i in range(len(data))]
    if isinstance(data, list):
        return [ex for ex, k in zip(data, keep, strict=True) if k]
    return data.select(torch.tensor(keep))
