"""The one way knowflow intercepts attention: through transformers' attention interface.

`intercepted(model)` switches the model to a registered attention function, `knowflow_fused`
(over SDPA) or `knowflow_eager`, that wraps the model's own implementation and restores it
afterwards.
A forward pass given `knowflow_plan=plan` (transformers passes extra keyword arguments down
to the attention function) hands each layer's attention to `plan.attend`; without a plan the
wrapped implementation runs unchanged. Two kinds of plan exist: the token trie's
(`lens._trie`: each chain of a packed trie attends to its ancestors only) and `AttentionPlan`,
with which a forward pass can

* block attention edges: per layer, a boolean tensor (batch, heads or 1, query, key) marks
  the (row, head, query, key) edges to cut; they get the mask's "never attend" value before
  the softmax, so each batch row can block different edges in different layers;
* capture attention probabilities for one query row per batch row, through the model's own
  eager attention (SDPA does not return probabilities);
* add a per-key bias to the attention scores: per layer, a float tensor (batch|1, heads|1,
  key) added before the softmax for every query, through the eager attention so that
  gradients reach it (a bias of log(k) scales the attention each key gets by k and
  renormalises; `explanation.features.soft_effects` differentiates it). When the scores that
  a backward pass would keep pass `RECOMPUTE_ABOVE`, each layer's biased attention is
  recomputed in the backward pass instead (activation checkpointing of the attention alone).

Layers with nothing to block or capture call the wrapped implementation with the unchanged
mask, so a plan that blocks nothing gives exactly the unmodified model.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from knowflow.errors import KnowflowError
from knowflow.lens.arch import arch_of

# implementation wrapped -> the name it is registered under (a name holding "sdpa" would make
# transformers check SDPA support, which eager-only models such as Gemma 2 refuse)
_NAMES = {"sdpa": "knowflow_fused", "eager": "knowflow_eager"}
RECOMPUTE_ABOVE = 1 << 30   # bytes of attention scores over all layers past which a key-bias
#                            backward pass recomputes each layer's attention (one at a time)


class Plan(Protocol):
    """What a forward pass given `knowflow_plan=` does in each attention layer: `attend` gets
    the layer's inputs, the wrapped implementation and its name (`base`), and returns
    (output, weights)."""

    def attend(self, module, query, key, value, attention_mask, *args, wrapped, base: str,
               **kwargs): ...


@dataclass
class AttentionPlan:
    """What one forward pass blocks and captures, by layer index."""

    block: dict[int, torch.Tensor] = field(default_factory=dict)  # (batch, heads|1, q, k) bool
    capture: frozenset[int] = frozenset()
    capture_rows: torch.Tensor | None = None  # (batch,) query index to keep in each row
    captured: dict[int, torch.Tensor] = field(default_factory=dict)  # (batch, heads, k)
    key_bias: dict[int, torch.Tensor] = field(default_factory=dict)  # (batch|1, heads|1, k)
    layer_of: dict[int, int] = field(default_factory=dict)  # id(attention module) -> layer

    def attend(self, module, query, key, value, attention_mask, *args, wrapped, base: str,
               **kwargs):
        # query: (batch, heads, q, head_dim); key, value: (batch, kv_heads, k, head_dim)
        layer = self.layer_of.get(id(module), getattr(module, "layer_idx", None))
        block = self.block.get(layer)
        bias = self.key_bias.get(layer)
        capture = layer in self.capture
        mask = attention_mask
        if block is not None or capture or bias is not None:
            keep = _keep_mask(attention_mask, query, key)  # (batch|1, 1|heads, q, k)
            if block is not None:
                keep = keep & ~block.to(keep.device)
            eager = capture or bias is not None
            if eager or base == "eager" or (mask is not None and mask.dtype != torch.bool):
                mask = _additive(keep, query.dtype)
            else:
                mask = keep
        if not capture:
            if bias is not None and torch.is_grad_enabled() and _scores_bytes(
                    query, key, len(self.layer_of) or 1) > RECOMPUTE_ABOVE:
                # recomputed in the backward pass: the layer keeps q, k, v, the mask and the
                # bias, not its (heads, q, k) scores, so memory holds one layer's attention
                return checkpoint(_biased_eager, module, query, key, value, mask, bias, *args,
                                  use_reentrant=False, **kwargs)
            if bias is not None:
                return _biased_eager(module, query, key, value, mask, bias, *args, **kwargs)
            return wrapped(module, query, key, value, mask, *args, **kwargs)
        out, weights = _biased_eager(module, query, key, value, mask, bias, *args, **kwargs)
        rows = self.capture_rows.to(weights.device)
        batch = torch.arange(weights.shape[0], device=weights.device)
        self.captured[layer] = weights[batch, :, rows, :].float()  # (batch, heads, k)
        return out, weights


def _causal_keep(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """(1, 1, q, k) bool: query i (the last q of k positions) may see keys j <= its position."""
    q, k = query.shape[-2], key.shape[-2]
    rows = torch.arange(q, device=query.device)[:, None] + (k - q)
    return (torch.arange(k, device=query.device)[None, :] <= rows)[None, None]


def _keep_mask(mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor
               ) -> torch.Tensor:
    """Any mask form (None = causal, bool keep, float additive) as a bool keep mask."""
    if mask is None:
        return _causal_keep(query, key)
    mask = mask[..., : key.shape[-2]]
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2


def _additive(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    zero = torch.zeros((), dtype=dtype, device=keep.device)
    return torch.where(keep, zero, torch.finfo(dtype).min)


def _eager_for(module: torch.nn.Module):
    fn = getattr(inspect.getmodule(type(module)), "eager_attention_forward", None)
    if fn is None:
        raise KnowflowError(f"cannot capture attention of {type(module).__name__}: its model "
                            "code has no eager_attention_forward")
    return fn


def _scores_bytes(query: torch.Tensor, key: torch.Tensor, layers: int) -> int:
    """The attention scores that `layers` such layers keep for a backward pass, in bytes."""
    batch, heads, q = query.shape[:3]
    return layers * batch * heads * q * key.shape[-2] * query.element_size()


def _biased_eager(module, query, key, value, mask, bias, *args, **kwargs):
    """The model's eager attention with the additive `mask` (batch|1, heads|1, q, k) plus a
    per-key `bias` (batch|1, heads|1, k) or None."""
    if bias is not None:
        mask = mask + bias[..., None, : key.shape[-2]].to(mask.device, mask.dtype)
    return _eager_for(module)(module, query, key, value, mask, *args, **kwargs)


def _attention(base: str):
    """The registered attention function wrapping implementation `base`."""
    def attention(module, query, key, value, attention_mask, *args, **kwargs):
        plan: Plan | None = kwargs.pop("knowflow_plan", None)
        wrapped = ALL_ATTENTION_FUNCTIONS[base] if base != "eager" else _eager_for(module)
        if plan is None:
            return wrapped(module, query, key, value, attention_mask, *args, **kwargs)
        return plan.attend(module, query, key, value, attention_mask, *args, wrapped=wrapped,
                           base=base, **kwargs)
    return attention


def _register(base: str) -> str:
    name = _NAMES[base]
    if name not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(name, _attention(base))
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    return name


@contextmanager
def intercepted(model, base: str | None = None) -> Iterator[dict[int, int]]:
    """Run `model` through knowflow's attention function inside the block; yields the
    {id(attention module): layer} map that plans carry. `base`: the implementation wrapped
    (default: the model's own, SDPA for any other than eager)."""
    arch = arch_of(model)
    original = model.config._attn_implementation
    if original in _NAMES.values() and base in (None, *[b for b, n in _NAMES.items()
                                                         if n == original]):
        yield {id(a): i for i, a in enumerate(arch.attn)}  # nested use: already intercepted
        return
    base = base or (original if original in _NAMES else "sdpa")
    model.set_attn_implementation(_register(base))
    try:
        yield {id(a): i for i, a in enumerate(arch.attn)}
    finally:
        model.set_attn_implementation(original)
