"""Context-critical filtering for the theory model (Goyal et al., sec. 6).

An example whose answer the pretrained model already gives without the context (low loss on
`[s, r]`) is not context-critical; the paper drops the lowest-scoring share of the data.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from knowflow.models.toy_cpi import OneLayerCPI
from knowflow.worlds.cpi_toy import ToyData, no_context


@torch.no_grad()
def no_context_loss(model: OneLayerCPI, data: ToyData) -> torch.Tensor:
    """Per-example loss of the answer given `[s, r]` only. (N,)"""
    bare = no_context(data)
    logits, _ = model(bare.tokens, bare.mask)
    return F.cross_entropy(logits, bare.answer, reduction="none")


def drop_lowest_no_context_loss(model: OneLayerCPI, data: ToyData, fraction: float) -> ToyData:
    """Keep all but the `fraction` of examples with the lowest no-context loss."""
    n_drop = int(round(fraction * len(data)))
    if n_drop == 0:
        return data
    order = torch.argsort(no_context_loss(model, data), stable=True)
    keep = torch.ones(len(data), dtype=torch.bool)
    keep[order[:n_drop]] = False
    return data.select(keep)
