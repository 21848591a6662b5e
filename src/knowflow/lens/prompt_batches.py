"""Length-sorted batches, left padding, and a shared-prefix KV cache for prompt prefill.

Prompts are sorted by token length (longest first, so memory trouble shows in the first batch)
and left-padded; position ids count only real tokens, so a padded row computes the same
positions as the same prompt run alone. Prompts of one run usually begin with the same tokens
(a chat template's system turn, "Context:"): that common prefix is run once (`lens.prefix`),
and every batch continues from a copy of its cache, so the prefix costs one forward pass per run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from knowflow.lens.batching import model_device
from knowflow.lens.prefix import Prefix, forward


def sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first; order is stable."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids), each (batch, max_len), padded on the left."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def encode_prompts(tokenizer, texts: Sequence[str], add_special_tokens: Sequence[bool]
                   ) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=a)["input_ids"]
            for t, a in zip(texts, add_special_tokens, strict=True)]


PrefillExtra = Callable[[torch.Tensor], dict]  # attention_mask (batch, seq) -> forward kwargs


PASS_COST = 32  # a forward pass's fixed cost, in padded tokens (weights read, dispatch)


def length_groups(lengths: Sequence[int], pass_cost: int = PASS_COST,
                  sizes: Sequence[int] | None = None, limit: int | None = None
                  ) -> list[list[int]]:
    """Row indices split into groups of similar length: each group is one padded forward pass
    costing (rows x its longest length) + `pass_cost` tokens, and the split minimizes the
    total (dynamic programming over the rows sorted longest first; ties keep input order).
    With `limit`, a group's `sizes` (default 1 a row) add up to at most `limit` (a row larger
    than that is a group of its own)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    size = [1 if sizes is None else sizes[i] for i in order]
    best = [0.0] + [float("inf")] * len(order)   # best[j]: cost of the first j sorted rows
    cut = [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        held = 0
        for i in range(j - 1, -1, -1):             # the last group is order[i:j]
            held += size[i]
            if limit is not None and held > limit and i < j - 1:
                break
            cost = best[i] + (j - i) * lengths[order[i]] + pass_cost
            if cost <= best[j]:                    # ties: the earliest cut, as before
                best[j], cut[j] = cost, i
    groups, j = [], len(order)
    while j:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


def _mergeable(cache) -> bool:
    """Whether `cache` is a plain dynamic KV cache whose layer tensors can be re-padded."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - older transformers
        return False
    return (type(cache) is DynamicCache
            and all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None])))


def _merge_left_padded(parts: list[tuple[list[int], object, torch.Tensor]], keep: int):
    """One cache for all rows of `parts` [(row indices, cache, attention_mask (rows, seq_i))],
    each row left-padded to the widest part: the padding goes after the first `keep`
    (shared-prefix) positions. Returns (cache, attention_mask (rows, widest seq)) with row r
    at index r; the first part's cache object is reused."""
    width = max(mask.shape[1] for _, _, mask in parts)
    rows = sum(len(idx) for idx, _, _ in parts)

    def join(tensors: list[torch.Tensor], dim: int) -> torch.Tensor:
        first = tensors[0]                                     # dim: the sequence axis
        shape = list(first.shape)
        shape[0], shape[dim] = rows, width
        out = first.new_zeros(shape)
        for (idx, _, _), x in zip(parts, tensors, strict=True):
            at = torch.tensor(idx, device=x.device)
            out.index_copy_(0, at, torch.cat(
                [x.narrow(dim, 0, keep), x.new_zeros([*x.shape[:dim], width - x.shape[dim],
                                                      *x.shape[dim + 1:]]),
                 x.narrow(dim, keep, x.shape[dim] - keep)], dim=dim))
        return out

    cache = parts[0][1]
    for i, layer in enumerate(cache.layers):               # keys: (rows, heads, seq, dim)
        layer.keys = join([c.layers[i].keys for _, c, _ in parts], 2)
        layer.values = join([c.layers[i].values for _, c, _ in parts], 2)
    return cache, join([mask for _, _, mask in parts], 1)


@torch.no_grad()
def _prefill_rows(model, seqs, rows: list[int], prefix: Prefix, pad_id: int, extra):
    """One left-padded forward pass over `seqs[rows]`: (last logits, cache, attention mask)."""
    n = prefix.length
    ids, mask, pos = left_pad([list(seqs[i][n:]) for i in rows], pad_id, model_device(model))
    if n:
        mask = torch.cat([mask.new_ones(len(rows), n), mask], dim=1)         # (rows, seq)
        pos = pos + n
    more = extra(mask) if extra is not None else {}
    logits, cache = forward(model, past=prefix.expand(len(rows)), last_only=True,
                            input_ids=ids, attention_mask=mask, position_ids=pos, **more)
    return logits[:, -1], cache, mask


@torch.no_grad()
def prefill(model, seqs: Sequence[Sequence[int]], prefix: Prefix, pad_id: int,
            extra: PrefillExtra | None = None):
    """Run prompts `seqs` (which all start with `prefix`), left-padded.

    Returns (last_logits (batch, vocab), cache, attention_mask (batch, seq), next_positions
    (batch, 1)): what a decoder needs to continue every row, in the order of `seqs`.
    `extra(attention_mask)` may add keyword arguments to the forward pass (e.g. an
    attention-capture plan, `probes.intercept`); with it the rows run as one pass. Otherwise,
    on a CPU, rows of very different lengths run in several passes (`length_groups`), so that short
    prompts carry little padding, and their caches are joined into one left-padded cache
    (for transformers' plain `DynamicCache`; other caches run as one pass).
    """
    device = model_device(model)
    lengths = torch.tensor([len(s) for s in seqs], device=device)
    everything = list(range(len(seqs)))
    widths = [len(s) - prefix.length for s in seqs]
    # CPU only: measured there; on a GPU padding is cheap, passes are not, and joining the
    # caches would briefly hold a second copy of a memory-sized batch
    groups = length_groups(widths, PASS_COST) if extra is None and device.type == "cpu" else []
    if len(groups) > 1:
        parts, lasts = [], []
        for group in groups:
            last, cache, mask = _prefill_rows(model, seqs, group, prefix, pad_id, None)
            if not _mergeable(cache):
                break
            parts.append((group, cache, mask))
            lasts.append(last)
        else:
            order = torch.tensor([i for group in groups for i in group], device=device)
            logits = torch.cat(lasts)[order.argsort()]                       # (batch, vocab)
            cache, mask = _merge_left_padded(parts, prefix.length)
            return logits, cache, mask, lengths[:, None]
    last, cache, mask = _prefill_rows(model, seqs, everything, prefix, pad_id, extra)
    return last, cache, mask, lengths[:, None]


def fit_batch_size(model, longest: int, new_tokens: int = 0, fallback: int = 16,
                   share: float = 0.5, cap: int = 1024) -> int:
    """Prompts per batch: on CUDA the most whose KV cache, one layer's activations and the
    float32 logits for `longest + new_tokens` tokens fit into `share` of the free GPU memory
    (1 to `cap`); on other devices `fallback` (a CPU gains little from bigger batches)."""
    dev = model_device(model)
    if dev.type != "cuda":
        return fallback
    free, _ = torch.cuda.mem_get_info(dev)
    cfg = model.config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    inter = getattr(cfg, "intermediate_size", None) or 4 * cfg.hidden_size
    nbytes = next(model.parameters()).element_size()
    tokens = longest + new_tokens
    kv = 2 * cfg.num_hidden_layers * kv_heads * head_dim * tokens * nbytes
    act = tokens * (4 * cfg.hidden_size + 2 * inter + heads * tokens) * nbytes
    logits = cfg.vocab_size * 4 * (1 + new_tokens)
    return max(1, min(cap, int(share * free / (kv + act + logits))))
