"""The token trie of many sequences, and the one-pass trie strategy of `lens.scorer`:
continuations of many prompts that share prefixes, scored over their token trie.

The ablated prompts of one item differ only in which sentences they keep, so sorted
lexicographically, consecutive prompts share every token up to the first sentence in which
they differ. The prompts (each followed by its continuation but its last token) are merged
into one token trie: a node per distinct prefix, computed once, its position id its depth.
Inserted in sorted order, the nodes are numbered
depth-first, so the trie is a set of chains (each prompt's nodes after the point where it
leaves the prompts before it, numbered consecutively) and a node's ancestors are the
ancestors of its chain's first node followed by its chain up to itself.

The nodes run through the model in one forward pass (chunks of `chunk` nodes for a larger
trie, each layer's keys and values kept for the chunks after), packed in one row, through
knowflow's one attention interception (`lens.attention`, with the trie's plan): each
chain ("piece") attends to exactly its ancestors and itself, a small attention per piece
instead of a dense tree mask over the packed row. A token thus sees exactly the tokens of its
own prompt at their own positions, so each score equals the prompt run alone up to float
rounding. Work no score reads is skipped: only the positions whose next token is scored are
projected to the vocabulary, and in the last layer only they get attention and the MLP (the
other positions' keys and values of that layer are all a later token needs); the
continuation's last token is never fed.

`run_trie` returns None for a model whose attention does not go through transformers'
attention interface (`lens.arch.arch_of`); `lens.scorer` then checks and falls back.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from knowflow.errors import KnowflowError
from knowflow.lens.arch import arch_of
from knowflow.lens.attention import intercepted
from knowflow.lens.batching import model_device

CHUNK = 2048         # trie nodes per forward pass (at most; the keys of earlier chunks are kept)
KV = list[tuple[torch.Tensor, torch.Tensor]]   # per layer (keys, values): (1, kv heads, n, dim)


@dataclass
class Trie:
    """A token trie: one node per distinct prefix. `reads` (the tree strategy's rows):
    (node, token, item, candidate): the logits at `node` score `token` of candidate
    `candidate` of the row's `item`-th item."""

    tokens: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)      # -1: continues the shared prefix
    depth: list[int] = field(default_factory=list)       # tokens after the shared prefix
    reads: list[tuple[int, int, int, int]] = field(default_factory=list)
    kept: KV | None = None          # keys and values `run_trie` was asked to keep
    _child: dict[tuple[int, int], int] = field(default_factory=dict)

    def path(self, node: int, tokens: Sequence[int]) -> list[int]:
        """The nodes of `tokens` below `node`, added where missing."""
        out = []
        for t in tokens:
            key = (node, t)
            if key not in self._child:
                self._child[key] = len(self.tokens)
                self.tokens.append(t)
                self.parent.append(node)
                self.depth.append(self.depth[node] + 1 if node >= 0 else 0)
            node = self._child[key]
            out.append(node)
        return out

    @classmethod
    def of(cls, prompts: Sequence[Sequence[int]], conts: Sequence[list[list[int]]]) -> Trie:
        """The trie of prompts (each at least one token) and their candidates."""
        trie = cls()
        for i, (p, cs) in enumerate(zip(prompts, conts, strict=True)):
            end = trie.path(-1, p)[-1]
            for k, c in enumerate(cs):
                chain = [end, *trie.path(end, c[:-1])]
                trie.reads += [(chain[j], t, i, k) for j, t in enumerate(c)]
        return trie

    def order(self) -> tuple[list[int], int]:
        """Nodes in row order (the nodes read last) and how many are read."""
        read = set(node for node, *_ in self.reads)
        rest = [n for n in range(len(self.tokens)) if n not in read]
        return rest + sorted(read), len(read)


def build_trie(seqs: Sequence[Sequence[int]], first: Sequence[int] = ()
               ) -> tuple[Trie, list[list[int]]]:
    """(the token trie of `seqs`, per sequence the node of each of its tokens). `first` goes
    in first, so its tokens are nodes 0..len(first) - 1 (a chain: the prompt a `run_trie`
    seed holds); then the sequences go in sorted, so their nodes are numbered in depth-first
    (lexicographic) order."""
    trie = Trie()
    trie.path(-1, first)
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


