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
(the same numbers up to float rounding; kept as a reference). `cut_scores` is the one
knockout: explain's mechanism level runs it from an answer's positions (explanation.mechanism).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from knowflow.config import option
from knowflow.lens.arch import arch_of
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.batching import model_device
from knowflow.lens.memory import ROWS_MEMORY_HELP, check_max_memory, prediction_rows, prompt_rows
from knowflow.lens.prefix import Prefix
from knowflow.probes.common import check_heads, check_layers, window
from knowflow.probes.examples import ProbeExample
from knowflow.probes.spans import Located, check_source
from knowflow.probes.sweep import Keyed, layer_curves, sweep
from knowflow.store.run_folder import Progress


@dataclass(frozen=True)
class KnockoutConfig:
    RENAMED = {"sources": "source"}  # keys of earlier versions

    window: int = option(9, "Layers per knockout window.")  # k consecutive layers
    source: tuple[str, ...] = option(("subject", "non_subject", "last"), "Source set to block "
                                     "(repeatable): subject, non_subject, last, relation, "
                                     "first, subject_last, pos:i,j ...")
    heads: tuple[int, ...] = option((), "Heads to block, e.g. 0,3 (default: all).")
    layers: tuple[int, ...] = ()                      # window centres; empty = every layer
    batch_size: int = option(128, ge=1)               # variant rows per forward pass
    max_memory: float | None = option(None, ROWS_MEMORY_HELP)  # fewer rows where 128 won't fit
    shared_prefix: bool = True                        # share the prompt prefix's KV cache
    known_only: bool = option(True, "Also probe facts the model gets wrong.", flag="all")
    spare_first: bool = False                         # never cut edges to position 0 (a sink)

    def validate(self) -> None:
        check_max_memory(self.max_memory)


@dataclass(frozen=True)
class Cut:
    """One knockout variant: in each listed layer, the heads (None: all) whose edges from the
    query positions to `keys` are cut. No layers or no keys: the unmodified model."""

    layers: tuple[int, ...]
    keys: tuple[int, ...]
    heads: tuple[int, ...] | None = None


def _blocks(chunk: Sequence[Cut], n_layers: int, n_heads: int, q_rows: slice, q_len: int,
            k_len: int) -> dict[int, torch.Tensor]:
    """Per layer, (rows, heads|1, q_len, k_len) bool: True where an edge is cut (one head
    column, broadcast over heads, when no cut in the chunk names heads)."""
    width = n_heads if any(c.heads is not None for c in chunk) else 1
    out: dict[int, torch.Tensor] = {}
    for layer in range(n_layers):
        rows = [r for r, cut in enumerate(chunk) if layer in cut.layers and cut.keys]
        if not rows:
            continue
        block = torch.zeros(len(chunk), width, q_len, k_len, dtype=torch.bool)
        for r in rows:
            heads = torch.tensor(chunk[r].heads if chunk[r].heads is not None
                                 else range(width), dtype=torch.long)
            keys = torch.tensor(chunk[r].keys, dtype=torch.long)
            block[r][heads[:, None], q_rows, keys[None, :]] = True
        out[layer] = block
    return out


@torch.no_grad()
def cut_scores(model, ids: Sequence[int], start: int, cuts: Sequence[Cut],
               score: Callable[[torch.Tensor], torch.Tensor], layer_of: dict[int, int],
               batch_size: int = 128, shared_prefix: bool = True, keep: int | None = None
               ) -> torch.Tensor:
    """The one attention-edge knockout: run `ids` once per cut, with the cut's edges from the
    query positions `start..` cut, and `score` each batch's next-token logits (n, positions,
    vocab; the last `keep` positions, all queries when None). Only edges from the queries are
    cut, so with `shared_prefix` the tokens before `start` run once (lens.prefix) and each
    cut recomputes the queries alone. Call inside `intercepted(model)` (`layer_of`)."""
    arch = arch_of(model)
    x = torch.tensor([list(ids)], dtype=torch.long, device=model_device(model))  # (1, seq)
    shared = shared_prefix and start > 0
    if shared:
        prefix = Prefix.run(model, x[:, :start], knowflow_plan=AttentionPlan(layer_of=layer_of))
    q_len = x.shape[1] - start
    out = []
    for lo in range(0, len(cuts), batch_size):
        chunk = cuts[lo:lo + batch_size]
        n = len(chunk)
        if shared:
            kwargs = dict(input_ids=x[:, start:].expand(n, -1), **prefix.feed(model, n, q_len))
            rows, width = slice(0, q_len), q_len
        else:
            kwargs = dict(input_ids=x.expand(n, -1))
            rows, width = slice(start, None), x.shape[1]
        block = _blocks(chunk, arch.n_layers, arch.n_heads, rows, width, x.shape[1])
        plan = AttentionPlan(block={k: v.to(x.device) for k, v in block.items()},
                             layer_of=layer_of)
        if keep is not None:
            kwargs["logits_to_keep"] = keep
        out.append(score(model(**kwargs, knowflow_plan=plan).logits))
        # the batch's copy of the prefix cache goes now, not when the next batch's copy has
        # been made beside it (that held two batches' caches: twice the estimated peak)
        del kwargs, plan
    return torch.cat(out)


