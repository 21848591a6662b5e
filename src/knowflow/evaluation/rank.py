"""Mean rank of a correct answer among candidates, by log-likelihood (Huang et al. 2025).

Each item is a prompt and K candidate continuations, one of them correct. Two scores rank
them: `full`, the summed log-probability of the whole continuation (all the answer's tokens,
or the answer and the rest of the sentence: the completed sentence's log-likelihood up to the
shared prompt), and `first`, the log-probability of the continuation's first token only. The
rank of the correct candidate is the number of candidates scored above it (0 = best, K - 1 =
worst); a tie counts half, so ties are resolved the same way every time and a scorer that
cannot tell candidates apart sits at chance, (K - 1) / 2, rather than at 0 or K - 1. Top-1
means rank 0: strictly the best.
Both come from one `loglik.score_continuations` call (prompt prefilled once, candidates batched
on its KV cache): the first token of a longer candidate is scored as an extra one-token
continuation; when every candidate is one token, ranking costs only the prompt pass.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

from knowflow.lens.batching import pad_id as tokenizer_pad_id
from knowflow.lens.prefix import Prefix
from knowflow.lens.prompt_batches import prefill, sorted_batches
from knowflow.lens.scorer import encode_continuations, score_continuations
from knowflow.store.run_folder import Progress


def ranks_from_scores(scores: Sequence[Sequence[float]], correct: Sequence[int]
                      ) -> list[float]:
    """Rank of `scores[i][correct[i]]` among `scores[i]`: #higher + 0.5 * #tied others."""
    if len(scores) != len(correct):
        raise ValueError(f"{len(scores)} score rows but {len(correct)} correct indices")
    out = []
    for row, c in zip(scores, correct, strict=True):
        if not 0 <= c < len(row):
            raise ValueError(f"correct index {c} outside {len(row)} candidates")
        if any(math.isnan(s) for s in row):
            raise ValueError("a candidate score is NaN")
        target = row[c]
        higher = sum(s > target for s in row)
        tied = sum(s == target for s in row) - 1
        out.append(higher + 0.5 * tied)
    return out


@dataclass(frozen=True)
class RankStats:
    mean_rank: float
    top1: float  # share of items whose correct candidate scores strictly highest
    n: int
    n_candidates: float  # mean K over the items (chance mean rank = (K - 1) / 2)

    def to_dict(self) -> dict:
        return {"mean_rank": self.mean_rank, "top1": self.top1, "n": self.n,
                "n_candidates": self.n_candidates}


def rank_stats(ranks: Sequence[float], n_candidates: Sequence[int]) -> RankStats:
    if not ranks:
        return RankStats(float("nan"), float("nan"), 0, float("nan"))
    return RankStats(sum(ranks) / len(ranks), sum(r == 0 for r in ranks) / len(ranks),
                     len(ranks), sum(n_candidates) / len(n_candidates))


def grouped_stats(keys: Sequence[Hashable], ranks: Sequence[float],
                  n_candidates: Sequence[int]) -> dict[Hashable, RankStats]:
    """RankStats per key (e.g. per family), keys in first-seen order."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        groups[key].append(i)
    return {key: rank_stats([ranks[i] for i in idx], [n_candidates[i] for i in idx])
            for key, idx in groups.items()}


@torch.no_grad()
def first_token_logprobs(model, prompts: Sequence[list[int]], tokens: Sequence[Sequence[int]],
                         pad_id: int, batch_size: int = 16, share_prefix: bool = True
                         ) -> list[list[float]]:
    """log p(token | prompt) for each item's candidate first tokens."""
    prefix = Prefix.build(model, prompts, share=share_prefix)
    out: list[list[float]] = [[] for _ in prompts]
    for batch in sorted_batches([len(p) for p in prompts], batch_size):
        last, _, _, _ = prefill(model, [list(prompts[i]) for i in batch], prefix, pad_id)
        logp = torch.log_softmax(last.float(), dim=-1)  # (batch, vocab)
        for row, i in enumerate(batch):
            out[i] = logp[row, torch.tensor(list(tokens[i]), device=logp.device)].tolist()
    return out


