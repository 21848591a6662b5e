"""Log-likelihood scoring of candidate continuations after prompts: the one scorer.

`score_continuations` gives each candidate (summed log-probability, number of tokens), as one
full forward pass over prompt + candidate would, with the work prompts share done once. Its
strategies are private to it:

- "auto" (default): requests with the same prompt run it once; prompts of a run share their
  common prefix's KV cache (`Prefix`); prompts that also begin with the same few tokens (a
  question several rows ask) share a row whose tokens form a trie, and every candidate is
  scored in that one forward pass (`_tree`, a dense 4D mask per row). A model's first batch
  is checked against "two_pass", which it falls back to for a model that fails the check
  (one that ignores custom 4D masks) or where the prompt pass must capture attention. A
  prompt of more than `LONG_PROMPT` tokens runs alone instead, in chunks on the prefix's
  cache, then its candidates on its own cache: no dense mask, so memory grows linearly in
  its length and SDPA computes no masked-out scores.
- "two_pass": a left-padded prefill of the prompts, its cache rows repeated once per
  candidate, and all candidates as one right-padded block on top (right padding sits after
  every real token, so it never changes a real token's score).
- "trie": every prompt + candidate in one forward pass over their token trie with a trie
  attention function, the last layer only at scored positions (`_trie`): for many long
  prompts that share most of their tokens (explain's ablated prompts). Checked once per model
  against "auto", which it falls back to for a model whose attention does not go through
  transformers' attention interface or whose scores differ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from knowflow.lens._tree import row_length, score_batch_tree, trie_rows
from knowflow.lens._trie import build_trie, run_trie
from knowflow.lens.batching import model_device, right_pad
from knowflow.lens.batching import pad_id as tokenizer_pad_id
from knowflow.lens.prefix import Prefix, forward
from knowflow.lens.prompt_batches import (
    PASS_COST,
    PrefillExtra,
    length_groups,
    prefill,
    sorted_batches,
)
from knowflow.store.run_folder import Progress

Score = tuple[float, int]  # (sum of token log-probs, token count)
STRATEGIES = ("auto", "two_pass", "trie")
CHECK_ROWS = 4     # rows of a model's first tree batch also scored the two-pass way
CHECK_PROMPTS = 3  # prompts of a model's first trie call also scored the "auto" way
# A prompt of more than LONG_PROMPT tokens runs alone (after the shared prefix), in passes of
# PREFILL_CHUNK tokens (`Prefix.extend`), its candidates then on its cache: a dense tree mask
# grows with the square of the length and makes SDPA compute every masked score (measured on
# SmolLM2-135M's shape at 2k tokens: twice the attention time of the causal kernel).
LONG_PROMPT = 512
PREFILL_CHUNK = 512


def encode_continuations(tokenizer, continuations: Sequence[Sequence[str]]
                         ) -> list[list[list[int]]]:
    """Token ids of each item's candidates (no special tokens); an empty one is an error."""
    out = []
    for conts in continuations:
        ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in conts]
        if any(not i for i in ids):
            raise ValueError(f"a continuation encodes to no tokens: {conts!r}")
        out.append(ids)
    return out


def _tolerance(model) -> float:
    """How far a shared-work scorer's log-probability may sit from the plain scorer's in the
    one-time check of a model (float32 rounding; half precision is coarser)."""
    return 2e-3 if next(model.parameters()).dtype == torch.float32 else 0.1


