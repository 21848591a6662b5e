"""Continuations of many prompts that share prefixes, scored over their token trie.

The ablated prompts of one item differ only in which sentences they keep, so sorted
lexicographically, consecutive prompts share every token up to the first sentence in which
they differ. The prompts (each followed by its continuation but its last token) are merged
into one token trie: a node per distinct prefix, its position id the node's depth. Every node
is computed once: the nodes, in depth-first order, run through the model in chunks of
`chunk` tokens, one chunk per forward pass with a tree attention mask in which a token
attends to its ancestors and itself only (as in tree-based speculative decoding). A chunk's
keys are its own nodes and the ancestors of its first node that lie before it (in depth-first
order every earlier ancestor of a chunk's node is one of those), gathered from the keys and
values of the chunks before. A token thus sees exactly the tokens of its own prompt at their
own positions, so each score equals the prompt run alone up to float rounding; only the
positions whose next token is scored are projected to the vocabulary.

`score_trie` checks itself once per model against `evaluate.loglik.score_continuations` and
uses that scorer instead for a model whose cache is not a plain `DynamicCache` or that
ignores custom 4D attention masks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from knowflow.evaluate.loglik import check_tolerance, encode_continuations, score_continuations
from knowflow.evaluate.tree import Trie
from knowflow.models.batching import cache_keyword, model_device, output_cache

CHUNK = 256          # trie nodes per forward pass (1 CPU thread: 256 was fastest)
CHECK_PROMPTS = 3    # prompts of a model's first call also scored one at a time


def build_trie(seqs: Sequence[Sequence[int]]) -> tuple[Trie, list[list[int]]]:
    """(the token trie of `seqs`, per sequence the node of each of its tokens). The sequences
    go in sorted, so the nodes are numbered in depth-first (lexicographic) order."""
    trie = Trie()
    paths: list[list[int]] = [[] for _ in seqs]
    for i in sorted(range(len(seqs)), key=lambda j: list(seqs[j])):
        paths[i] = trie.path(-1, seqs[i])
    return trie, paths


def ancestors(trie: Trie, node: int) -> list[int]:
    """The nodes above `node`, root first."""
    out = []
    while trie.parent[node] >= 0:
        node = trie.parent[node]
        out.append(node)
    return out[::-1]


def chunk_mask(trie: Trie, start: int, end: int) -> tuple[list[int], torch.Tensor]:
    """(chain, allow): the ancestors of node `start` (the keys before the chunk, (A,)) and
    which keys each of the chunk's nodes sees, (end - start, A + end - start) bool: its
    ancestors and itself."""
    chain = ancestors(trie, start)
    width = len(chain)
    allow = torch.zeros((end - start, width + end - start), dtype=torch.bool)
    for x in range(start, end):
        up = trie.parent[x]
        if up >= start:
            allow[x - start] = allow[up - start]
        elif up >= 0:              # its outside ancestors: the chain down to its parent
            allow[x - start, :trie.depth[up] + 1] = True
        allow[x - start, width + x - start] = True
    return chain, allow


def _plain_cache_class():
    from transformers.cache_utils import DynamicCache, DynamicLayer

    return DynamicCache, DynamicLayer


@torch.no_grad()
def _run_trie(model, trie: Trie, wanted: dict[int, list[int]], chunk: int
              ) -> dict[tuple[int, int], float] | None:
    """Log-probabilities {(node, token): logp} of each token in `wanted[node]` after the
    prefix ending at `node`; None when the model's cache is not a plain `DynamicCache`."""
    cache_cls, layer_cls = _plain_cache_class()
    device = model_device(model)
    dtype = next(model.parameters()).dtype
    dtype = dtype if dtype.is_floating_point else torch.float32
    n = len(trie.tokens)
    ids = torch.tensor(trie.tokens, dtype=torch.long)                   # (nodes,)
    depth = torch.tensor(trie.depth, dtype=torch.long)                  # (nodes,)
    store: list[tuple[torch.Tensor, torch.Tensor]] = []   # per layer (1, kv heads, nodes, dim)
    out: dict[tuple[int, int], float] = {}
    for start in range(0, n, chunk):
        end = min(n, start + chunk)
        chain, allow = chunk_mask(trie, start, end)
        mask = torch.zeros(allow.shape, dtype=dtype).masked_fill(~allow, torch.finfo(dtype).min)
        at = torch.tensor(chain, dtype=torch.long, device=device)        # (A,)
        past = cache_cls(ddp_cache_data=[(k.index_select(2, at), v.index_select(2, at))
                                         for k, v in store]) if chain else None
        rows = [x for x in range(start, end) if x in wanted]
        keep = torch.tensor([x - start for x in rows] or [end - start - 1], device=device)
        kwargs = {"input_ids": ids[None, start:end].to(device),          # (1, C)
                  "position_ids": depth[None, start:end].to(device),     # (1, C)
                  "attention_mask": mask[None, None].to(device),         # (1, 1, C, A + C)
                  "use_cache": True, "logits_to_keep": keep}
        if past is not None:
            kwargs[cache_keyword(model)] = past
        res = model(**kwargs)
        cache = output_cache(res)
        if type(cache) is not cache_cls or any(type(la) is not layer_cls for la in cache.layers):
            return None
        if not store:
            store = [(la.keys.new_zeros((*la.keys.shape[:2], n, la.keys.shape[-1])),
                      la.values.new_zeros((*la.values.shape[:2], n, la.values.shape[-1])))
                     for la in cache.layers]
        for (k, v), la in zip(store, cache.layers, strict=True):         # keys (1, kvh, A+C, d)
            k[:, :, start:end] = la.keys[:, :, len(chain):]
            v[:, :, start:end] = la.values[:, :, len(chain):]
        if rows:
            logp = torch.log_softmax(res.logits[0].float(), dim=-1)     # (rows, vocab)
            pairs = [(r, x, tok) for r, x in enumerate(rows) for tok in wanted[x]]
            got = logp[torch.tensor([r for r, _, _ in pairs], device=device),
                       torch.tensor([t for _, _, t in pairs], device=device)].tolist()
            out.update({(x, tok): v for (_, x, tok), v in zip(pairs, got, strict=True)})
    return out


