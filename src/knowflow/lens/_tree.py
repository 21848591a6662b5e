"""The tree strategy of `lens.scorer`: every candidate of a batch scored in its prompt's own
forward pass, prompts that share tokens packed into one row: a token trie ("radix") per row.

A row holds one or more prompts (after the run's shared prefix, `batching.Prefix`) and their
candidates, each candidate without its last token, as a trie: one node per token, and tokens
that several sequences share at the same place (a question several rows ask, the word two
candidates begin with) are one node. A 4D attention mask lets each node see the shared prefix,
its ancestors and itself, and its position id is its depth, so every candidate is scored
exactly as if it were appended to its prompt alone. Nodes whose logits score a token (each
prompt's last node, each candidate's fed tokens) sit at the end of the row and the row is
right-aligned (padding on the left), so the vocabulary projection runs for the last
`readouts` positions only (`logits_to_keep`). `trie_rows` picks the items that share a row;
`lens.scorer` checks this pass against its two-pass strategy once per model and falls back to
that if a model ignores custom 4D masks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from knowflow.lens._trie import Trie
from knowflow.lens.batching import model_device
from knowflow.lens.prefix import Prefix, forward

MIN_SHARE = 2     # tokens an item must share with the one before it to join its row
ROW_NODES = 128   # most nodes in a shared row (its attention is dense: rows stay short)


def trie_rows(prompts: Sequence[Sequence[int]], conts: Sequence[list[list[int]]], n_prefix: int,
              min_share: int = MIN_SHARE, max_nodes: int = ROW_NODES) -> list[list[int]]:
    """Item indices grouped into rows. Taken in the sorted order of their prompts (after the
    shared prefix), an item joins the row of the one before it when their prompts begin with
    the same `min_share` tokens or more and the row stays within `max_nodes` nodes; every
    other item starts a row of its own."""
    order = sorted(range(len(prompts)), key=lambda i: tuple(prompts[i][n_prefix:]))
    rows: list[list[int]] = []
    nodes = 0
    for i in order:
        own = tree_length(prompts[i], conts[i]) - n_prefix
        if rows:
            a, b = prompts[rows[-1][-1]], prompts[i]
            lcp = n_prefix
            while lcp < min(len(a), len(b)) and a[lcp] == b[lcp]:
                lcp += 1
            if lcp - n_prefix >= min_share and nodes + own - (lcp - n_prefix) <= max_nodes:
                rows[-1].append(i)
                nodes += own - (lcp - n_prefix)
                continue
        rows.append([i])
        nodes = own
    return rows


def row_length(prompts: Sequence[Sequence[int]], conts: Sequence[list[list[int]]],
               n_prefix: int) -> int:
    """Nodes of the row of these items (for sorting rows into batches)."""
    return len(Trie.of([p[n_prefix:] for p in prompts], conts).tokens)


def tree_length(prompt: list[int], conts: list[list[int]]) -> int:
    """Tokens of one item's own row without shared nodes: the prompt and every candidate but
    its last token (an upper bound of its trie's nodes)."""
    return len(prompt) + sum(len(c) - 1 for c in conts)


@torch.no_grad()
def score_batch_tree(model, prompts: list[list[int]], conts: list[list[list[int]]],
                     prefix: Prefix, pad_id: int, rows: list[list[int]] | None = None
                     ) -> list[list[tuple[float, int]]]:
    """(summed log-probability, token count) of every candidate of every prompt, one pass;
    `rows` (indices into `prompts`) packs items into shared rows (default: a row each)."""
    device = model_device(model)
    n = prefix.length
    rows = rows if rows is not None else [[b] for b in range(len(prompts))]
    tries = [Trie.of([prompts[i][n:] for i in r], [conts[i] for i in r]) for r in rows]
    orders = [t.order() for t in tries]
    width = max(len(t.tokens) for t in tries)
    keep = max(k for _, k in orders)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)           # (rows, width)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    allow = torch.zeros((len(rows), width, n + width), dtype=torch.bool)
    allow[:, :, :n] = True
    diag = torch.arange(width)
    allow[:, diag, n + diag] = True       # every query sees itself (a padding one: unread)
    reads = []                            # (row, position in the kept logits, token, item, cand)
    for b, (trie, (order, _)) in enumerate(zip(tries, orders, strict=True)):
        slot = {node: width - len(order) + s for s, node in enumerate(order)}
        at = torch.tensor([slot[v] for v in order], dtype=torch.long)
        ids[b, at] = torch.tensor([trie.tokens[v] for v in order], dtype=torch.long)
        pos[b, at] = torch.tensor([n + trie.depth[v] for v in order], dtype=torch.long)
        sees = torch.zeros((len(order), len(order)), dtype=torch.bool)   # (nodes, nodes)
        for v in range(len(order)):       # a parent is numbered before its children
            if trie.parent[v] >= 0:
                sees[v] = sees[trie.parent[v]]
            sees[v, v] = True             # the node and its ancestors
        slots = torch.tensor([slot[v] for v in range(len(order))], dtype=torch.long)
        allow[b, slots[:, None], n + slots[None, :]] = sees
        reads += [(b, slot[v] - (width - keep), t, rows[b][i], c) for v, t, i, c in trie.reads]
    dtype = next(model.parameters()).dtype
    dtype = dtype if dtype.is_floating_point else torch.float32
    mask = torch.zeros(allow.shape, dtype=dtype).masked_fill(~allow, torch.finfo(dtype).min)
    logits, _ = forward(model, past=prefix.expand(len(rows)), keep=keep,
                        input_ids=ids.to(device), attention_mask=mask[:, None].to(device),
                        position_ids=pos.to(device))
    logp = torch.log_softmax(logits.float(), dim=-1)                    # (rows, keep, vocab)
    r, at, tok, _, _ = (torch.tensor(col, device=logp.device) for col in zip(*reads, strict=True))
    got = logp[r, at, tok].tolist()                                      # (reads,)
    sums = [[0.0] * len(cs) for cs in conts]
    for value, (_, _, _, i, c) in zip(got, reads, strict=True):
        sums[i][c] += value
    return [[(s, len(c)) for s, c in zip(ss, cs, strict=True)] for ss, cs in zip(sums, conts,
                                                                                strict=True)]