# A probe variant: the positions the last position may no longer attend to, in layers [lo, hi].
KnockoutVariant = tuple[tuple[int, ...], tuple[int, int] | None]


def knockout_probs(model, loc: Located, target: int, variants: Sequence[KnockoutVariant],
                   heads: Sequence[int] = (), batch_size: int = 128, shared_prefix: bool = True,
                   layer_of: dict[int, int] | None = None) -> torch.Tensor:
    """Probability of token `target` at the last position under each variant: (variants,)."""
    logits = knockout_logits(model, loc, variants, heads, batch_size, shared_prefix, layer_of)
    return logits.softmax(-1)[:, target]


def knockout_logits(model, loc: Located, variants: Sequence[KnockoutVariant],
                    heads: Sequence[int] = (), batch_size: int = 128, shared_prefix: bool = True,
                    layer_of: dict[int, int] | None = None) -> torch.Tensor:
    """Next-token logits at the last position under each variant: (variants, vocab).
    Call inside `intercepted(model)`; `layer_of` is the map it yields."""
    layer_of = layer_of or {id(a): i for i, a in enumerate(arch_of(model).attn)}
    cuts = [Cut(tuple(range(win[0], win[1] + 1)) if win is not None else (), tuple(pos),
                tuple(heads) or None) for pos, win in variants]
    return cut_scores(model, loc.input_ids[:loc.last + 1], loc.last, cuts,
                      lambda logits: logits[:, -1].float().cpu(),  # (n, vocab)
                      layer_of, batch_size, shared_prefix, keep=1)


def knockout(model, tokenizer, examples: Sequence[ProbeExample],
             cfg: KnockoutConfig = KnockoutConfig(), progress: Progress | None = None
             ) -> list[dict]:
    """One record per (example, source set, window centre): the relative change in the
    probability of the model's own prediction when the last position cannot attend to the
    source set in the window's layers."""
    arch = arch_of(model)
    centres = check_layers("window", cfg.window, cfg.layers, arch.n_layers)
    check_heads(cfg.heads, arch.n_heads)
    for source in cfg.source:
        check_source(source)

    def variants(loc: Located) -> list[Keyed]:
        out = []
        for source in cfg.source:
            pos = tuple(p for p in loc.positions(source) if p or not cfg.spare_first)
            for centre in centres:
                win = window(centre, cfg.window, arch.n_layers)
                out.append(({"source": source, "layer": centre, "window": list(win),
                             "n_blocked": len(pos), "heads": list(cfg.heads) or "all"},
                            (pos, win)))
        return out

    predict_batch = 16
    if cfg.max_memory is not None:   # refused here, before any model work, where a row won't fit
        longest = max(len(tokenizer(ex.prompt)["input_ids"]) for ex in examples)
        prompt_rows(model, longest, cfg.batch_size, cfg.max_memory)
        predict_batch = prediction_rows(model, longest, predict_batch, cfg.max_memory)
    with intercepted(model) as layer_of:
        def probs(loc: Located, target: int, chosen: list[KnockoutVariant]) -> torch.Tensor:
            rows = prompt_rows(model, loc.last + 1, cfg.batch_size, cfg.max_memory)
            return knockout_probs(model, loc, target, chosen, cfg.heads, rows,
                                  cfg.shared_prefix, layer_of)

        return sweep(model, tokenizer, examples, cfg.known_only, "knockout", ((), None),
                     variants, probs, progress, predict_batch)


def summarize_knockout(records: Sequence[dict], n_layers: int | None = None) -> dict:
    """Per source set: the mean relative change per layer (window centre) and the layer where
    it is most negative."""
    return layer_curves(records, lambda r: r["source"], n_layers)