def _score_batch(model, prompts: list[list[int]], conts: list[list[list[int]]], prefix: Prefix,
                 pad_id: int, extra: PrefillExtra | None = None,
                 rows: list[list[int]] | None = None, two_pass: bool = False
                 ) -> list[list[Score]]:
    """Scores of one batch, in the prompts' own pass (`_tree.score_batch_tree`; `rows`: items
    packed into shared rows), unless `two_pass` is asked for, the prompt pass captures
    attention (`extra`) or the model failed the one-time check of that pass against the
    two-pass strategy (a model that ignores custom 4D attention masks)."""
    ok = getattr(model, "_knowflow_tree_ok", None)
    if two_pass or extra is not None or ok is False:
        return _score_two_pass(model, prompts, conts, prefix, pad_id, extra)
    tree = score_batch_tree(model, prompts, conts, prefix, pad_id, rows)
    if ok is None:  # checked on up to CHECK_ROWS items, those sharing a row first
        shared = [b for r in (rows or []) if len(r) > 1 for b in r]
        longer = [b for b, cs in enumerate(conts) if any(len(c) > 1 for c in cs)]
        check = list(dict.fromkeys([*shared, *longer, *range(len(prompts))]))[:CHECK_ROWS]
        ref = _score_two_pass(model, [prompts[b] for b in check],
                                  [conts[b] for b in check], prefix, pad_id)
        tol = _tolerance(model)
        model._knowflow_tree_ok = all(
            abs(a[0] - b[0]) <= tol and a[1] == b[1]
            for r, rb in zip(check, ref, strict=True) for a, b in zip(tree[r], rb, strict=True))
        if not model._knowflow_tree_ok:
            return _score_two_pass(model, prompts, conts, prefix, pad_id)
    return tree


