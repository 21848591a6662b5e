"""Batching helpers every model-running package shares (evaluation/, probes/, explanation/, train/):
the pad id, right padding, the KV-cache keyword of the installed transformers version, and the
split of items over the processes of a multi-process launch (torchrun, accelerate launch)."""

from __future__ import annotations

import inspect
import os
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


def dist_rank() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside torch.distributed."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def launched_state():
    """accelerate's `PartialState` when this process is one of several a launcher started
    (torchrun or `accelerate launch` set WORLD_SIZE > 1): it joins the process group (gloo
    on CPUs, NCCL on GPUs) and names this process's device. None for a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState  # heavy: only under a launcher

    return PartialState()


def shard(items: Sequence, rank: int, world: int) -> tuple[list, int]:
    """This rank's equal-length share (padded by repeating its last item) and how many of
    its entries are real. Equal lengths keep collective forwards (FSDP) in step."""
    per = -(-len(items) // world)
    mine = list(items[rank * per:(rank + 1) * per])
    real = len(mine)
    pad = mine[-1] if mine else items[-1]
    return mine + [pad] * (per - real), real


def gather(values: list, real: int, world: int) -> list:
    """Every rank's first `real` values, in rank order (on every rank)."""
    if world == 1:
        return values[:real]
    parts: list = [None] * world
    torch.distributed.all_gather_object(parts, (values, real))
    return [v for vals, n in parts for v in vals[:n]]