@dataclass(frozen=True)
class Piece:
    """Consecutive nodes `first`..`last - 1` of one chain of the trie (a run of nodes each the
    child of the one before) and the keys they attend to: `keys`, the ancestors of the chain's
    first node then the chain's nodes up to `last - 1`, (K,); `keep` (last - first, K) bool:
    each query sees the ancestors and its chain up to itself."""

    first: int
    last: int
    keys: torch.Tensor
    keep: torch.Tensor


def pieces(trie: Trie, start: int, end: int, rows: Sequence[int] | None = None,
           device: torch.device | str = "cpu") -> list[Piece]:
    """The pieces covering nodes `start`..`end - 1` (chains cut at the chunk's ends), or only
    the nodes in `rows` (each run of consecutive ones a piece of its own); tensors on
    `device`."""
    wanted = range(start, end) if rows is None else sorted(rows)
    out: list[Piece] = []
    runs: list[list[int]] = []
    for x in wanted:
        if runs and x == runs[-1][-1] + 1 and trie.parent[x] == x - 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    for run in runs:
        top = run[0]
        while trie.parent[top] == top - 1 and top > 0:      # the chain's first node
            top -= 1
        chain = ancestors(trie, top)
        keys = torch.tensor(chain + list(range(top, run[-1] + 1)), dtype=torch.long)
        own = torch.arange(run[-1] + 1 - top)                           # (own keys,)
        seen = own[None, :] <= torch.arange(run[0] - top, run[-1] + 1 - top)[:, None]
        keep = torch.cat([torch.ones((len(run), len(chain)), dtype=torch.bool), seen], dim=1)
        out.append(Piece(run[0], run[-1] + 1, keys.to(device), keep.to(device)))
    return out


@dataclass
class _Plan:
    """What the trie attention of one forward pass (the chunk `start`..`end - 1`) does."""

    start: int
    end: int
    every: list[Piece]              # every layer but the last: all of the chunk's nodes
    scored: list[Piece]             # the last layer: the nodes whose logits are read
    last: int                       # the last layer's index
    store: list[tuple[torch.Tensor, torch.Tensor] | None]   # per layer (1, kvh, nodes, dim)
    nodes: int
    calls: int = 0

    def attend(self, module, query, key, value, attention_mask, *args, wrapped, base: str,
               scaling=None, **kwargs):
        """Attention over the trie: each piece's queries attend to its keys only; in the last
        layer only the scored nodes are computed (the others' output is never read)."""
        # query: (1, heads, C, dim); key, value: (1, kv heads, C, dim) for the chunk's nodes
        layer = module.layer_idx
        self.calls += 1
        if self.store[layer] is None:
            shape = (*key.shape[:2], self.nodes, key.shape[-1])
            self.store[layer] = (key.new_empty(shape), value.new_empty(shape))
        ks, vs = self.store[layer]
        ks[:, :, self.start:self.end] = key
        vs[:, :, self.start:self.end] = value
        out = query.new_zeros(query.shape)                               # (1, heads, C, dim)
        gqa = query.shape[1] != key.shape[1]
        for p in (self.scored if layer == self.last else self.every):
            a, b = p.first - self.start, p.last - self.start
            out[:, :, a:b] = torch.nn.functional.scaled_dot_product_attention(
                query[:, :, a:b], ks.index_select(2, p.keys), vs.index_select(2, p.keys),
                attn_mask=p.keep, scale=scaling, enable_gqa=gqa)
        return out.transpose(1, 2), None                                 # (1, C, heads, dim)


