"""The tracker's one-pass scoring (tiny random Llama, byte tokenizer): the log-likelihood choice
and the attention mass from the same prompt pass equal the separate scorer and the separate
attention-mass probe; the tracker's record is the same either way."""

import dataclasses

import pytest

from knowflow.data.suites import get_suite
from knowflow.evaluation.items import evaluate_items
from knowflow.evaluation.options import EvalConfig
from knowflow.probes.examples import ProbeExample, find_text
from knowflow.probes.mass import attention_mass
from knowflow.train.reliance_pass import loglik_and_attention
from knowflow.train.tracker import RelianceTracker, TrackerConfig


@pytest.fixture(scope="module")
def model(make_tiny_llama, tok):
    return make_tiny_llama(tok, layers=3)


ITEMS = get_suite("cf-capitals", limit=5) + get_suite("cf-world", limit=4)


@pytest.mark.parametrize("fmt", ["chat", "plain"])
def test_one_pass_equals_separate_scorer_and_probe(model, tok, fmt):
    cfg = EvalConfig(scoring="loglik", prompt_format=fmt, known_filter=False, batch_size=4)
    recs, masses = loglik_and_attention(model, tok, ITEMS, cfg)
    ref = evaluate_items(model, tok, "x", ITEMS, cfg, None)
    for r, q in zip(recs, ref, strict=True):
        assert r["prompt"] == q["prompt"]
        for key in ("counterfactual_logprob", "parametric_logprob"):
            assert r["loglik"][key] == pytest.approx(q["loglik"][key], abs=1e-4)
        assert r["loglik"]["choice"] == q["loglik"]["choice"]
    examples = [ProbeExample(q["prompt"], context=find_text(q["prompt"], it.context))
                for q, it in zip(ref, ITEMS, strict=True)]
    probe = attention_mass(model, tok, examples)
    for mine, theirs in zip(masses, probe, strict=True):
        assert mine == pytest.approx(theirs["layer_mean"], abs=1e-5)
        assert len(mine) == 3 and all(0 < m < 1 for m in mine)


def test_tracker_record_same_with_one_pass_or_two(model, tok):
    items = {"cf-capitals": ITEMS[:5], "cf-world": ITEMS[5:]}
    fused = RelianceTracker(tok, TrackerConfig(batch_size=4, dtype="float32"),
                             items=items).measure(model)
    two = RelianceTracker(tok, TrackerConfig(batch_size=4, dtype="float32"), items=items)
    # scoring "both" takes the separate attention pass; compare its loglik side
    two.cfg = dataclasses.replace(two.cfg, scoring="both")
    sep = two.measure(model)
    for key in ("cf_acc", "param_acc", "cf-capitals/cf_acc", "cf-world/cf_acc"):
        assert fused[key] == sep[key]
    assert fused["attn_context"] == pytest.approx(sep["attn_context"], abs=1e-5)
    assert fused["attn_context_layers"] == pytest.approx(sep["attn_context_layers"], abs=1e-5)
