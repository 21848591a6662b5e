"""Log-likelihood scoring of candidate answers as continuations of one prompt.

Requests with the same prompt run it once; prompts of a run share their common prefix's KV
cache (`batching.Prefix`); prompts that also begin with the same few tokens (a question several
rows ask) share a row whose tokens form a trie, and every candidate is scored in that one
forward pass (`tree`). Where the prompt pass must capture attention, or a model failed the
one-time check of the trie pass, each batch runs in two passes: a left-padded prefill of the
prompts, its cache rows repeated once per candidate, and all candidates as one right-padded
block on top (right padding sits after every real token, so it never changes a real token's
score). Each score is (summed log-probability, number of tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from knowflow.evaluation.batching import (
    PASS_COST,
    PrefillExtra,
    Prefix,
    forward,
    length_groups,
    prefill,
    sorted_batches,
)
from knowflow.evaluation.tree import row_length, score_batch_tree, trie_rows
from knowflow.lens.batching import model_device, right_pad
from knowflow.lens.batching import pad_id as tokenizer_pad_id
from knowflow.runs import Progress

Score = tuple[float, int]  # (sum of token log-probs, token count)
CHECK_ROWS = 4  # rows of a model's first tree batch also scored the two-pass way


def encode_continuations(tokenizer, continuations: Sequence[Sequence[str]]
                         ) -> list[list[list[int]]]:
    out = []
    for conts in continuations:
        ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in conts]
        if any(not i for i in ids):
            raise ValueError(f"a continuation encodes to no tokens: {conts!r}")
        out.append(ids)
    return out


def check_tolerance(model) -> float:
    """How far a shared-work scorer's log-probability may sit from the plain scorer's in the
    one-time check of a model (float32 rounding; half precision is coarser)."""
    return 2e-3 if next(model.parameters()).dtype == torch.float32 else 0.1


def _score_batch(model, prompts: list[list[int]], conts: list[list[list[int]]], prefix: Prefix,
                 pad_id: int, extra: PrefillExtra | None = None,
                 rows: list[list[int]] | None = None) -> list[list[Score]]:
    """Scores of one batch, in the prompts' own pass (`tree.score_batch_tree`; `rows`: items
    packed into shared rows), unless the prompt pass captures attention (`extra`) or the model
    failed the one-time check of that pass against the two-pass scorer (a model that ignores
    custom 4D attention masks)."""
    ok = getattr(model, "_knowflow_tree_ok", None)
    if extra is not None or ok is False:
        return _score_batch_cached(model, prompts, conts, prefix, pad_id, extra)
    tree = score_batch_tree(model, prompts, conts, prefix, pad_id, rows)
    if ok is None:  # checked on up to CHECK_ROWS items, those sharing a row first
        shared = [b for r in (rows or []) if len(r) > 1 for b in r]
        longer = [b for b, cs in enumerate(conts) if any(len(c) > 1 for c in cs)]
        check = list(dict.fromkeys([*shared, *longer, *range(len(prompts))]))[:CHECK_ROWS]
        ref = _score_batch_cached(model, [prompts[b] for b in check],
                                  [conts[b] for b in check], prefix, pad_id)
        tol = check_tolerance(model)
        model._knowflow_tree_ok = all(
            abs(a[0] - b[0]) <= tol and a[1] == b[1]
            for r, rb in zip(check, ref, strict=True) for a, b in zip(tree[r], rb, strict=True))
        if not model._knowflow_tree_ok:
            return _score_batch_cached(model, prompts, conts, prefix, pad_id)
    return tree


@torch.no_grad()
def _score_batch_cached(model, prompts: list[list[int]], conts: list[list[list[int]]],
                        prefix: Prefix, pad_id: int, extra: PrefillExtra | None = None
                        ) -> list[list[Score]]:
    last, cache, mask, lengths = prefill(model, prompts, prefix, pad_id, extra)  # (batch, vocab)
    first_logp = torch.log_softmax(last.float(), dim=-1)                  # (batch, vocab)
    device = last.device
    owner = [b for b, cs in enumerate(conts) for _ in cs]                 # item of each row
    flat = [c for cs in conts for c in cs]
    ids, cmask = right_pad(flat, pad_id, device)                          # (rows, width)
    width = ids.shape[1]
    owner_t = torch.tensor(owner, device=device)
    scores = first_logp[owner_t, ids[:, 0]]                              # (rows,)
    if width > 1:
        cache.batch_select_indices(owner_t)                               # one copy per row
        full_mask = torch.cat([mask[owner_t], cmask], dim=1)              # (rows, seq + width)
        pos = lengths[owner_t] + torch.arange(width, device=device)[None]  # (rows, width)
        logits, _ = forward(model, past=cache, input_ids=ids[:, :-1],
                            attention_mask=full_mask[:, :-1], position_ids=pos[:, :-1])
        logp = torch.log_softmax(logits.float(), dim=-1)                  # (rows, width-1, vocab)
        tok = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)               # (rows, width - 1)
        scores = scores + (tok * cmask[:, 1:]).sum(-1)
    out: list[list[Score]] = [[] for _ in conts]
    for r, (b, c) in enumerate(zip(owner, flat, strict=True)):
        out[b].append((float(scores[r]), len(c)))
    return out


def score_continuations(model, tokenizer, prompts: Sequence[list[int]],
                        continuations: Sequence[Sequence[str]], batch_size: int = 16,
                        progress: Progress | None = None, stage: str = "loglik",
                        share_prefix: bool = True,
                        prefill_extra: Callable[[list[int]], PrefillExtra] | None = None
                        ) -> list[list[Score]]:
    """Scores of each item's candidate continuations (strings appended to its prompt).

    `prefill_extra(batch)`, given the item indices of a batch, may return a `PrefillExtra`
    that adds keyword arguments to that batch's prompt forward pass: the tracker captures
    attention there, so one pass gives both the scores and the attention mass.

    Requests with the same prompt ids run that prompt once, with the union of their
    candidates on top (so identical requests are scored once, as lm-eval does, and e.g. one
    saying asked for several endings runs the saying once); not with `prefill_extra`, whose
    batches name items."""
    if prefill_extra is None:
        union: dict[tuple[int, ...], dict[str, int]] = {}
        for p, cs in zip(prompts, continuations, strict=True):
            slots = union.setdefault(tuple(p), {})
            for c in cs:
                slots.setdefault(c, len(slots))
        if len(union) < len(prompts):
            keys = list(union)
            scored = score_continuations(model, tokenizer, [list(k) for k in keys],
                                         [list(union[k]) for k in keys], batch_size,
                                         progress, stage, share_prefix)
            by_prompt = dict(zip(keys, scored, strict=True))
            return [[by_prompt[tuple(p)][union[tuple(p)][c]] for c in cs]
                    for p, cs in zip(prompts, continuations, strict=True)]
    conts = encode_continuations(tokenizer, continuations)
    prefix = Prefix.build(model, prompts, share=share_prefix)
    pad_id = tokenizer_pad_id(tokenizer)
    out: list[list[Score]] = [[] for _ in prompts]
    done = 0
    cpu = model_device(model).type == "cpu"
    for rows in _row_batches(prompts, conts, prefix.length, batch_size,
                             prefill_extra is None, cpu):
        batch = [i for r in rows for i in r]
        at = {i: b for b, i in enumerate(batch)}
        res = _score_batch(model, [list(prompts[i]) for i in batch], [conts[i] for i in batch],
                           prefix, pad_id, prefill_extra(batch) if prefill_extra else None,
                           [[at[i] for i in r] for r in rows])
        for i, r in zip(batch, res, strict=True):
            out[i] = r
        done += len(batch)
        if progress is not None:
            progress(done, len(prompts), stage)
    return out


def _row_batches(prompts: Sequence[list[int]], conts: list[list[list[int]]], n_prefix: int,
                 batch_size: int, share_rows: bool, cpu: bool) -> list[list[list[int]]]:
    """Batches of rows (item indices; items that share a row with `share_rows`, see
    `tree.trie_rows`), rows sorted by their length. On a CPU a batch holds at most
    `batch_size` rows (a row of prompts sharing their beginning is one sequence of the pass,
    at most `tree.ROW_NODES` tokens) and the cuts between batches minimize padded tokens plus
    a fixed cost per pass (`batching.length_groups`); elsewhere (`--batch-size` sized for the
    longest prompt in GPU memory) each batch is filled in turn with at most `batch_size`
    items."""
    rows = trie_rows(prompts, conts, n_prefix) if share_rows else \
        [[i] for i in range(len(prompts))]
    lengths = [row_length([prompts[i] for i in r], [conts[i] for i in r], n_prefix)
               for r in rows]
    if cpu:
        return [[rows[j] for j in g]
                for g in length_groups(lengths, PASS_COST, limit=batch_size)]
    batches: list[list[list[int]]] = []
    items = 0
    for (j,) in sorted_batches(lengths, 1):   # longest first, stable
        if not batches or items + len(rows[j]) > batch_size:
            batches.append([])
            items = 0
        batches[-1].append(rows[j])
        items += len(rows[j])
    return batches


@torch.no_grad()
def score_naive(model, tokenizer, prompt: list[int], continuation: str) -> Score:
    """Reference: one full forward pass over prompt + continuation (used by tests/bench)."""
    cont = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + cont], device=device)                   # (1, seq)
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()  # (cont, vocab)
    logp = torch.log_softmax(logits, dim=-1)
    return float(logp.gather(-1, torch.tensor(cont, device=device)[:, None]).sum()), len(cont)
