"""Hierarchical attribution of long contexts (documents, then sentences) and chunked
scoring."""

import pytest
import torch

from knowflow.data.facts import ConflictItem
from knowflow.explanation.attribution import ablation_masks, attribute, prompt_chunks, score_masks
from knowflow.explanation.hierarchy import (
    document_units,
    hierarchical_attribute,
    one_scale,
)
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.splitter import split_sentences

DOCS = ["Paris is in France. The sky is blue. Cats like milk.",
        "Rome is in Italy. Dogs bark. Rain is wet.",
        "Oslo is in Norway. Snow is cold. Tea is hot."]
ITEM = ConflictItem(id="h", suite="explain", context="\n\n".join(DOCS),
                    question="Where is Rome?", counterfactual_answer="", parametric_answer="")


def test_documents_are_paragraphs_or_blocks_of_sentences():
    sents = split_sentences(ITEM.context)
    assert document_units(ITEM.context, sents, 8) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    flat = " ".join(DOCS)
    assert document_units(flat, split_sentences(flat), 4) == [0, 0, 0, 0, 1, 1, 1, 1, 2]


def _setup(lm, top_documents: int):
    """(sentences, config, the full context's log-probability of " Italy")."""
    model, tok = lm
    sents = split_sentences(ITEM.context)
    cfg = ExplainConfig(ablations=10, holdout=6, document_ablations=8,
                        top_documents=top_documents, prompt_format="chat")
    full = score_masks(model, tok, ITEM, sents, torch.ones(1, len(sents), dtype=torch.long),
                       " Italy", cfg)
    return sents, cfg, float(full[0])


def test_hierarchical_equals_flat_when_every_document_is_kept(lm):
    model, tok = lm
    sents, cfg, full = _setup(lm, 3)
    flat = attribute(model, tok, ITEM, sents, " Italy", full, cfg)
    hier, record = hierarchical_attribute(model, tok, ITEM, sents, " Italy", full, cfg)
    assert record is None                                  # no document stage
    assert hier.weights == pytest.approx(flat.weights, abs=1e-9)
    assert (hier.top, hier.lds, hier.topk_drop) == (flat.top, flat.lds, flat.topk_drop)
    assert hier.n_prompts == flat.n_prompts


def test_one_top_document_puts_every_sentence_on_the_document_scale(lm):
    model, tok = lm
    sents, cfg, full = _setup(lm, 1)
    one, rec = hierarchical_attribute(model, tok, ITEM, sents, " Italy", full, cfg)
    (kept,) = rec["units_kept"]
    assert kept == max(range(3), key=rec["unit_weights"].__getitem__)
    for u in range(3):
        members = [w for j, w in enumerate(one.weights) if rec["units"][j] == u]
        assert sum(members) == pytest.approx(rec["unit_weights"][u], abs=1e-9)
        if u != kept:
            assert members == pytest.approx([rec["unit_weights"][u] / 3] * 3, abs=1e-12)
    # 8 document masks, 6 held-out masks over the whole context, 10 over the kept document
    assert one.method == "hierarchical" and one.n_prompts == 8 + 6 + 10 + len(one.topk_drop)
    assert one.lds is not None


def test_one_scale_by_hand():
    unit = torch.tensor([0, 0, 1, 1, 1, 2])
    unit_weights = torch.tensor([3.0, -0.6, 0.4])
    # the kept unit 0's stage-2 weights 2.0 and 0.0 sum to 2.0: both shift by (3 - 2) / 2
    got = one_scale(unit, unit_weights, [0, 1], torch.tensor([2.0, 0.0]))
    assert got.tolist() == pytest.approx([2.5, 0.5, -0.2, -0.2, -0.2, 0.4])
    # two kept units, each on its own stage-1 weight
    got = one_scale(unit, unit_weights, [0, 1, 5], torch.tensor([1.0, -1.0, 5.0]))
    assert got.tolist() == pytest.approx([2.5, 0.5, -0.2, -0.2, -0.2, 0.4])


def test_chunked_scoring_bounds_each_pass_and_changes_no_score(lm):
    assert [list(r) for r in prompt_chunks([5, 5, 5, 5, 5], 3, 12)] == [[0, 1], [2, 3], [4]]
    assert [list(r) for r in prompt_chunks([30, 5], 8, 12)] == [[0], [1]]   # one prompt at least
    model, tok = lm
    sents = split_sentences(ITEM.context)
    masks, _ = ablation_masks(len(sents), ExplainConfig(ablations=9), "c")
    whole = score_masks(model, tok, ITEM, sents, masks, " Italy",
                        ExplainConfig(prompt_format="chat"))
    pieces = score_masks(model, tok, ITEM, sents, masks, " Italy",
                         ExplainConfig(prompt_format="chat", score_chunk=2, score_tokens=200))
    assert torch.allclose(whole, pieces, atol=1e-4)


def test_explain_attributes_a_context_past_the_threshold_hierarchically(lm):
    import knowflow

    model, tok = lm
    res = knowflow.explain(model, [ITEM], tokenizer=tok, ablations=8, holdout=4,
                           document_ablations=8, top_documents=1, hierarchy_above=4,
                           max_new_tokens=3, levels=("source", "sentences"))
    (rec,) = res.records
    assert rec["attribution_method"] == "hierarchical"
    assert len(rec["documents"]["unit_weights"]) == 3 and len(rec["sentences"]) == 9


def test_long_items_hold_one_answer_sentence_among_documents():
    from knowflow.explanation.contexts import long_items

    for it in long_items(24, 40):      # a sentence may start with the subject's "the"
        sents = split_sentences(it.context)
        assert len(sents) == 40 and it.meta["documents"] >= 3
        naming = [j for j, s in enumerate(sents) if it.counterfactual_answer in s.text]
        assert naming == [it.meta["needle"]]
        assert sum(it.subject.lower() in s.text.lower() for s in sents) == 1


def test_the_hierarchy_is_opt_in():
    from knowflow.explanation.hierarchy import hierarchical

    assert not hierarchical(ExplainConfig(), 10_000)             # flat at every length
    assert hierarchical(ExplainConfig(hierarchy_above=24), 25)
    assert not hierarchical(ExplainConfig(hierarchy_above=24), 24)
