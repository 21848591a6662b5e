"""Batching helpers every model-running package shares (evaluation/, probes/, explanation/, train/):
the pad id, right padding, and the KV-cache keyword of the installed transformers version."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def pad_id(tokenizer) -> int:
    """The id padding uses: the tokenizer's pad token, else its end-of-sequence token, else 0.
    Padded positions are masked, so the choice never changes a score."""
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid)
    return 0


def right_pad(seqs: Sequence[Sequence[int]], pad: int, device: torch.device | str | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask), each (rows, longest), padded on the right, so that positions (and
    rotary embeddings) match the unpadded sequences."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)   # (rows, width)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)      # (rows, width)
    for row, seq in enumerate(seqs):
        ids[row, :len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, :len(seq)] = 1
    if device is not None:
        ids, mask = ids.to(device), mask.to(device)
    return ids, mask


def cache_keyword(model) -> str:
    """The KV-cache keyword of `model.forward`: transformers 5 renamed `past_key_values` to
    `cache`; accept either (looked up once per model; a peft model asks its base model)."""
    name = getattr(model, "_knowflow_cache_name", None)
    if name is None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        params = inspect.signature(base.forward).parameters
        name = "cache" if "cache" in params else "past_key_values"
        model._knowflow_cache_name = name
    return name


def output_cache(outputs):
    """The KV cache a forward pass returned, under either keyword."""
    cache = getattr(outputs, "cache", None)
    return cache if cache is not None else getattr(outputs, "past_key_values", None)
