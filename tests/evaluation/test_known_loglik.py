"""The known-facts pass under log-likelihood scoring (tiny random Llama, byte tokenizer): known
means the memorized answer is the likelier continuation of the question alone, checked against
one full forward pass per answer; generation runs only where asked; the pass is off by default
under log-likelihood scoring alone; stage times are reported; batch size 0 resolves by device."""

import pytest

from knowflow.data.prompts import PromptConfig, render
from knowflow.data.suites import get_suite
from knowflow.errors import ConfigError
from knowflow.evaluation.loglik import score_naive
from knowflow.evaluation.options import EvalConfig, known_by, known_filter
from knowflow.evaluation.run import evaluate
from knowflow.lens.prompt_batches import encode_prompts, fit_batch_size


@pytest.fixture(scope="module")
def model(make_tiny_llama, tok):
    return make_tiny_llama(tok)


SUITES = ["cf-capitals", "cf-world", "cf-bio", "cf-quotes"]  # the four built-in suites


@pytest.mark.parametrize("fmt", ["chat", "plain"])
def test_known_by_loglik_against_full_forward(model, tok, fmt, monkeypatch):
    import sys

    items = sys.modules["knowflow.evaluation.items"]  # the known-facts pass

    def no_generation(*a, **k):
        raise AssertionError("generation ran under --scoring loglik")

    monkeypatch.setattr(items, "generate", no_generation)
    res = evaluate(model, SUITES, tokenizer=tok, scoring="loglik", prompt_format=fmt, limit=4,
                   n_bootstrap=10, known_filter=True)
    for suite, recs in res.by_suite.items():
        for rec, it in zip(recs, get_suite(suite, limit=4), strict=True):
            p = render(it, tok, PromptConfig(fmt, use_context=False))
            seq = encode_prompts(tok, [p.text], [p.add_special_tokens])[0]
            cf, _ = score_naive(model, tok, seq, p.answer_prefix + it.counterfactual_answer)
            par, _ = score_naive(model, tok, seq, p.answer_prefix + it.parametric_answer)
            nc = rec["no_context_loglik"]
            assert nc["counterfactual_logprob"] == pytest.approx(cf, abs=1e-4)
            assert nc["parametric_logprob"] == pytest.approx(par, abs=1e-4)
            assert rec["known"] == (nc["parametric_logprob"] > nc["counterfactual_logprob"])
            assert "no_context_output" not in rec
    share = res.summary["cf-quotes"]["loglik"]["known_share"]
    assert share == sum(r["known"] for r in res.by_suite["cf-quotes"]) / 4
    assert set(res.stage_seconds) == {"loglik", "known facts"}
    assert res.summary["cf-quotes"]["loglik"]["known_by"] == "loglik"


def test_the_pass_is_off_by_default_under_loglik_alone_and_on_under_generation(model, tok,
                                                                               monkeypatch):
    """Under --scoring loglik no no-context pass runs unless asked; the summary says the known
    block is off. Under generation it runs by default, by generation."""
    import sys

    items = sys.modules["knowflow.evaluation.items"]
    ran = []
    monkeypatch.setattr(items, "_mark_known", lambda *a, **k: ran.append(a[2]))
    res = evaluate(model, "cf-quotes", tokenizer=tok, scoring="loglik", limit=3, n_bootstrap=10)
    assert ran == [] and set(res.stage_seconds) == {"loglik"}
    block = res.summary["cf-quotes"]["loglik"]
    assert block["known_by"] == "off" and "known" not in block and "known_share" not in block
    assert all("known" not in r for r in res.by_suite["cf-quotes"])
    assert known_filter(EvalConfig(scoring="loglik")) is False
    assert known_filter(EvalConfig(scoring="loglik", known_filter=True)) is True
    assert known_filter(EvalConfig(scoring="generate")) is True
    assert known_filter(EvalConfig(scoring="both", known_filter=False)) is False
    res = evaluate(model, "cf-quotes", tokenizer=tok, scoring="generate", limit=3,
                   n_bootstrap=10, max_new_tokens=2)
    assert ran == ["cf-quotes"] and res.summary["cf-quotes"]["generate"]["known_by"] == "generate"


def test_known_by_choice_and_no_context(model, tok):
    assert known_by(EvalConfig(scoring="loglik")) == "loglik"
    assert known_by(EvalConfig(scoring="both")) == "generate"
    assert known_by(EvalConfig(scoring="generate", known_by="loglik")) == "loglik"
    res = evaluate(model, "cf-quotes", tokenizer=tok, scoring="loglik", known_by="generate",
                   limit=3, n_bootstrap=10, known_filter=True)
    assert all("no_context_output" in r for r in res.by_suite["cf-quotes"])
    # --no-context: the scores are already without the context; no second pass
    res = evaluate(model, "cf-quotes", tokenizer=tok, scoring="loglik", use_context=False,
                   limit=3, n_bootstrap=10, known_filter=True)
    for r in res.by_suite["cf-quotes"]:
        assert r["known"] == (r["loglik"]["choice"] == "parametric")
    with pytest.raises(ConfigError):
        EvalConfig(known_by="sometimes").validate()


def test_batch_size_zero_is_auto(model, tok):
    assert fit_batch_size(model, 100, 24, fallback=16) == 16  # CPU: the fallback
    res = evaluate(model, "cf-capitals", tokenizer=tok, scoring="loglik", batch_size=0, limit=2,
                   n_bootstrap=10)
    assert res.config["batch_size"] == 16
    with pytest.raises(ConfigError):
        EvalConfig(batch_size=-1).validate()
