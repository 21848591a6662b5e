"""Hierarchical ablation attribution for long contexts: documents first, then the sentences
of the top documents.

A retrieval prompt holds 20-200 sentences over several documents; a flat surrogate needs more
ablations as sentences grow. Here the ablations are spent in two stages:

1. *Documents.* The context's units are its documents (paragraphs: text separated by a blank
   line) or, in a context of one paragraph, blocks of `block_sentences` consecutive
   sentences. `document_ablations` random masks over the units (each unit kept whole or
   removed whole) are scored and a lasso surrogate gives each unit a weight.
2. *Sentences.* The `top_documents` units with the largest weights are kept for the second
   stage: `n_ablations` masks over their sentences, with the other units removed (stage 1
   found they matter least; removing them keeps these prompts as short as the top units,
   which is what makes the stage cheap), give each of those sentences its weight, and
   `n_holdout` more its LDS. Sentences of the other units get no weight of their own (0.0),
   and their unit's weight is recorded.

The number of ablations is `document_ablations + n_ablations + n_holdout` whatever the
context's length (the flat method needs more as sentences grow for the same fit); only the
first stage's prompts grow with the context. The scoring is chunked by tokens
(`score_masks`), so memory grows with the chunk. When
`top_documents` keeps every unit, stage 2 draws exactly the flat method's masks over all
sentences, so the result equals the flat attribution.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import torch

from knowflow.data.facts import ConflictItem
from knowflow.explanation.attribution import (
    Attribution,
    ablation_masks,
    score_masks,
    topk_drops,
)
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.splitter import Sentence
from knowflow.explanation.surrogate import fit_surrogate, random_masks, spearman
from knowflow.runs import Progress

_BLANK_LINE = re.compile(r"\n\s*\n")


def document_units(context: str, sentences: Sequence[Sentence], block: int) -> list[int]:
    """Each sentence's unit: its document (paragraph) index where the context has two or
    more paragraphs, else its block of `block` consecutive sentences."""
    units, current = [], 0
    for i, sent in enumerate(sentences):
        if i and _BLANK_LINE.search(context[sentences[i - 1].end:sent.start]):
            current += 1
        units.append(current)
    if current == 0:
        return [i // block for i in range(len(sentences))]
    return units


def hierarchical(cfg: ExplainConfig, n_sentences: int) -> bool:
    """Whether a context of `n_sentences` is attributed hierarchically."""
    return n_sentences > cfg.hierarchy_above


def hierarchical_attribute(model, tokenizer, item: ConflictItem,
                           sentences: Sequence[Sentence], continuation: str,
                           logprob_full: float, cfg: ExplainConfig, lead: str = "",
                           progress: Progress | None = None) -> tuple[Attribution, dict]:
    """(the sentence attribution, the document stage's record: units, their weights, the
    units kept); see the module docstring."""
    n = len(sentences)
    unit = torch.tensor(document_units(item.context, sentences, cfg.block_sentences))
    n_units = int(unit.max()) + 1
    key = item.id + item.context
    seed = int(hashlib.sha256(f"{cfg.seed}:documents:{key}".encode()).hexdigest()[:15], 16)
    gen = torch.Generator().manual_seed(seed)
    doc_masks = random_masks(cfg.document_ablations, n_units, cfg.keep_prob, gen)  # (a, u)
    doc_targets = score_masks(model, tokenizer, item, sentences, doc_masks[:, unit],
                              continuation, cfg, lead, progress)               # (a,)
    doc_fit = fit_surrogate(doc_masks, doc_targets, cfg.cv_folds, cfg.seed)
    ranked = sorted(range(n_units), key=lambda u: -float(doc_fit.weights[u]))
    kept_units = sorted(ranked[:cfg.top_documents])
    kept = [j for j in range(n) if int(unit[j]) in kept_units]          # sentence indices
    fit_m, held_m = ablation_masks(len(kept), cfg, key)                  # (abl, kept)

    def full(masks: torch.Tensor) -> torch.Tensor:                       # (abl, sentences)
        out = torch.zeros(len(masks), n, dtype=torch.int64)   # the other units removed
        out[:, kept] = masks.long()
        return out
    targets = score_masks(model, tokenizer, item, sentences, full(torch.cat([fit_m, held_m])),
                          continuation, cfg, lead, progress)
    fit = fit_surrogate(fit_m, targets[:len(fit_m)], cfg.cv_folds, cfg.seed)
    weights = torch.zeros(n, dtype=torch.float64)
    weights[kept] = fit.weights
    lds = spearman(fit.predict(held_m), targets[len(fit_m):]) if len(held_m) > 1 else None
    order, drops = topk_drops(model, tokenizer, item, sentences, weights, continuation,
                              logprob_full, cfg, lead)
    attr = Attribution([float(w) for w in weights], fit.intercept, fit.alpha, order[0], lds,
                       drops, len(doc_masks) + len(targets) + len(drops),
                       "hierarchical" if len(kept_units) < n_units else "ablation")
    record = {"units": [int(u) for u in unit], "unit_weights": [float(w) for w in
                                                                 doc_fit.weights],
              "units_kept": kept_units, "document_ablations": len(doc_masks)}
    return attr, record