@torch.no_grad()
def _score_two_pass(model, prompts: list[list[int]], conts: list[list[list[int]]],
                    prefix: Prefix, pad_id: int, extra: PrefillExtra | None = None
                    ) -> list[list[Score]]:
    """Scores of one batch: a prefill of the prompts (`extra`: more forward arguments), then
    every candidate on a copy of its prompt's cache rows, one right-padded pass."""
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
                        prefill_extra: Callable[[list[int]], PrefillExtra] | None = None,
                        strategy: str = "auto") -> list[list[Score]]:
    """Scores of each item's candidate continuations (strings appended to its prompt), by
    `strategy` ("auto", "two_pass" or "trie": see the module docstring).

    `prefill_extra(batch)`, given the item indices of a batch, may return a `PrefillExtra`
    that adds keyword arguments to that batch's prompt forward pass: the tracker captures
    attention there, so one pass gives both the scores and the attention mass.

    Requests with the same prompt ids run that prompt once, with the union of their
    candidates on top (so identical requests are scored once, as lm-eval does, and e.g. one
    saying asked for several endings runs the saying once); not with `prefill_extra`, whose
    batches name items."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown scoring strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    if strategy == "trie" and prefill_extra is not None:
        raise ValueError("prefill_extra needs the auto or two_pass strategy (a prompt pass)")
    if strategy == "trie":
        return _score_trie(model, tokenizer, prompts, continuations, batch_size, share_prefix)
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
                                         progress, stage, share_prefix, strategy=strategy)
            by_prompt = dict(zip(keys, scored, strict=True))
            return [[by_prompt[tuple(p)][union[tuple(p)][c]] for c in cs]
                    for p, cs in zip(prompts, continuations, strict=True)]
    conts = encode_continuations(tokenizer, continuations)
    prefix = Prefix.build(model, prompts, share=share_prefix)
    pad_id = tokenizer_pad_id(tokenizer)
    out: list[list[Score]] = [[] for _ in prompts]
    done = 0
    cpu = model_device(model).type == "cpu"
    two_pass = strategy == "two_pass"
    alone = prefill_extra is None and not two_pass
    for i in range(len(prompts)):
        if alone and len(prompts[i]) > LONG_PROMPT:
            out[i] = _score_long(model, list(prompts[i]), conts[i], prefix, pad_id)
            done += 1
            if progress is not None:
                progress(done, len(prompts), stage)
    short = [i for i, o in enumerate(out) if not o]
    for rows in _row_batches([prompts[i] for i in short], [conts[i] for i in short],
                             prefix.length, batch_size, alone, cpu):
        rows = [[short[j] for j in r] for r in rows]
        batch = [i for r in rows for i in r]
        at = {i: b for b, i in enumerate(batch)}
        res = _score_batch(model, [list(prompts[i]) for i in batch], [conts[i] for i in batch],
                           prefix, pad_id, prefill_extra(batch) if prefill_extra else None,
                           [[at[i] for i in r] for r in rows], two_pass)
        for i, r in zip(batch, res, strict=True):
            out[i] = r
        done += len(batch)
        if progress is not None:
            progress(done, len(prompts), stage)
    return out


def _score_long(model, prompt: list[int], conts: list[list[int]], prefix: Prefix,
                pad_id: int) -> list[Score]:
    """One long prompt's candidates: the prompt but its last token continues `prefix` in
    chunks (`Prefix.extend`), then its last token and the candidates run as one small tree
    row on that cache (so the first-batch check against two passes applies as before)."""
    grown = prefix.extend(model, prompt[:-1], PREFILL_CHUNK)
    return _score_batch(model, [prompt], [conts], grown, pad_id, rows=[[0]])[0]


def _score_trie(model, tokenizer, prompts: Sequence[list[int]],
                continuations: Sequence[Sequence[str]], batch_size: int, share_prefix: bool
                ) -> list[list[Score]]:
    """The "trie" strategy: every prompt + candidate (but its last token) one sequence of the
    token trie (`_trie.run_trie`), checked once per model against "auto" on the
    `CHECK_PROMPTS` sequences last in depth-first order (most tokens they do not see)."""
    conts = encode_continuations(tokenizer, continuations)
    pairs = [(i, k) for i, cs in enumerate(conts) for k in range(len(cs))]
    fed = [list(prompts[i]) + conts[i][k][:-1] for i, k in pairs]
    trie, paths = build_trie(fed)
    wanted: dict[int, list[int]] = {}
    for (i, k), path in zip(pairs, paths, strict=True):
        for j, tok in enumerate(conts[i][k]):   # token j is predicted at prompt position len-1+j
            wanted.setdefault(path[len(prompts[i]) - 1 + j], []).append(tok)
    ok = getattr(model, "_knowflow_trie_ok", None)
    got = run_trie(model, trie, wanted) if ok is not False else None
    if got is not None:
        flat = [(sum(got[(path[len(prompts[i]) - 1 + j], tok)]
                     for j, tok in enumerate(conts[i][k])), len(conts[i][k]))
                for (i, k), path in zip(pairs, paths, strict=True)]
        if ok is None:
            few = sorted(range(len(pairs)), key=lambda r: -paths[r][-1])[:CHECK_PROMPTS]
            ref = score_continuations(model, tokenizer, [prompts[pairs[r][0]] for r in few],
                                      [[continuations[pairs[r][0]][pairs[r][1]]] for r in few],
                                      share_prefix=False)
            tol = _tolerance(model)
            ok = all(abs(flat[r][0] - s[0][0]) <= tol for r, s in zip(few, ref, strict=True))
    model._knowflow_trie_ok = got is not None and ok
    if not model._knowflow_trie_ok:
        return score_continuations(model, tokenizer, prompts, continuations, batch_size,
                                   share_prefix=share_prefix)
    out: list[list[Score]] = [[] for _ in prompts]
    for (i, _), score in zip(pairs, flat, strict=True):
        out[i].append(score)
    return out


def _row_batches(prompts: Sequence[list[int]], conts: list[list[list[int]]], n_prefix: int,
                 batch_size: int, share_rows: bool, cpu: bool) -> list[list[list[int]]]:
    """Batches of rows (item indices; items that share a row with `share_rows`, see
    `_tree.trie_rows`), rows sorted by their length. On a CPU a batch holds at most
    `batch_size` rows (a row of prompts sharing their beginning is one sequence of the pass,
    at most `_tree.ROW_NODES` tokens) and the cuts between batches minimize padded tokens plus
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
