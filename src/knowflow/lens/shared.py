"""Scoring many prompts that begin like one prompt, whose keys and values run once.

explain scores an item's answer after hundreds of ablated prompts: the item's prompt with
some sentences removed. Each one begins with the item's full prompt up to its first removed
sentence. `share_prompt` runs the full prompt once and keeps its keys and values (per layer,
(1, kv heads, tokens, head dim)); `score_shared` then scores requests over their token trie
(`lens._trie`) with the trie's first nodes, the full prompt's tokens every request shares
with it, taken from those keys and values instead of computed. So a request costs the
forward pass of its tokens after the point where it leaves the full prompt (and after the
point where it leaves the request before it in sorted order), and the requests of many
calls (rounds of ablations, the top-k drops, the source verdict's scores) share one pass
over the prompt. Scores equal `score_continuations(..., strategy="trie")`'s up to float
rounding (tests/lens/test_shared.py).

Requests go in sorted order, in passes of at most `max_nodes` new trie nodes (each pass
holds its nodes' keys and values, `nodes_for_budget`), so memory is bounded by the shared
prompt plus one pass whatever the number of requests. A model the trie strategy does not run
on (or not yet checked: its first trie call checks it, `scorer._score_trie`) is scored by
`score_continuations` instead, from scratch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from knowflow.lens._trie import KV, build_trie, run_trie
from knowflow.lens.arch import arch_of
from knowflow.lens.batching import model_device
from knowflow.lens.memory import Shape, inference_bytes, largest_batch
from knowflow.lens.prefix import Prefix, forward
from knowflow.lens.scorer import Score, encode_continuations, score_continuations

NODES = 32768        # new trie nodes per pass by default (explain's `score_tokens`)
CHECK_TOKENS = 32    # a model's first shared prompt: its trie scores checked on this many


@dataclass(frozen=True)
class SharedPrompt:
    """A prompt's tokens and their keys and values: per layer (1, kv heads, tokens, dim)."""

    tokens: tuple[int, ...]
    kv: KV

    def prefix(self, length: int) -> Prefix:
        """A `Prefix` (a KV cache a forward pass continues from) of the first `length`
        tokens, a copy: a pass that starts there need not run them again."""
        cache = DynamicCache()
        for layer, (k, v) in enumerate(self.kv):
            cache.update(k[:, :, :length].clone(), v[:, :, :length].clone(), layer)
        return Prefix(length, cache)

    def covers(self, ids: Sequence[int]) -> int:
        """How many of `ids`' first tokens this prompt's keys and values hold."""
        return _common(self.tokens, ids)


def share_prompt(model, tokenizer, tokens: Sequence[int]) -> SharedPrompt | None:
    """Keys and values of `tokens`, one forward pass over them; None for a model the trie
    strategy does not run on (`score_shared` then scores from scratch). A model not yet
    checked is checked first (`scorer._score_trie`, on the prompt's first tokens)."""
    if not tokens:
        return None
    if getattr(model, "_knowflow_trie_ok", None) is None:
        score_continuations(model, tokenizer, [list(tokens[:CHECK_TOKENS])], [[" a"]],
                            strategy="trie")
    if getattr(model, "_knowflow_trie_ok", None) is not True:
        return None
    ids = torch.tensor([list(tokens)], device=model_device(model))          # (1, tokens)
    with torch.no_grad():
        _, cache = forward(model, last_only=True, input_ids=ids)       # the causal kernel
    layers = getattr(cache, "layers", None) or []
    kv = [(layer.keys, layer.values) for layer in layers]
    if len(kv) == arch_of(model).n_layers and all(k.shape[2] == len(tokens) for k, _ in kv):
        return SharedPrompt(tuple(tokens), kv)
    trie, _ = build_trie([], first=tokens)     # a cache of another layout: the trie's pass
    if run_trie(model, trie, {}, keep=range(len(tokens))) is None:
        return None
    return SharedPrompt(tuple(tokens), trie.kept)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def score_shared(model, tokenizer, prompts: Sequence[Sequence[int]],
                 continuations: Sequence[Sequence[str]], shared: SharedPrompt | None = None,
                 max_nodes: int = NODES) -> list[list[Score]]:
    """Each request's candidates' (summed log-probability, tokens), as `score_continuations`
    gives them; see the module docstring (no `shared`: passes over the requests alone)."""
    if getattr(model, "_knowflow_trie_ok", None) is not True:
        return _from_scratch(model, tokenizer, prompts, continuations, max_nodes)
    conts = encode_continuations(tokenizer, continuations)
    pairs = [(i, k) for i, cs in enumerate(conts) for k in range(len(cs))]
    fed = [list(prompts[i]) + conts[i][k][:-1] for i, k in pairs]
    order = sorted(range(len(pairs)), key=lambda r: fed[r])
    shared = shared or SharedPrompt((), [])
    root = shared.tokens
    out: list[list[Score | None]] = [[None] * len(cs) for cs in conts]
    batch: list[int] = []
    nodes = 0
    for n_at, r in enumerate(order):
        prev = fed[order[n_at - 1]] if n_at else []
        new = len(fed[r]) - max(_common(fed[r], prev), _common(fed[r], root))
        if batch and nodes + new > max_nodes:
            _run(model, [pairs[b] for b in batch], [fed[b] for b in batch], prompts, conts,
                 shared, out)
            batch, nodes = [], len(fed[r]) - _common(fed[r], root)
        else:
            nodes += new
        batch.append(r)
    if batch:
        _run(model, [pairs[b] for b in batch], [fed[b] for b in batch], prompts, conts,
             shared, out)
    return out        # type: ignore[return-value]


