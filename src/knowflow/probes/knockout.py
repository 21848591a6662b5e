"""Attention-edge knockout (Geva et al. 2023, "Dissecting Recall of Factual Associations").

To see where information reaches the prediction, cut the attention edges from the last
position to a set of source positions (the subject tokens, the other non-subject tokens, the
last token itself) in a window of k consecutive layers around layer l, and measure the
relative change in the probability of the model's original prediction,
(p_knocked - p) / p. Sweeping l over all layers shows *when* each source feeds the answer.

The sweep is batched: every prompt is replicated across its (source set, window) variants in
one batch, and the attention function blocks different edges in different rows and layers
(see probes.intercept). Because only edges *from the last position* are cut, every earlier
position computes exactly what it computes in the unmodified model; with `shared_prefix` the
prompt prefix runs once, its key/value cache is shared by all variants, and each variant
computes only the last position. `shared_prefix=False` replicates the whole prompt instead
(the same numbers up to float rounding; kept as a reference).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.lens.arch import arch_of
from knowflow.probes.common import (
    cache_kwargs,
    check_heads,
    check_layers,
    device_of,
    output_cache,
    window,
)
from knowflow.probes.examples import ProbeExample
from knowflow.probes.intercept import AttentionPlan, intercepted
from knowflow.probes.spans import Located, check_source
from knowflow.probes.sweep import Keyed, layer_curves, sweep
from knowflow.runs import Progress


@dataclass(frozen=True)
class KnockoutConfig:
    window: int = 9                                   # k consecutive layers per knockout
    sources: tuple[str, ...] = ("subject", "non_subject", "last")
    heads: tuple[int, ...] = ()                       # heads to cut; empty = all heads
    layers: tuple[int, ...] = ()                      # window centres; empty = every layer
    batch_size: int = 128                             # variant rows per forward pass
    shared_prefix: bool = True                        # share the prompt prefix's KV cache
    known_only: bool = True                           # probe only facts the model gets right
    spare_first: bool = False                         # never cut edges to position 0 (a sink)


# A variant: the positions the last position may no longer attend to, in layers [lo, hi].
Variant = tuple[tuple[int, ...], tuple[int, int] | None]


def _block_tensors(chunk: Sequence[Variant], n_layers: int, n_heads: int, heads: Sequence[int],
                   q_len: int, k_len: int, q_row: int) -> dict[int, torch.Tensor]:
    """Per layer, (rows, heads|1, q_len, k_len) bool: True where an edge is cut."""
    head_idx = torch.tensor(list(heads) or [0], dtype=torch.long)
    n_head_dim = n_heads if heads else 1
    blocks: dict[int, torch.Tensor] = {}
    for layer in range(n_layers):
        rows = [r for r, (pos, win) in enumerate(chunk)
                if pos and win is not None and win[0] <= layer <= win[1]]
        if not rows:
            continue
        block = torch.zeros(len(chunk), n_head_dim, q_len, k_len, dtype=torch.bool)
        for r in rows:
            pos = torch.tensor(chunk[r][0], dtype=torch.long)
            block[r, :, q_row, :][head_idx[:, None], pos[None, :]] = True
        blocks[layer] = block
    return blocks


def knockout_probs(model, loc: Located, target: int, variants: Sequence[Variant],
                   heads: Sequence[int] = (), batch_size: int = 128, shared_prefix: bool = True,
                   layer_of: dict[int, int] | None = None) -> torch.Tensor:
    """Probability of token `target` at the last position under each variant: (variants,)."""
    logits = knockout_logits(model, loc, variants, heads, batch_size, shared_prefix, layer_of)
    return logits.softmax(-1)[:, target]


@torch.no_grad()
def knockout_logits(model, loc: Located, variants: Sequence[Variant], heads: Sequence[int] = (),
                    batch_size: int = 128, shared_prefix: bool = True,
                    layer_of: dict[int, int] | None = None) -> torch.Tensor:
    """Next-token logits at the last position under each variant: (variants, vocab).
    Call inside `intercepted(model)`; `layer_of` is the map it yields."""
    arch = arch_of(model)
    dev = device_of(model)
    layer_of = layer_of or {id(a): i for i, a in enumerate(arch.attn)}
    ids = torch.tensor([loc.input_ids], dtype=torch.long, device=dev)  # (1, seq)
    last = loc.last
    shared = shared_prefix and last > 0
    if shared:
        out = model(input_ids=ids[:, :last], use_cache=True,
                    knowflow_plan=AttentionPlan(layer_of=layer_of), logits_to_keep=1)
        prefix = output_cache(out)
    out = []
    for start in range(0, len(variants), batch_size):
        chunk = variants[start: start + batch_size]
        n = len(chunk)
        if shared:
            cache = copy.deepcopy(prefix)
            cache.batch_repeat_interleave(n)
            kwargs = dict(input_ids=ids[:, last:].expand(n, 1),
                          position_ids=torch.full((n, 1), last, device=dev),
                          **cache_kwargs(model, cache))
            q_len, q_row = 1, 0
        else:
            kwargs = dict(input_ids=ids.expand(n, -1))
            q_len, q_row = last + 1, last
        block = _block_tensors(chunk, arch.n_layers, arch.n_heads, heads, q_len, last + 1, q_row)
        plan = AttentionPlan(block={k: v.to(dev) for k, v in block.items()}, layer_of=layer_of)
        logits = model(**kwargs, knowflow_plan=plan, logits_to_keep=1).logits[:, -1]
        out.append(logits.float().cpu())  # (n, vocab)
    return torch.cat(out)


def knockout(model, tokenizer, examples: Sequence[ProbeExample],
             cfg: KnockoutConfig = KnockoutConfig(), progress: Progress | None = None
             ) -> list[dict]:
    """One record per (example, source set, window centre): the relative change in the
    probability of the model's own prediction when the last position cannot attend to the
    source set in the window's layers."""
    arch = arch_of(model)
    centres = check_layers("window", cfg.window, cfg.layers, arch.n_layers)
    check_heads(cfg.heads, arch.n_heads)
    for source in cfg.sources:
        check_source(source)

    def variants(loc: Located) -> list[Keyed]:
        out = []
        for source in cfg.sources:
            pos = tuple(p for p in loc.positions(source) if p or not cfg.spare_first)
            for centre in centres:
                win = window(centre, cfg.window, arch.n_layers)
                out.append(({"source": source, "layer": centre, "window": list(win),
                             "n_blocked": len(pos), "heads": list(cfg.heads) or "all"},
                            (pos, win)))
        return out

    with intercepted(model) as layer_of:
        def probs(loc: Located, target: int, chosen: list[Variant]) -> torch.Tensor:
            return knockout_probs(model, loc, target, chosen, cfg.heads, cfg.batch_size,
                                  cfg.shared_prefix, layer_of)

        return sweep(model, tokenizer, examples, cfg.known_only, "knockout", ((), None),
                     variants, probs, progress)


def summarize_knockout(records: Sequence[dict], n_layers: int | None = None) -> dict:
    """Per source set: the mean relative change per layer (window centre) and the layer where
    it is most negative."""
    return layer_curves(records, lambda r: r["source"], n_layers)
