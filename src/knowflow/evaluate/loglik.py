"""Log-likelihood scoring of candidate answers as continuations of one prompt.

For each item the prompt runs once: a left-padded batch of prompts is prefilled with a KV
cache (itself continuing the run's shared prefix, see `batching.Prefix`), the cache rows are
repeated once per candidate, and all candidates of the batch run together as one right-padded
block on top of it. The first candidate token is scored from the prompt's last logits, the
rest from the candidate block; right padding sits after every real token, so it never changes
a real token's score. Each score is (summed log-probability, number of tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from knowflow.evaluate.batching import (
    PrefillExtra,
    Prefix,
    forward,
    prefill,
    sorted_batches,
)
from knowflow.evaluate.tree import score_batch_tree, tree_length
from knowflow.models.batching import pad_id as tokenizer_pad_id
from knowflow.models.batching import right_pad
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


def _score_batch(model, prompts: list[list[int]], conts: list[list[list[int]]], prefix: Prefix,
                 pad_id: int, extra: PrefillExtra | None = None) -> list[list[Score]]:
    """Scores of one batch. Candidates of several tokens are scored in the prompt's own pass
    (`tree.score_batch_tree`), unless the prompt pass captures attention (`extra`) or the
    model failed the one-time check of that pass against the two-pass scorer (a model that
    ignores custom 4D attention masks). Single-token candidates need one pass either way."""
    ok = getattr(model, "_knowflow_tree_ok", None)
    if extra is not None or ok is False or all(len(c) == 1 for cs in conts for c in cs):
        return _score_batch_cached(model, prompts, conts, prefix, pad_id, extra)
    tree = score_batch_tree(model, prompts, conts, prefix, pad_id)
    if ok is None:  # checked on up to CHECK_ROWS rows with a multi-token candidate
        rows = [b for b, cs in enumerate(conts) if any(len(c) > 1 for c in cs)][:CHECK_ROWS]
        ref = _score_batch_cached(model, [prompts[b] for b in rows], [conts[b] for b in rows],
                                  prefix, pad_id)
        tol = 2e-3 if next(model.parameters()).dtype == torch.float32 else 0.1
        model._knowflow_tree_ok = all(
            abs(a[0] - b[0]) <= tol and a[1] == b[1]
            for r, rb in zip(rows, ref, strict=True) for a, b in zip(tree[r], rb, strict=True))
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
    # by the length of each tree row (prompt and candidates), so a batch carries little padding
    for batch in sorted_batches([tree_length(p, c) for p, c in zip(prompts, conts, strict=True)],
                                batch_size):
        res = _score_batch(model, [list(prompts[i]) for i in batch], [conts[i] for i in batch],
                           prefix, pad_id, prefill_extra(batch) if prefill_extra else None)
        for i, r in zip(batch, res, strict=True):
            out[i] = r
        done += len(batch)
        if progress is not None:
            progress(done, len(prompts), stage)
    return out


@torch.no_grad()
def score_naive(model, tokenizer, prompt: list[int], continuation: str) -> Score:
    """Reference: one full forward pass over prompt + continuation (used by tests/bench)."""
    cont = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + cont], device=device)                   # (1, seq)
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()  # (cont, vocab)
    logp = torch.log_softmax(logits, dim=-1)
    return float(logp.gather(-1, torch.tensor(cont, device=device)[:, None]).sum()), len(cont)