def score_trie(model, tokenizer, prompts: Sequence[list[int]], continuations: Sequence[str],
               chunk: int = CHUNK) -> list[tuple[float, int]]:
    """(summed log-probability, token count) of each prompt's continuation, as
    `score_continuations(model, tokenizer, prompts, [[c] for c in continuations])` gives it,
    computed over the prompts' token trie (see the module docstring)."""
    conts = [c[0] for c in encode_continuations(tokenizer, [[c] for c in continuations])]
    fed = [list(p) + c[:-1] for p, c in zip(prompts, conts, strict=True)]
    trie, paths = build_trie(fed)
    wanted: dict[int, list[int]] = {}
    for p, c, path in zip(prompts, conts, paths, strict=True):
        for j, tok in enumerate(c):        # c[j] is predicted at the prompt's position len - 1 + j
            wanted.setdefault(path[len(p) - 1 + j], []).append(tok)
    ok = getattr(model, "_knowflow_trie_ok", None)
    got = _run_trie(model, trie, wanted, chunk) if ok is not False else None
    if got is None:
        model._knowflow_trie_ok = False
        return [s[0] for s in score_continuations(model, tokenizer, prompts,
                                                  [[c] for c in continuations])]
    out = [(sum(got[(path[len(p) - 1 + j], tok)] for j, tok in enumerate(c)), len(c))
           for p, c, path in zip(prompts, conts, paths, strict=True)]
    if ok is None:   # the prompts last in depth-first order: most tokens they do not see
        few = sorted(range(len(prompts)), key=lambda i: -paths[i][-1])[:CHECK_PROMPTS]
        ref = score_continuations(model, tokenizer, [prompts[i] for i in few],
                                  [[continuations[i]] for i in few], share_prefix=False)
        tol = check_tolerance(model)
        model._knowflow_trie_ok = all(abs(out[i][0] - r[0][0]) <= tol
                                      for i, r in zip(few, ref, strict=True))
        if not model._knowflow_trie_ok:
            return [s[0] for s in score_continuations(model, tokenizer, prompts,
                                                      [[c] for c in continuations])]
    return out