@dataclass(frozen=True)
class ItemRanks:
    """Per item: the correct candidate's rank by full and by first-token score."""

    full: list[float]
    first: list[float]
    full_scores: list[list[float]]  # (items, candidates) summed log-probs
    first_scores: list[list[float]]  # (items, candidates) first-token log-probs


def _first_token_texts(tokenizer, firsts: Sequence[Sequence[int]]) -> dict[int, str] | None:
    """Each first token as a string that encodes back to exactly that token, or None if some
    token does not round-trip (then first-token scores need their own prompt pass)."""
    texts = {}
    for tid in {t for row in firsts for t in row}:
        text = tokenizer.decode([tid])
        if tokenizer(text, add_special_tokens=False)["input_ids"] != [tid]:
            return None
        texts[tid] = text
    return texts


def rank_candidates(model, tokenizer, prompts: Sequence[list[int]],
                    continuations: Sequence[Sequence[str]], correct: Sequence[int],
                    batch_size: int = 16, progress: Progress | None = None) -> ItemRanks:
    """Score every candidate continuation of every prompt both ways and rank the correct one.

    `prompts` are token ids; `continuations[i]` are strings appended to prompt i (" answer",
    or " answer." for the completed sentence), tokenized on their own as
    `loglik.score_continuations` does. A one-token continuation's full score is its
    first-token score; the first tokens of longer ones ride along as extra one-token
    continuations of the same call, so each prompt is prefilled once for both scores.
    """
    encoded = encode_continuations(tokenizer, continuations)
    firsts = [[ids[0] for ids in row] for row in encoded]
    longer = [[len(ids) > 1 for ids in row] for row in encoded]
    texts = _first_token_texts(tokenizer, [[t for t, lg in zip(fr, lr, strict=True) if lg]
                                           for fr, lr in zip(firsts, longer, strict=True)])
    extra = [[texts[t] for t, lg in zip(fr, lr, strict=True) if lg] if texts is not None else []
             for fr, lr in zip(firsts, longer, strict=True)]
    joint = [list(conts) + more for conts, more in zip(continuations, extra, strict=True)]
    scores = score_continuations(model, tokenizer, prompts, joint, batch_size,
                                 progress=progress, stage="rank")
    full_scores = [[lp for lp, _ in row[:len(c)]]
                   for row, c in zip(scores, continuations, strict=True)]
    if texts is None:  # some first token does not round-trip: score them from the prompts
        pad_id = tokenizer_pad_id(tokenizer)
        first_scores = first_token_logprobs(model, prompts, firsts, pad_id, batch_size)
    else:
        first_scores = []
        for row, c, lr in zip(scores, continuations, longer, strict=True):
            rest = iter(lp for lp, _ in row[len(c):])
            first_scores.append([next(rest) if lg else full for full, lg in
                                 zip((lp for lp, _ in row[:len(c)]), lr, strict=True)])
    return ItemRanks(ranks_from_scores(full_scores, correct),
                     ranks_from_scores(first_scores, correct), full_scores, first_scores)


def summarize(keys: Sequence[Hashable], ranks: ItemRanks, n_candidates: Sequence[int],
              name: Callable[[Hashable], str] = str) -> dict[str, dict]:
    """{name(key): {mean_rank, top1, mean_rank_first_token, top1_first_token, n,
    n_candidates}} over items grouped by key."""
    full = grouped_stats(keys, ranks.full, n_candidates)
    first = grouped_stats(keys, ranks.first, n_candidates)
    return {name(k): {**full[k].to_dict(), "mean_rank_first_token": first[k].mean_rank,
                      "top1_first_token": first[k].top1} for k in full}
