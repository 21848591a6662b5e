"""Per-token attribution of a whole generation (`--levels tokens`).

The answer span says which sentence the asserted answer came from; this level says it for
every generated token. Under the same ablation masks as the span's attribution, each prefix
of the generation (ending at a token boundary) is scored over the token trie of the ablated
prompts; token k's log-probability under a mask is the difference of its prefix's score and
the previous one's (the prefixes share their trie path, so this costs about one scoring of the
whole generation). A lasso surrogate per token (`surrogate.fit_surrogate`) then gives each
token's attribution to each sentence, as for the span.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from knowflow.data.facts import ConflictItem
from knowflow.explanation.attribution import ablation_masks, score_masks
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.splitter import Sentence
from knowflow.explanation.surrogate import fit_surrogate


def token_prefixes(tokenizer, continuation: str) -> tuple[list[str], list[str]]:
    """(prefixes, pieces): the continuation cut after each of its tokens, and each token's
    text (from the fast tokenizer's offsets; a token without characters of its own joins the
    next one)."""
    enc = tokenizer(continuation, add_special_tokens=False, return_offsets_mapping=True)
    ends = sorted({b for _, b in enc["offset_mapping"] if b > 0})
    if not ends or ends[-1] != len(continuation):
        ends.append(len(continuation))
    starts = [0, *ends[:-1]]
    return [continuation[:e] for e in ends], [continuation[a:b] for a, b in zip(starts, ends,
                                                                               strict=True)]


def token_attribution(model, tokenizer, item: ConflictItem, sentences: Sequence[Sentence],
                      continuation: str, cfg: ExplainConfig) -> list[dict]:
    """Per token of `continuation` (the whole generation, after the prompt): its text, its
    attribution to each sentence and its top sentence (see the module docstring)."""
    prefixes, pieces = token_prefixes(tokenizer, continuation)
    masks, _ = ablation_masks(len(sentences), cfg, item.id + item.context)   # (abl, sent)
    cumulative = score_masks(model, tokenizer, item, sentences, masks, prefixes, cfg)
    per_token = torch.diff(cumulative, dim=1, prepend=torch.zeros(len(masks), 1,
                                                                   dtype=torch.float64))
    out = []                                                               # (abl, tokens)
    for k, piece in enumerate(pieces):
        fit = fit_surrogate(masks, per_token[:, k], cfg.cv_folds, cfg.seed)
        weights = [float(w) for w in fit.weights]
        out.append({"token": piece, "attribution": weights,
                    "top": max(range(len(weights)), key=weights.__getitem__)})
    return out
