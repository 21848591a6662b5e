"""The multi-layer analogue of Prop. 1 of Goyal et al. (2025): which training examples push
attention toward the context, and which pull it away.

In the one-layer theory model, the gradient of the C points raises the attention on the
context, while once those are fit the gradient of the C+S points lowers it (memory answers
them more confidently than the context does). In a transformer the same question is asked of
the measured quantity: let A_l(theta) be the mean attention mass from the answer position to
the context on the counterfactual set, in layer l (head mean), and L_k(theta) the mean answer
loss of the training examples of kind k (C, C+S, S, CF). A gradient step on kind k alone moves
the parameters along -grad L_k, so

    D_{k,l} = d/dt A_l(theta - t grad L_k) |_{t=0} = -grad A_l . grad L_k

is the rate at which kind k's loss raises (> 0) or lowers (< 0) context attention in layer l.
Gradients are taken with respect to the parameters being trained (q/k under QK-only, the
adapters under LoRA), so D is the effect of the update the run actually makes. A gradient
step on the full mixture moves A by the share-weighted sum of the D_k.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F

from knowflow.experiments.inversion_tiny.model import answer_logits, select_rows
from knowflow.experiments.inversion_tiny.world import Example
from knowflow.probes.mass import span_mass


def span_masks(examples: Sequence[Example], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean masks of each example's context statements and question subject. (n, seq) x2"""
    ctx = torch.zeros((len(examples), width), dtype=torch.bool)
    subj = torch.zeros((len(examples), width), dtype=torch.bool)
    for i, ex in enumerate(examples):
        if ex.context is not None:
            ctx[i, ex.context[0]:ex.context[1]] = True
        subj[i, ex.subject] = True
    return ctx, subj


def answer_attention(attns, last: torch.Tensor, ctx: torch.Tensor, subj: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mass from each row's answer position on the context and on the subject,
    averaged over rows, per layer and head. (layers, heads) x2; differentiable."""
    rows = torch.arange(len(last))
    to_ctx, to_subj = [], []
    for layer_attn in attns:  # (n, heads, seq, seq)
        row = layer_attn[rows, :, last]  # (n, heads, seq)
        to_ctx.append(span_mass(row, ctx[:, None]).mean(0))  # (heads,)
        to_subj.append(span_mass(row, subj[:, None]).mean(0))
    return torch.stack(to_ctx), torch.stack(to_subj)


def context_attention(model, batch: dict[str, torch.Tensor], examples: Sequence[Example]
                      ) -> torch.Tensor:
    """A_l: attention mass from the answer position on the context, per layer (head and row
    mean); differentiable. (layers,)"""
    _, attns = answer_logits(model, batch, output_attentions=True)
    ctx, subj = span_masks(examples, batch["ids"].shape[1])
    return answer_attention(attns, batch["last"], ctx, subj)[0].mean(1)


def kind_loss(model, batch: dict[str, torch.Tensor], kinds: Sequence[str], kind: str
              ) -> torch.Tensor:
    """L_k: the mean answer loss of the rows of `kind`. ()"""
    rows = torch.tensor([i for i, k in enumerate(kinds) if k == kind])
    part = select_rows(batch, rows)
    logits, _ = answer_logits(model, part)
    return F.cross_entropy(logits, part["answer"])


def gradient_projections(model, cf_batch: dict[str, torch.Tensor],
                         cf_examples: Sequence[Example], train_batch: dict[str, torch.Tensor],
                         kinds: Sequence[str]) -> dict[str, list[float]]:
    """{"grad_ctx_<kind>": [D_{kind, l} for each layer l]} for every kind in `kinds`."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return {}
    with torch.enable_grad():
        per_layer = context_attention(model, cf_batch, cf_examples)  # (layers,)
        grads_a = [torch.autograd.grad(per_layer[layer], params, retain_graph=True,
                                       allow_unused=True) for layer in range(len(per_layer))]
        out = {}
        for kind in sorted(set(kinds)):
            grads_l = torch.autograd.grad(kind_loss(model, train_batch, kinds, kind), params,
                                          allow_unused=True)
            out[f"grad_ctx_{kind}"] = [
                -float(sum((ga * gl).sum() for ga, gl in zip(g_a, grads_l, strict=True)
                           if ga is not None and gl is not None))
                for g_a in grads_a]
    return out
