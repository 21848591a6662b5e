"""Decoding methods against references: CAD with alpha 0 is greedy, batching changes nothing,
CAD and AdaCAD scores match a hand computation from two plain forward passes, JSD by hand."""

import math

import numpy as np
import pytest
import torch

from helpers import byte_tokenizer
from knowflow.data.suites import get_suite
from knowflow.errors import ConfigError
from knowflow.evaluation.decoding import (
    Method,
    generate_contrastive,
    jsd,
    parse_methods,
    score_contrastive,
)
from knowflow.evaluation.generate import generate
from knowflow.evaluation.items import render_prompts
from knowflow.evaluation.options import EvalConfig
from knowflow.lens.scorer import score_continuations


def scored_answers(items, prompts) -> list[list[str]]:
    return [[p.answer_prefix + it.counterfactual_answer, p.answer_prefix + it.parametric_answer]
            for it, p in zip(items, prompts, strict=True)]


@pytest.fixture(scope="module")
def setup(make_tiny_llama):
    tok = byte_tokenizer()
    model = make_tiny_llama(tok)
    items = get_suite("cf-capitals", limit=5) + get_suite("cf-quotes", limit=3)
    cfg = EvalConfig(prompt_format="chat")
    prompts, seqs = render_prompts(items, tok, cfg, True)
    _, base = render_prompts(items, tok, cfg, False)
    return tok, model, items, prompts, seqs, base


def test_cad_alpha_zero_is_greedy_exactly(setup):
    tok, model, items, prompts, seqs, base = setup
    cad0 = Method("cad", 0.0)
    assert generate_contrastive(model, tok, seqs, base, cad0, batch_size=4,
                                max_new_tokens=6) == \
        generate(model, tok, seqs, batch_size=4, max_new_tokens=6)
    conts = scored_answers(items, prompts)
    # plain scoring runs multi-token candidates in the prompt's own pass (evaluation.tree), the
    # contrastive scorer in a second pass: the same numbers up to float rounding
    cad = score_contrastive(model, tok, seqs, base, conts, cad0, batch_size=4)
    plain = score_continuations(model, tok, seqs, conts, batch_size=4)
    for a, b in zip(cad, plain, strict=True):
        assert [n for _, n in a] == [n for _, n in b]
        np.testing.assert_allclose([lp for lp, _ in a], [lp for lp, _ in b], atol=1e-4)


@pytest.mark.parametrize("method", [Method("cad", 1.0), Method("adacad")])
def test_batched_equals_one_at_a_time(setup, method):
    tok, model, items, prompts, seqs, base = setup
    batched = generate_contrastive(model, tok, seqs, base, method, batch_size=8,
                                   max_new_tokens=6)
    alone = [generate_contrastive(model, tok, [s], [b], method, max_new_tokens=6)[0]
             for s, b in zip(seqs, base, strict=True)]
    assert batched == alone
    conts = scored_answers(items, prompts)
    many = score_contrastive(model, tok, seqs, base, conts, method, batch_size=8)
    one = [score_contrastive(model, tok, [s], [b], [c], method)[0]
           for s, b, c in zip(seqs, base, conts, strict=True)]
    for a, b in zip(many, one, strict=True):
        assert [n for _, n in a] == [n for _, n in b]
        np.testing.assert_allclose([lp for lp, _ in a], [lp for lp, _ in b], atol=1e-4)


def _plain_logits(model, prompt: list[int], cont: list[int]) -> torch.Tensor:
    """Logits before each candidate token from one full forward pass: (len(cont), vocab)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt + cont])).logits[0]
    return out[len(prompt) - 1:-1].double()


@pytest.mark.parametrize("method", [Method("cad", 0.5), Method("cad", 2.0), Method("adacad")])
def test_scores_match_two_plain_forward_passes(setup, method):
    tok, model, items, prompts, seqs, base = setup
    conts = scored_answers(items, prompts)
    got = score_contrastive(model, tok, seqs, base, conts, method, batch_size=4)
    for s, b, cs, scores in zip(seqs, base, conts, got, strict=True):
        for text, (lp, n) in zip(cs, scores, strict=True):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            z_c, z_n = _plain_logits(model, s, ids), _plain_logits(model, b, ids)
            if method.base == "cad":
                alpha = torch.full((len(ids), 1), method.alpha, dtype=torch.double)
            else:  # AdaCAD: alpha_t is the JSD (bits) of the two distributions, by hand
                p, q = z_c.softmax(-1), z_n.softmax(-1)
                m = (p + q) / 2
                alpha = (0.5 * (p * (p / m).log2()).sum(-1)
                         + 0.5 * (q * (q / m).log2()).sum(-1))[:, None]
            logp = torch.log_softmax((1 + alpha) * z_c - alpha * z_n, dim=-1)
            want = float(logp[torch.arange(len(ids)), torch.tensor(ids)].sum())
            assert n == len(ids)
            assert lp == pytest.approx(want, abs=2e-3)


def test_jsd_against_hand_computation():
    rng = np.random.default_rng(0)
    z_p, z_q = rng.normal(size=(3, 7)) * 2, rng.normal(size=(3, 7)) * 2
    p = np.exp(z_p) / np.exp(z_p).sum(-1, keepdims=True)
    q = np.exp(z_q) / np.exp(z_q).sum(-1, keepdims=True)
    m = (p + q) / 2
    want = 0.5 * (p * np.log2(p / m)).sum(-1) + 0.5 * (q * np.log2(q / m)).sum(-1)
    got = jsd(torch.tensor(z_p), torch.tensor(z_q)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert jsd(torch.tensor(z_p), torch.tensor(z_p)).abs().max() < 1e-6
    far = jsd(torch.tensor([[50.0, 0.0]]), torch.tensor([[0.0, 50.0]]))
    assert float(far) == pytest.approx(1.0, abs=1e-6)  # disjoint: one bit


def test_method_registry():
    ms = parse_methods("greedy,cad,adacad,opinion,opinion+cad", "0,1")
    assert [m.label for m in ms] == ["greedy", "cad(a=0)", "cad(a=1)", "adacad", "opinion",
                                     "opinion+cad(a=0)", "opinion+cad(a=1)"]
    for bad, alpha in (("nope", 1.0), ("cad", "x"), ("cad", "-1"), ("cad", "nan"),
                       ("opinion+opinion", 1.0)):
        with pytest.raises(ConfigError):
            parse_methods(bad, alpha)
    z = torch.randn(2, 5)
    assert torch.equal(Method("cad", 0.0).logits(z, torch.randn(2, 5)), z)
    assert math.isclose(float(Method("cad", 1.0).logits(torch.ones(1, 1), torch.zeros(1, 1))),
                        2.0)
