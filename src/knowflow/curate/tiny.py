"""Context-critical filtering for tiny-world finetuning data (Goyal et al., sec. 6).

An example whose answer the pretrained model already gives without its context (low loss on
`<bos> question s r`) is not context-critical; the paper drops the lowest-scoring share.
"""

from __future__ import annotations

import torch

from knowflow.train.tiny_track import encode, per_example_loss
from knowflow.worlds.tiny_world import Example, no_context


def no_context_loss(model, tokenizer, examples: list[Example]) -> torch.Tensor:
    """Per-example answer loss with the context removed. (n,)"""
    model.eval()
    return per_example_loss(model, encode(tokenizer, [no_context(ex) for ex in examples]))


def drop_lowest_no_context_loss(model, tokenizer, examples: list[Example], fraction: float
                                ) -> list[Example]:
    """All but the `fraction` of examples with the lowest no-context loss, order kept."""
    n_drop = int(round(fraction * len(examples)))
    if n_drop == 0:
        return list(examples)
    order = torch.argsort(no_context_loss(model, tokenizer, examples), stable=True)
    dropped = set(order[:n_drop].tolist())
    return [ex for i, ex in enumerate(examples) if i not in dropped]