@contextmanager
def _trie_mode(model, last_mlp, rows: list[torch.Tensor]):
    """The model switched to the trie attention, and its last MLP run on `rows[0]` (the
    chunk's scored positions) only: the other positions' last-layer output is never read.
    An MLP that sees flat rows (OPT's fc2: (C, d_ff) in, (C, d) out) is cut on its rows."""
    full: list[torch.Size] = []

    def only_rows(_module, args):
        full[:] = [args[0].shape]
        flat = args[0].dim() == 2                                       # (C, d_ff): OPT
        return (args[0][rows[0]] if flat else args[0][:, rows[0]],)     # (1, R, d) or (R, d)

    def scatter(_module, _args, result):
        out = result.new_zeros((*full[0][:-1], result.shape[-1]))       # (1, C, d) or (C, d)
        if out.dim() == 2:
            out[rows[0]] = result
        else:
            out[:, rows[0]] = result
        return out

    hooks = [last_mlp.register_forward_pre_hook(only_rows),
             last_mlp.register_forward_hook(scatter)]
    try:
        with intercepted(model, base="sdpa"):
            yield
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def run_trie(model, trie: Trie, wanted: dict[int, list[int]], chunk: int | None = None,
             seed: KV | None = None, keep: Sequence[int] = ()
             ) -> dict[tuple[int, int], float] | None:
    """Log-probabilities {(node, token): logp} of each token in `wanted[node]` after the
    prefix ending at `node`, `chunk` nodes (default `CHUNK`) per forward pass; None when the
    model's attention does not go through transformers' attention interface. `seed`: the
    keys and values of the trie's first s nodes (a chain from the root, `build_trie`'s
    `first`), which are then not computed (none of them may be in `wanted`). `keep`: nodes
    whose keys and values are put in `trie.kept` (per layer, in `keep`'s order)."""
    chunk = chunk or CHUNK
    try:
        arch = arch_of(model)
    except KnowflowError:
        return None
    device = model_device(model)
    n = len(trie.tokens)
    ids = torch.tensor(trie.tokens, dtype=torch.long)                   # (nodes,)
    depth = torch.tensor(trie.depth, dtype=torch.long)                  # (nodes,)
    store: list = [None] * arch.n_layers
    seeded = 0
    if seed:
        seeded = seed[0][0].shape[2]
        if any(x < seeded for x in wanted):
            raise KnowflowError("a seeded trie node cannot be scored")
        for layer, (k, v) in enumerate(seed):                           # (1, kvh, s, dim)
            shape = (*k.shape[:2], n, k.shape[-1])
            store[layer] = (k.new_empty(shape), v.new_empty(shape))
            store[layer][0][:, :, :seeded] = k
            store[layer][1][:, :, :seeded] = v
    out: dict[tuple[int, int], float] = {}
    rows_now: list[torch.Tensor] = [torch.zeros(0, dtype=torch.long)]
    with _trie_mode(model, arch.mlp[-1], rows_now):
        for start in range(seeded, n, chunk):
            end = min(n, start + chunk)
            rows = [x for x in range(start, end) if x in wanted]
            plan = _Plan(start, end, pieces(trie, start, end, None, device),
                         pieces(trie, start, end, rows, device), arch.n_layers - 1, store, n)
            at = torch.tensor([x - start for x in rows], dtype=torch.long, device=device)
            rows_now[0] = at
            res = model(input_ids=ids[None, start:end].to(device),           # (1, C)
                        position_ids=depth[None, start:end].to(device),      # (1, C)
                        attention_mask=torch.ones((1, 1, 1, 1), dtype=torch.bool,
                                                  device=device),        # unused
                        use_cache=False, knowflow_plan=plan,
                        logits_to_keep=at if rows else torch.tensor([end - start - 1],
                                                                    device=device))
            if plan.calls != arch.n_layers:
                return None
            if rows:
                logp = torch.log_softmax(res.logits[0].float(), dim=-1)      # (rows, vocab)
                pairs = [(r, x, tok) for r, x in enumerate(rows) for tok in wanted[x]]
                got = logp[torch.tensor([r for r, _, _ in pairs], device=device),
                           torch.tensor([t for _, _, t in pairs], device=device)].tolist()
                out.update({(x, tok): v for (_, x, tok), v in zip(pairs, got, strict=True)})
    if keep:
        at = torch.tensor(list(keep), dtype=torch.long, device=device)
        trie.kept = [(k.index_select(2, at), v.index_select(2, at)) for k, v in store]
    return out
