"""The one prefix-cache helper: run a shared token prefix once, repeat its KV cache for each
continuation.

Many rows that begin with the same tokens (a prompt's variants under different edits, prompts
sharing a chat template's system turn) need the prefix computed once: `Prefix.run` runs it as a
batch of one, `expand(n)` gives a fresh copy of its cache repeated n times (the model appends
to it), and `feed(model, n, q_len)` the forward keywords that continue all n rows from it.
An edit that touches only positions after the prefix leaves the prefix's keys and values as
the unmodified model computes them, so sharing them changes no number.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.lens.batching import cache_keyword, model_device, output_cache


def forward(model, past=None, last_only: bool = False, keep: int | None = None, **inputs):
    """`model(**inputs)` with a KV cache; returns (logits, cache). With `keep`, logits for the
    last `keep` positions only (`logits_to_keep` skips the vocabulary projection elsewhere);
    `last_only` is `keep=1`."""
    kwargs = {**inputs, "use_cache": True}
    if past is not None:
        kwargs[cache_keyword(model)] = past
    keep = 1 if last_only else keep
    if keep is None:
        out = model(**kwargs)
        return out.logits, output_cache(out)
    out, logits = call_keeping(model, keep, **kwargs)
    return logits, output_cache(out)


def call_keeping(model, keep: int | torch.Tensor, **kwargs):
    """`model(**kwargs)` projecting to the vocabulary only at `keep` (`logits_to_keep`: the
    last `keep` positions, or a 1-D tensor of positions); returns (output, those logits),
    (batch, kept, vocab). A model whose forward takes no `logits_to_keep` runs whole and its
    logits are sliced."""
    if getattr(model, "_knowflow_keep_ok", True):
        try:
            out = model(**kwargs, logits_to_keep=keep)
        except TypeError:
            model._knowflow_keep_ok = False
        else:
            return out, out.logits
    out = model(**kwargs)
    return out, (out.logits[:, -keep:] if isinstance(keep, int) else out.logits[:, keep])


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix all `seqs` share, leaving each at least one token."""
    if not seqs:
        return 0
    limit = min(len(s) for s in seqs) - 1
    first = seqs[0]
    n = 0
    while n < limit and all(s[n] == first[n] for s in seqs):
        n += 1
    return n


@dataclass
class Prefix:
    """The KV cache of a token prefix (batch of one) that every row continues from."""

    length: int
    cache: object = None

    @classmethod
    @torch.no_grad()
    def run(cls, model, ids: torch.Tensor, lm_head: bool = True, **inputs) -> Prefix:
        """Run prefix `ids` (1, n) once; `inputs` go to the forward pass (an attention plan,
        a mask). With `lm_head`, only the last position's logits are computed (they are not
        used); without, `model` is a decoder that has none."""
        if ids.shape[1] == 0:
            return cls(0)
        if lm_head:
            _, cache = forward(model, last_only=True, input_ids=ids, **inputs)
        else:
            cache = output_cache(model(input_ids=ids, use_cache=True, **inputs))
        return cls(ids.shape[1], cache)

    @classmethod
    def build(cls, model, seqs: Sequence[Sequence[int]], share: bool = True) -> Prefix:
        """The prefix every one of `seqs` starts with (none when `share` is off)."""
        n = common_prefix_len(seqs) if share else 0
        ids = torch.tensor([list(seqs[0][:n])] if n else [[]], dtype=torch.long,
                           device=model_device(model))                    # (1, n)
        return cls.run(model, ids, attention_mask=torch.ones_like(ids),
                       position_ids=torch.arange(n, device=ids.device)[None])

    @torch.no_grad()
    def extend(self, model, seq: Sequence[int], chunk: int) -> Prefix:
        """This prefix continued by `seq[self.length:]` (`seq` starts with the prefix), as a
        batch of one, `chunk` tokens a pass: a pass holds a (chunk, tokens so far) mask, so
        memory grows linearly with the length, and with no cache yet the first pass takes
        SDPA's causal kernel (no mask at all)."""
        dev = model_device(model)
        cache = self.expand(1)
        for start in range(self.length, len(seq), chunk):
            ids = torch.tensor([list(seq[start:start + chunk])], device=dev)    # (1, chunk)
            end = start + ids.shape[1]
            _, cache = forward(model, past=cache, last_only=True, input_ids=ids,
                               attention_mask=torch.ones((1, end), dtype=torch.long,
                                                         device=dev),
                               position_ids=torch.arange(start, end, device=dev)[None])
        return Prefix(len(seq), cache)

    def expand(self, batch: int):
        """A fresh cache holding the prefix `batch` times (the model appends to it)."""
        if self.cache is None:
            return None
        cache = copy.deepcopy(self.cache)
        cache.batch_repeat_interleave(batch)
        return cache

    def feed(self, model, batch: int, q_len: int = 1) -> dict:
        """Forward keywords that continue `batch` rows of `q_len` tokens from the prefix: its
        repeated cache and their positions (none without a cache)."""
        if self.cache is None:
            return {}
        dev = model_device(model)
        positions = torch.arange(self.length, self.length + q_len, device=dev)  # (q_len,)
        return {cache_keyword(model): self.expand(batch),
                "position_ids": positions.expand(batch, -1)}              # (batch, q_len)
