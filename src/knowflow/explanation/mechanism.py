"""Mechanism of one answer: attention knockout from the answer positions (Geva et al. 2023).

Per layer (a window of `window` layers centred on it), the answer positions (the last prompt
token and the answer's tokens but its last, the positions that predict the answer's tokens)
are stopped from attending to the whole context, or to the top sentence only; the effect is
the change in the answer's teacher-forced log-probability. Then the heads that attend most to
the top sentence (from the one-pass attention) are knocked out one at a time, each in its own
layer only.

This is the attention-edge knockout of `knowflow probe knockout` (`probes.intercept`: a plan
that blocks different edges in different batch rows, heads and layers) extended from one
query position to the answer's positions. Only edges from those positions are cut, so the
prompt up to its last token computes what the unmodified model computes: it runs once, and
every variant continues from a copy of its KV cache with the answer positions alone.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.lens.arch import arch_of
from knowflow.probes.common import cache_kwargs, device_of, output_cache, window
from knowflow.probes.intercept import AttentionPlan, intercepted


@dataclass(frozen=True)
class Cut:
    """One variant: in each listed layer, the heads (None: all) whose edges from the answer
    positions to `keys` are cut."""

    layers: tuple[int, ...]
    keys: tuple[int, ...]
    heads: tuple[int, ...] | None = None


def _blocks(chunk: Sequence[Cut], n_layers: int, n_heads: int, q_len: int, k_len: int
            ) -> dict[int, torch.Tensor]:
    """Per layer, (rows, heads, q_len, k_len) bool: True where an edge is cut."""
    out: dict[int, torch.Tensor] = {}
    for layer in range(n_layers):
        rows = [r for r, cut in enumerate(chunk) if layer in cut.layers and cut.keys]
        if not rows:
            continue
        block = torch.zeros(len(chunk), n_heads, q_len, k_len, dtype=torch.bool)
        for r in rows:
            heads = list(chunk[r].heads) if chunk[r].heads is not None else list(range(n_heads))
            keys = torch.tensor(chunk[r].keys, dtype=torch.long)
            block[r][torch.tensor(heads)[:, None], :, keys[None, :]] = True
        out[layer] = block
    return out


@torch.no_grad()
def answer_logprobs(model, prompt_ids: list[int], answer_ids: list[int], cuts: Sequence[Cut],
                    batch_size: int = 32) -> torch.Tensor:
    """The answer's summed log-probability after the prompt under each cut: (cuts,) float64.
    A cut with no keys is the unmodified model."""
    arch = arch_of(model)
    dev = device_of(model)
    start = len(prompt_ids) - 1                         # the first answer position
    ids = torch.tensor([prompt_ids + answer_ids], device=dev)           # (1, seq)
    q_len = len(answer_ids)
    queries = ids[:, start:start + q_len]                               # (1, q_len)
    targets = ids[0, start + 1:start + 1 + q_len]                       # (q_len,)
    out = []
    with intercepted(model) as layer_of:
        first = model(input_ids=ids[:, :start], use_cache=True, logits_to_keep=1,
                      knowflow_plan=AttentionPlan(layer_of=layer_of))
        prefix = output_cache(first)
        for lo in range(0, len(cuts), batch_size):
            chunk = cuts[lo:lo + batch_size]
            n = len(chunk)
            cache = copy.deepcopy(prefix)
            cache.batch_repeat_interleave(n)
            block = _blocks(chunk, arch.n_layers, arch.n_heads, q_len, start + q_len)
            plan = AttentionPlan(block={k: v.to(dev) for k, v in block.items()},
                                 layer_of=layer_of)
            logits = model(input_ids=queries.expand(n, -1),
                           position_ids=torch.arange(start, start + q_len, device=dev
                                                     ).expand(n, -1),
                           knowflow_plan=plan, **cache_kwargs(model, cache)).logits
            logp = torch.log_softmax(logits.float(), dim=-1)             # (n, q_len, vocab)
            picked = logp.gather(-1, targets.expand(n, -1)[..., None])[..., 0]  # (n, q_len)
            out.append(picked.sum(-1).double().cpu())
    return torch.cat(out)


def mechanism(model, prompt_ids: list[int], answer_ids: list[int], context_keys: list[int],
              top_keys: list[int], head_mass: torch.Tensor, window_size: int, n_heads: int,
              batch_size: int = 32) -> dict:
    """Per-layer knockout effects (context, top sentence) and the top heads' effects;
    `head_mass` (layers, heads) is each head's attention to the top sentence."""
    arch = arch_of(model)
    size = min(window_size, arch.n_layers)
    spans = [window(centre, size, arch.n_layers) for centre in range(arch.n_layers)]
    layer_sets = [tuple(range(lo, hi + 1)) for lo, hi in spans]
    flat = head_mass.flatten()
    order = flat.argsort(descending=True)[:min(n_heads, len(flat))].tolist()
    heads = [(i // arch.n_heads, i % arch.n_heads) for i in order]
    cuts = [Cut((), ())]
    cuts += [Cut(ls, tuple(context_keys)) for ls in layer_sets]
    cuts += [Cut(ls, tuple(top_keys)) for ls in layer_sets]
    cuts += [Cut((layer,), tuple(top_keys), (head,)) for layer, head in heads]
    lps = answer_logprobs(model, prompt_ids, answer_ids, cuts, batch_size)
    base = float(lps[0])
    n = arch.n_layers
    return {
        "logprob": base, "window": size,
        "layers": [{"layer": layer, "context": float(lps[1 + layer]) - base,
                    "top_sentence": float(lps[1 + n + layer]) - base}
                   for layer in range(n)],
        "heads": [{"layer": layer, "head": head, "attention": float(head_mass[layer, head]),
                   "effect": float(lps[1 + 2 * n + i]) - base}
                  for i, (layer, head) in enumerate(heads)]}