def _from_scratch(model, tokenizer, prompts: Sequence[Sequence[int]],
                  continuations: Sequence[Sequence[str]], max_nodes: int) -> list[list[Score]]:
    """`score_continuations`' trie strategy (which checks a model on its first call and falls
    back for one it does not run on), in calls of at most `max_nodes` prompt tokens."""
    out: list[list[Score]] = []
    start, total = 0, 0
    for i, p in enumerate([*prompts, None]):
        if p is None or (i > start and total + len(p) > max_nodes):
            out += score_continuations(model, tokenizer, [list(q) for q in prompts[start:i]],
                                       continuations[start:i], strategy="trie")
            start, total = i, 0
        total += len(p) if p is not None else 0
    return out


def _run(model, pairs: list[tuple[int, int]], fed: list[list[int]],
         prompts: Sequence[Sequence[int]], conts: list[list[list[int]]],
         shared: SharedPrompt, out: list[list[Score | None]]) -> None:
    """One trie pass over `fed` (request (i, k)'s prompt and candidate but its last token)
    seeded by the shared prompt's tokens up to the first scored position on them."""
    root = shared.tokens
    seeded = len(root)
    for (i, _), seq in zip(pairs, fed, strict=True):
        if _common(seq, root) >= len(prompts[i]):     # its first read lies on the root
            seeded = min(seeded, len(prompts[i]) - 1)
    seeded = max(seeded, 0)
    trie, paths = build_trie(fed, first=root[:seeded])
    wanted: dict[int, list[int]] = {}
    for (i, k), path in zip(pairs, paths, strict=True):
        for j, tok in enumerate(conts[i][k]):
            wanted.setdefault(path[len(prompts[i]) - 1 + j], []).append(tok)
    seed = [(k[:, :, :seeded], v[:, :, :seeded]) for k, v in shared.kv] if seeded else None
    got = run_trie(model, trie, wanted, seed=seed)
    if got is None:                                   # not a trie model after all
        raise RuntimeError("the trie strategy stopped running on a model it had checked")
    for (i, k), path in zip(pairs, paths, strict=True):
        out[i][k] = (sum(got[(path[len(prompts[i]) - 1 + j], tok)]
                         for j, tok in enumerate(conts[i][k])), len(conts[i][k]))


def nodes_for_budget(shape: Shape, shared_tokens: int, budget_bytes: int,
                     most: int = NODES, chunk: int = 2048, scored: int = 256) -> int:
    """The most new trie nodes a pass may hold within `budget_bytes` of activations: their
    keys and values with the shared prompt's, one chunk's working set (`chunk` nodes at most,
    attending to everything before them) and `scored` positions' logits; at least one
    chunk (whether that fits is the budget check's to say)."""
    def needed(nodes: int) -> int:
        return inference_bytes(shape, 1, min(chunk, nodes), cached=shared_tokens + nodes,
                               logit_positions=min(scored, nodes))
    return max(largest_batch(needed, budget_bytes, most), min(chunk, most))
