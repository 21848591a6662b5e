"""`knowflow.store.schemas`: each schema accepts what knowflow writes and refuses a wrong shape
with one DataError naming the file, the line and the field."""

import json
import re

import pytest

from knowflow.data.facts import ConflictItem
from knowflow.errors import DataError
from knowflow.store.schemas import (
    EVAL_SUMMARY,
    JSON_OBJECT,
    ExplainRecord,
    ExplainSummary,
    HeadsSummary,
    ItemRecord,
    LmEvalSample,
    MetricRecord,
    RunIdentity,
    check,
    read_checked,
    read_checked_lines,
    result_schemas,
)

DOC = {**ConflictItem("x0", "cf-bio", "Ann lives in Rome.", "Where does Ann live?", "Rome",
                      "Paris").to_dict(), "meta": "{}", "prompt": "Q", "choices": [" Paris",
                                                                               " Rome"],
       "gold": 1, "prompt_format": "plain"}


def _sample(**doc) -> dict:
    return {"doc_id": 0, "doc": {**DOC, **doc}, "resps": [[["-1.0", "False"]]], "acc": 1.0}


def test_what_knowflow_writes_passes():
    assert RunIdentity.model_validate({"command": "eval", "config_sha256": "ab"}).in_progress \
        is False
    assert check(RunIdentity, {"command": "sft", "config_sha256": "ab", "in_progress": True},
                 "run.json").in_progress is True
    assert check(LmEvalSample, _sample(), "s.jsonl", line=3).doc.suite == "cf-bio"
    assert check(EVAL_SUMMARY, {"cf-bio": {"loglik": {"n": 3}}}, "summary.json") == \
        {"cf-bio": {"loglik": {"n": 3}}}
    assert check(MetricRecord, {"step": 0, "cf_acc": 0.5}, "m.jsonl", line=1).step == 0
    assert check(ItemRecord, {"suite": "cf-bio", "extra": [1]}, "items.jsonl", line=1) \
        .model_extra == {"extra": [1]}  # other fields are kept


@pytest.mark.parametrize("schema, value, where", [
    (LmEvalSample, _sample(suite=5), "s.jsonl, line 7: field 'doc.suite': must be a string, "
                                     "got 5"),
    (LmEvalSample, _sample(suite=["a"]), "field 'doc.suite': must be a string, got a list"),
    (LmEvalSample, {"doc": {k: v for k, v in DOC.items() if k != "suite"}},
     "field 'doc.suite': is missing"),
    (LmEvalSample, _sample(choices=["a"]),
     "field 'doc.choices': must have at least 2 items, got a list"),
    (LmEvalSample, _sample(choices=["a", 2]), "field 'doc.choices[1]': must be a string"),
    (LmEvalSample, _sample(task="chat"), "field 'doc.task': must be 'qa' or 'complete'"),
    (RunIdentity, [1], "s.jsonl, line 7: must be a JSON object, got a list"),
    (RunIdentity, {"command": 5}, "field 'command': must be a string, got 5"),
    (RunIdentity, {"command": ""}, "field 'command': must have at least 1 character(s), got \"\""),
    (RunIdentity, {"command": "x", "in_progress": "yes"},
     "field 'in_progress': must be true or false, got \"yes\""),
    (MetricRecord, {"step": "3"}, "field 'step': must be an integer, got \"3\""),
    (MetricRecord, {"step": True}, "field 'step': must be an integer, got true"),
    (MetricRecord, {"step": -1}, "field 'step': must be a whole number from 0 to "
                                 "9007199254740992, got -1"),
    # steps, counts and indices past what a float holds exactly, refused where they are read
    (MetricRecord, {"step": 10**400}, "field 'step': must be a whole number from 0 to "
                                      "9007199254740992, got 1000000000000000000000000000000"),
    (LmEvalSample, {**_sample(), "doc_id": 2**63}, "field 'doc_id': must be a whole number"),
    (HeadsSummary, {"context_heads": [{"layer": 10**20, "head": 0, "effect": 0.1}]},
     "field 'context_heads[0].layer': must be a whole number from 0 to"),
    (ItemRecord, {"method": "greedy"}, "field 'suite': is missing"),
    (JSON_OBJECT, [1, 2], "s.jsonl, line 7: must be a JSON object, got a list"),
    (EVAL_SUMMARY, {"cf-bio": [1]}, "field 'cf-bio': must be a JSON object, got a list"),
])
def test_a_wrong_shape_names_file_line_and_field(schema, value, where):
    with pytest.raises(DataError) as err:
        check(schema, value, "s.jsonl", line=7, hint="fix it")
    assert where in str(err.value) and str(err.value).endswith("; fix it")
    assert err.value.line == 7


def test_long_values_are_shortened():
    with pytest.raises(DataError, match=r'got "x{36}\.\.\.$'):
        check(MetricRecord, {"step": "x" * 500}, "m.jsonl")


