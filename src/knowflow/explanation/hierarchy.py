"""Hierarchical ablation attribution for long contexts: documents first, then the sentences
of the top documents.

A retrieval prompt holds 20-200 sentences over several documents. The flat surrogate's
prompts grow with the context; here most prompts are kept short, in two stages:

1. *Documents.* The context's units are its documents (paragraphs: text separated by a blank
   line) or, in a context of one paragraph, blocks of `block_sentences` consecutive
   sentences. `document_ablations` random masks over the units (each unit kept whole or
   removed whole) are scored and a lasso surrogate gives each unit a weight.
2. *Sentences.* The `top_documents` units with the largest weights are kept for the second
   stage: `ablations` masks over their sentences, with the other units removed (stage 1
   found they matter least; removing them keeps these prompts as short as the top units,
   which is what makes the stage cheap), give each of those sentences a weight.
3. *One scale.* Stage 2 measured its sentences in a shortened context, where one sentence
   can weigh more (or less) than it does among all the documents. Each kept unit's
   sentence weights are shifted by one constant so that they sum to the unit's stage-1
   weight (measured in the whole context); the ranking within the unit is stage 2's. Each
   sentence of the other units gets its unit's weight divided by the unit's sentences:
   stage 1 knows no more about them. So every sentence has a weight on one scale, and a
   mask that keeps or removes whole units is predicted as stage 1 predicts it.

The LDS is measured on `holdout` random masks over all the sentences of the whole context,
the same held-out distribution as the flat method's (so the two LDS compare). The number of
ablations is `document_ablations + ablations + holdout` whatever the context's length;
stage 1's and the held-out prompts grow with the context, stage 2's with the top units. The
scoring is chunked by tokens (`score_masks`), so memory grows with the chunk. When
`top_documents` keeps every unit there is no stage 1: the result is the flat attribution.
On long items the flat surrogate at the same 64 ablations ranked sentences better, by more as
the context grew (docs/commands/explain.md, "Long contexts"), at about twice the CPU: the
hierarchy is opt-in (`hierarchy_above`, default None).
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
    attribute,
    score_masks,
    topk_drops,
)
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.splitter import Sentence
from knowflow.explanation.surrogate import fit_surrogate, random_masks, spearman
from knowflow.store.run_folder import Progress

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
    return cfg.hierarchy_above is not None and n_sentences > cfg.hierarchy_above


def hierarchical_attribute(model, tokenizer, item: ConflictItem,
                           sentences: Sequence[Sentence], continuation: str,
                           logprob_full: float, cfg: ExplainConfig, lead: str = "",
                           progress: Progress | None = None) -> tuple[Attribution, dict | None]:
    """(the sentence attribution, the document stage's record: units, their weights, the
    units kept; None where every unit is kept); see the module docstring."""
    n = len(sentences)
    unit = torch.tensor(document_units(item.context, sentences, cfg.block_sentences))
    n_units = int(unit.max()) + 1
    key = item.id + item.context
    if cfg.top_documents >= n_units:        # every unit kept: the flat attribution
        attr = attribute(model, tokenizer, item, sentences, continuation, logprob_full, cfg,
                         lead, progress)
        return attr, None
    seed = int(hashlib.sha256(f"{cfg.seed}:documents:{key}".encode()).hexdigest()[:15], 16)
    gen = torch.Generator().manual_seed(seed)
    doc_masks = random_masks(cfg.document_ablations, n_units, cfg.keep_prob, gen)  # (a, u)
    fit_m, held = ablation_masks(n, cfg, key)       # held: over every sentence (holdout, n)
    doc_and_held = torch.cat([doc_masks[:, unit], held])                          # (a + h, n)
    scored = score_masks(model, tokenizer, item, sentences, doc_and_held, continuation, cfg,
                         lead, progress)
    doc_fit = fit_surrogate(doc_masks, scored[:len(doc_masks)], cfg.cv_folds, cfg.seed)
    ranked = sorted(range(n_units), key=lambda u: -float(doc_fit.weights[u]))
    kept_units = sorted(ranked[:cfg.top_documents])
    kept = [j for j in range(n) if int(unit[j]) in kept_units]          # sentence indices
    stage2 = fit_m[:, kept]                    # the fit masks' columns of the kept sentences
    shortened = torch.zeros(len(stage2), n, dtype=torch.int64)          # (abl, sentences)
    shortened[:, kept] = stage2.long()                                  # the others removed
    targets = score_masks(model, tokenizer, item, sentences, shortened, continuation, cfg,
                          lead, progress)
    fit = fit_surrogate(stage2, targets, cfg.cv_folds, cfg.seed)
    weights = one_scale(unit, doc_fit.weights, kept, fit.weights)
    lds = spearman(held.double() @ weights, scored[len(doc_masks):]) if len(held) > 1 \
        else None
    order, drops, _ = topk_drops(model, tokenizer, item, sentences, weights, continuation,
                                 logprob_full, cfg, lead)
    attr = Attribution([float(w) for w in weights], fit.intercept, fit.alpha, order[0], lds,
                       drops, len(scored) + len(targets) + len(drops), "hierarchical")
    record = {"units": [int(u) for u in unit], "unit_weights": [float(w) for w in
                                                                 doc_fit.weights],
              "units_kept": kept_units, "document_ablations": len(doc_masks)}
    return attr, record


def one_scale(unit: torch.Tensor, unit_weights: torch.Tensor, kept: Sequence[int],
              kept_weights: torch.Tensor) -> torch.Tensor:
    """(sentences,) step 3 of the module docstring: each sentence's unit (sentences,), the
    units' stage-1 weights (units,), the kept sentences' indices and their stage-2 weights
    (kept,) -> every sentence's weight on the stage-1 scale."""
    size = torch.bincount(unit, minlength=len(unit_weights)).double()          # (units,)
    out = unit_weights.double()[unit] / size[unit]                             # (sentences,)
    at = torch.tensor(list(kept), dtype=torch.long)
    out[at] = kept_weights.double()
    for u in unit[at].unique():
        members = (unit == u).nonzero().flatten()
        out[members] += (float(unit_weights[u]) - float(out[members].sum())) / len(members)
    return out
