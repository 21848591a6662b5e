"""Tracking for tiny-world finetuning: accuracies and attention mass on fixed held-out sets.

On the counterfactual set (memorized subjects never finetuned on, a context that contradicts
memory) an answer is *counterfactual-correct* when it is the context's value and *parametric*
when it is the memorized value. Held-out C items (unknown subjects) and held-out C+S items
(memorized subjects, agreeing context) measure context reading without conflict; `recall` asks
memorized facts without context. Attention mass is read from the answer position (the last
prompt token, which predicts the answer): the share of its attention on the context statements
and on the question's subject token, per layer, averaged over heads (eager attention weights).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from knowflow.data.instruction_rows import IGNORE
from knowflow.experiments.inversion_tiny.mechanism import (
    answer_attention,
    gradient_projections,
    span_masks,
)
from knowflow.experiments.inversion_tiny.model import (
    answer_logits,
    encode,
    encode_words,
    per_example_loss,
)
from knowflow.experiments.inversion_tiny.world import Example


@torch.no_grad()
def evaluate_set(model, batch: dict[str, torch.Tensor], examples: Sequence[Example],
                 attention: bool) -> dict:
    """Accuracy (pred = answer), parametric share (pred = memory) and, if asked, attention mass
    on the context and on the subject, as the tracker records it: `attn_context` (mean over
    layers and heads), `attn_context_layers` (head mean per layer), `attn_context_heads` (per
    layer and head); the same for `attn_subject`."""
    logits, attns = answer_logits(model, batch, output_attentions=attention)
    pred = logits.argmax(-1)  # (n,)
    out = {"acc": float((pred == batch["answer"]).float().mean()),
           "param": float((pred == batch["memory"]).float().mean())}
    if attention:
        ctx, subj = span_masks(examples, batch["ids"].shape[1])
        to_ctx, to_subj = answer_attention(attns, batch["last"], ctx, subj)  # (layers, heads)
        for key, mass in (("attn_context", to_ctx), ("attn_subject", to_subj)):
            layers = mass.mean(1).tolist()  # head mean, per layer
            out[key], out[f"{key}_layers"] = sum(layers) / len(layers), layers
        out["attn_context_heads"], out["attn_subject_heads"] = to_ctx.tolist(), to_subj.tolist()
    return out


def tracking_record(model, eval_batches: dict[str, tuple[dict, list[Example]]],
                    train_batch: dict[str, torch.Tensor], train_kinds: list[str]) -> dict:
    """One metrics record: the quantities above plus the training loss per example kind."""
    rec: dict = {}
    cf = evaluate_set(model, *eval_batches["cf"], attention=True)
    rec.update(cf_acc=cf["acc"], param_acc=cf["param"],
               **{k: v for k, v in cf.items() if k.startswith("attn_")})
    for name, key in (("cs", "cs_acc"), ("c", "c_acc"), ("recall", "recall_acc")):
        rec[key] = evaluate_set(model, *eval_batches[name], attention=False)["acc"]
    losses = per_example_loss(model, train_batch)
    rec["loss"] = float(losses.mean())
    for kind in sorted(set(train_kinds)):
        sel = torch.tensor([k == kind for k in train_kinds])
        rec[f"loss_{kind}"] = float(losses[sel].mean())
    return rec


def training_rows(tokenizer, examples: Sequence[Example]) -> list[dict[str, list[int]]]:
    """Examples as instruction rows for the HF Trainer path (`train.sft.train_model`): the prompt
    ids then the answer id, with the loss on the answer token only."""
    rows = []
    for ex in examples:
        prompt = encode_words(tokenizer, ex.tokens)
        answer = encode_words(tokenizer, [ex.answer])
        rows.append({"input_ids": prompt + answer, "labels": [IGNORE] * len(prompt) + answer})
    return rows


class TinyEvaluator:
    """The evaluator a tiny-world finetuning run's `EvalCallback` calls: `tracking_record` on
    fixed held-out sets and on an evenly spaced subset of the training examples (scoring all
    of a large training set at every evaluation would cost more than the training itself),
    plus, with `mechanism`, the per-kind gradient projections (about half the cost)."""

    def __init__(self, tokenizer, train: Sequence[Example], evals: dict[str, list[Example]],
                 track_train: int, mechanism: bool = True):
        tracked = torch.linspace(0, len(train) - 1, min(len(train), track_train)).long()
        self.train_batch = encode(tokenizer, [train[i] for i in tracked.tolist()])
        self.kinds = [train[i].kind for i in tracked.tolist()]
        self.eval_batches = {name: (encode(tokenizer, exs), exs) for name, exs in evals.items()}
        self.mechanism = mechanism

    def __call__(self, model) -> dict:
        rec = tracking_record(model, self.eval_batches, self.train_batch, self.kinds)
        if self.mechanism:
            rec.update(gradient_projections(model, *self.eval_batches["cf"], self.train_batch,
                                            self.kinds))
        return rec