def test_files_are_read_then_checked(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"command": "eval", "config_sha256": "ab"}))
    assert read_checked(run, RunIdentity).command == "eval"
    run.write_text('{"command": "eval",')
    with pytest.raises(DataError, match="run.json, line 1: damaged JSON"):
        read_checked(run, RunIdentity)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 0}\n\n{"step": 1}\n{"step": 2.5}\n')
    with pytest.raises(DataError, match=r"metrics.jsonl, line 4: field 'step'") as err:
        read_checked_lines(metrics, MetricRecord)
    assert err.value.field == "step"
    metrics.write_text('{"step": 0}\n\n{"step": 1}\n')
    assert [r.step for r in read_checked_lines(metrics, MetricRecord)] == [0, 1]


HEAD = {"layer": 1, "head": 0, "effect": -0.2, "ci": [-0.3, -0.1]}
ATTENTION = {"example": "x", "tokens": ["a", "b"], "context": [0],
             "heads": [{**HEAD, "side": "context", "context_mass": 0.5, "weights": [0.4, 0.6]}]}
CARD = {"id": "x", "question": "q", "answer": "a", "answer_no_context": "b",
        "logprob_context": -1.0, "logprob_no_context": -2, "verdict": "context",
        "verdict_numbers": {"context_contribution": 1.0, "context_supports": True,
                            "memory_agrees": False},
        "sentences": [{"text": "s", "attribution": 0.5}], "top_sentence": 0,
        "topk_drop": {"1": 0.3}, "one_pass": {"one_pass_top": 0},
        "mechanism": {"layers": [{"context": -1.0, "top_sentence": -0.5}], "heads": []}}


def test_report_page_schemas_accept_what_the_pages_read():
    summary = HeadsSummary.model_validate({"n_examples": 2, "context_heads": [HEAD],
                                           "effects": {"zero": {"memory_heads": [HEAD]}},
                                           "example_attention": ATTENTION,
                                           "projection": {"prediction": [[0.0, 0.5]]}})
    assert summary.context_heads[0].ci == (-0.3, -0.1)
    assert ExplainRecord.model_validate(CARD).mechanism.layers[0].context == -1.0
    plain = {k: v for k, v in CARD.items() if k not in ("sentences", "top_sentence",
                                                        "topk_drop", "one_pass", "mechanism")}
    assert ExplainRecord.model_validate(plain).sentences is None  # computed parts are optional
    no_one_pass = {k: v for k, v in CARD.items() if k != "one_pass"}   # not asked for
    assert ExplainRecord.model_validate(no_one_pass).one_pass is None


@pytest.mark.parametrize("schema, value, where", [
    (HeadsSummary, {"context_heads": None}, "field 'context_heads': must be a list"),
    (HeadsSummary, {"memory_heads": [{**HEAD, "ci": [1]}]},
     "field 'memory_heads[0].ci[1]': is missing"),
    (HeadsSummary, {"effects": {"zero": {"context_heads": 5}}},
     "field 'effects.zero.context_heads': must be a list, got 5"),
    (HeadsSummary, {"example_attention": {**ATTENTION, "tokens": ["a"]}},
     "field 'example_attention': each head needs one weight per token"),
    (HeadsSummary, {"mean_log_odds": "x"}, "field 'mean_log_odds': must be a number, got \"x\""),
    (ExplainRecord, {**CARD, "mechanism": None}, "field 'mechanism': must be a JSON object"),
    (ExplainRecord, {k: v for k, v in CARD.items() if k != "top_sentence"},
     "a record with sentences needs top_sentence"),
    (ExplainRecord, {**CARD, "logprob_context": True}, "field 'logprob_context': must be a "
                                                       "number, got true"),
    (ExplainRecord, {**CARD, "topk_drop": {"1": None}}, "field 'topk_drop.1'"),
    (ExplainSummary, {"verdicts": [1]}, "field 'verdicts': must be a JSON object, got a list"),
    (ExplainSummary, {"sentences": {"lds": "x"}}, "field 'sentences.lds': must be a number"),
    (ExplainSummary, {"mechanism": {"context": [1.0]}}, "field 'mechanism.top_sentence'"),
    (ItemRecord, {"suite": "s", "generate_counterfactual": True},
     "generate_counterfactual and generate_parametric come together"),
    (ItemRecord, {"suite": "s", "loglik_choice": [1]}, "field 'loglik_choice': must be a string"),
])
def test_report_page_schemas_refuse_what_would_break_a_page(schema, value, where):
    with pytest.raises(DataError, match=re.escape(where)):
        check(schema, value, "summary.json")


def test_result_schemas_follow_the_run_command():
    assert result_schemas("eval")["summary.json"] is EVAL_SUMMARY
    assert result_schemas("probe-heads")["summary.json"] is HeadsSummary
    assert result_schemas("explain")["records.jsonl"] is ExplainRecord
    assert result_schemas("explain")["summary.json"] is ExplainSummary
    assert result_schemas("cpi-toy")["records.jsonl"] is JSON_OBJECT
    assert result_schemas(None)["summary.json"] is JSON_OBJECT
