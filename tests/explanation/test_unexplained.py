"""An item whose answer cannot be explained (the model generated nothing) is one record with
the reason, counted in the summary; the run goes on, saves, and its folder reports; run
folders written before the field existed still load and report."""

import dataclasses
import json

import pytest

import knowflow
from knowflow.explanation import run as explain_run
from knowflow.report.explain import render_explain
from knowflow.store.checks import check_run_files


@pytest.mark.parametrize("levels", [("source",), ("source", "sentences")])
def test_an_empty_answer_is_one_record_and_the_run_goes_on(lm, tmp_path, monkeypatch, levels):
    model, tok = lm
    real_generate, real_from = explain_run.generate, explain_run.generate_from
    first = {}

    def silent_first(texts):          # the first item's answer with its context: nothing
        first.setdefault("done", False)
        if not first["done"]:
            first["done"] = True
            texts[0] = ""
        return texts

    def generate(model_, tok_, seqs, stage="generate", **kw):
        got = real_generate(model_, tok_, seqs, stage=stage, **kw)
        return silent_first(got) if stage == "generate with context" else got

    monkeypatch.setattr(explain_run, "generate", generate)
    monkeypatch.setattr(explain_run, "generate_from",
                        lambda *a, **k: silent_first([real_from(*a, **k)])[0])
    res = knowflow.explain(model, "needle-cf", tokenizer=tok, limit=3, levels=levels,
                           ablations=8, holdout=0, max_new_tokens=3)
    assert len(res.records) == 3
    missed = [r for r in res.records if r["unexplained"]]
    assert len(missed) == 1 and missed[0]["unexplained"] == "the model generated nothing"
    assert missed[0]["verdict"] is None and "sentences" not in missed[0]
    assert all(r["verdict"] is not None for r in res.records if not r["unexplained"])
    assert res.summary["unexplained"] == {"n_items": 1,
                                          "reasons": {"the model generated nothing": 1}}
    assert sum(res.summary["verdicts"].values()) == 2
    assert "1 of 3 could not be explained" in res.summary["findings"]["verdict"]
    out = res.save(tmp_path / "run")
    check_run_files(out)                         # the report's schema check passes
    assert "not explained" in render_explain(out)


def test_a_run_folder_written_before_the_field_still_reports(lm, tmp_path):
    model, tok = lm
    res = knowflow.explain(model, "needle-cf", tokenizer=tok, limit=2, levels=("source",),
                           max_new_tokens=3)
    out = res.save(tmp_path / "old")
    lines = (out / "records.jsonl").read_text().splitlines()
    old = [{k: v for k, v in json.loads(line).items() if k != "unexplained"} for line in lines]
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    check_run_files(out)
    page = render_explain(out)
    assert "not explained" not in page and old[0]["id"] in page


def test_max_memory_sizes_the_trie_passes_and_changes_no_score(lm):
    """--max-memory lowers the new tokens a trie pass may hold (recorded in the config) to
    what the budget leaves beside the weights and the prompt's keys and values; the scores
    are those of unbounded passes."""
    from knowflow.lens.memory import inference_bytes, shape_of

    model, tok = lm
    shape = shape_of(model)
    budget = shape.weights + inference_bytes(shape, 1, 2048, cached=400 + 4096,
                                             logit_positions=256)   # about 4k new tokens
    run = dict(tokenizer=tok, limit=1, levels=("source", "sentences"), ablations=16,
               max_new_tokens=3)
    free = knowflow.explain(model, "needle-cf", **run)
    tight = knowflow.explain(model, "needle-cf", max_memory=budget / 2 ** 30, **run)
    assert 2048 <= tight.config["score_tokens"] < 8192 < free.config["score_tokens"]
    a, b = free.records[0], tight.records[0]
    assert [s["attribution"] for s in a["sentences"]] == pytest.approx(
        [s["attribution"] for s in b["sentences"]], abs=1e-4)


def test_max_memory_counts_the_generation_batch_as_the_items_there_are(lm):
    """One long item is generated one prompt at a time: a budget that holds one prompt's
    generation but not `batch_size` of them runs it, and refuses eight such items."""
    from knowflow.config import ConfigError
    from knowflow.data.suites import get_suite
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.prompts import encode, rendered
    from knowflow.explanation.run import _fit_memory
    from knowflow.lens.memory import eval_bytes, shape_of

    model, tok = lm
    (item,) = get_suite("needle-cf", 0, 1)
    item = dataclasses.replace(item, context=" ".join([item.context] * 40))  # a long context
    longest = len(encode(tok, [rendered(item, tok, "chat")])[0])
    shape = shape_of(model)
    one, eight = (shape.weights + eval_bytes(shape, longest, 16)(n) for n in (1, 8))
    budget = (one + eight) / 2 / 2 ** 30
    cfg = ExplainConfig(max_memory=budget, prompt_format="chat", max_new_tokens=16)
    assert _fit_memory(model, tok, [item], cfg).score_tokens >= 2048
    with pytest.raises(ConfigError, match="batch_size="):
        _fit_memory(model, tok, [item] * 8, cfg)
