"""`knowflow.explain` end to end on a tiny model: records, summary, run folder, table; the
needle suites' ground truth."""

import json

import pytest

import knowflow
from knowflow.data.conditions import names, text_key
from knowflow.data.needle import needle_items
from knowflow.data.suites import get_suite
from knowflow.explanation.splitter import split_sentences

CONTEXT = "Paris is in France. The sky is blue today. Rome is in Italy."


def test_one_context_gives_one_full_record_and_saves_a_run_folder(lm, tmp_path):
    model, tok = lm
    res = knowflow.explain(model, CONTEXT, "Where is Rome?", " Italy", tokenizer=tok,
                           ablations=12, holdout=6, max_new_tokens=3)
    (rec,) = res.records
    for key in ("verdict", "answer", "answer_no_context", "logprob_context",
                "logprob_no_context", "sentences", "top_sentence", "mechanism", "lds"):
        assert key in rec
    assert rec["answer"] == " Italy"
    assert [s["text"] for s in rec["sentences"]] == [s.text for s in split_sentences(CONTEXT)]
    weights = [s["attribution"] for s in rec["sentences"]]
    assert rec["top_sentence"] == weights.index(max(weights))
    assert rec["mechanism"]["logprob"] == pytest.approx(rec["logprob_context"], abs=1e-4)
    assert rec["context_contribution"] == pytest.approx(
        rec["logprob_context"] - rec["logprob_no_context"])
    assert len(rec["mechanism"]["layers"]) == model.config.num_hidden_layers
    out = res.save(tmp_path / "run")
    assert {"config.json", "records.jsonl", "summary.json"} <= {p.name for p in out.iterdir()}
    saved = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert saved[0]["sentences"] == rec["sentences"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_items"] == 1 and sum(summary["verdicts"].values()) == 1


def test_the_one_pass_score_is_computed_only_when_asked(lm):
    """Gradient x input costs a forward and a backward pass, so it is a level of its own:
    without it no record, sentence or summary carries it (null in the summary); with it the
    same ablation result gains it."""
    model, tok = lm
    run = dict(tokenizer=tok, ablations=8, holdout=4, max_new_tokens=3)
    plain = knowflow.explain(model, "needle-cf", limit=1, levels=("source", "sentences"),
                             **run)
    asked = knowflow.explain(model, "needle-cf", limit=1,
                             levels=("source", "sentences", "one_pass"), **run)
    (rec,), (rec_asked,) = plain.records, asked.records
    assert "one_pass" not in rec and "one_pass_hit" not in rec
    assert not any("one_pass" in s for s in rec["sentences"])
    assert "one_pass" not in rec["seconds"]
    assert plain.summary["sentences"]["one_pass_hit_rate"] is None
    assert plain.summary["sentences"]["one_pass_spearman"] is None
    assert [s["attribution"] for s in rec_asked["sentences"]] == \
        [s["attribution"] for s in rec["sentences"]]
    scores = [s["one_pass"] for s in rec_asked["sentences"]]
    assert rec_asked["one_pass"]["one_pass_top"] == scores.index(max(scores))
    assert rec_asked["one_pass_hit"] == (scores.index(max(scores)) == rec["needle"])
    assert asked.summary["sentences"]["one_pass_hit_rate"] in (0.0, 1.0)


def test_to_pandas_is_one_flat_row_per_item():
    from knowflow.store.result import Result

    recs = [{"id": "a", "verdict": "context", "verdict_numbers": {"context_contribution": 1.0},
             "sentences": [{"text": "x", "attribution": 0.5}]},
            {"id": "b", "verdict": "memory", "verdict_numbers": {"context_contribution": -1.0},
             "sentences": [{"text": "y", "attribution": 0.0}]}]
    table = Result(recs, {}, {}, "explain").to_pandas()
    assert list(table["id"]) == ["a", "b"]
    assert list(table["verdict_numbers_context_contribution"]) == [1.0, -1.0]
    assert table["sentences"][0] == [{"text": "x", "attribution": 0.5}]


def test_a_suite_is_explained_and_checked_against_its_labels(lm):
    model, tok = lm
    res = knowflow.explain(model, "needle-cf", tokenizer=tok, limit=2, ablations=8,
                           holdout=0, levels=("source", "sentences"), max_new_tokens=2)
    assert len(res.records) == 2
    for rec in res.records:
        assert rec["needle"] is not None and "top_hit" in rec and "mechanism" not in rec
    assert res.summary["sentences"]["n_needle_items"] == 2
    source_only = knowflow.explain(model, "cf-capitals", tokenizer=tok, limit=3,
                                   levels=("source",), target="counterfactual")
    assert all(r["answer"] == r["counterfactual_answer"] for r in source_only.records)
    assert source_only.summary["n_checked"] == 3
    assert all(r["expected_verdict"] == "context" for r in source_only.records)


@pytest.mark.parametrize("suite", ["needle-cf", "needle-agree"])
def test_needle_suites_mark_the_sentence_that_states_the_answer(suite):
    items = get_suite(suite)
    assert len(items) >= 48
    for it in items:
        sents = split_sentences(it.context)
        assert 5 <= len(sents) <= 10 and len(sents) == it.meta["n_sentences"]
        needle = sents[it.meta["needle"]].text
        assert it.counterfactual_answer in needle
        others = [s.text for i, s in enumerate(sents) if i != it.meta["needle"]]
        assert not any(names(text_key(s), it.counterfactual_answer) or
                       names(text_key(s), it.subject) for s in others)  # as whole words
        agree = it.counterfactual_answer == it.parametric_answer
        assert agree == (suite == "needle-agree")
    agree = suite == "needle-agree"
    again = needle_items(0, suite, agree)                           # seeded: the same again
    assert [it.context for it in again] == [it.context for it in items]
    assert needle_items(1, suite, agree)[0].context != items[0].context
