"""The `heads` decoding method against references: gamma 1 and k 0 are greedy exactly, a
pruned head equals zeroing its slice of o_proj's input by hand, and calibration scores only
held-out items with heads chosen on the calibration split."""

import pytest
import torch

from helpers import byte_tokenizer
from knowflow.data.suites import get_suite
from knowflow.errors import ConfigError
from knowflow.evaluation.decoding import HEADS, generate_with, parse_methods, score_with
from knowflow.evaluation.heads_calibration import (
    CalibrationConfig,
    candidates,
    choose,
    split_items,
)
from knowflow.evaluation.items import render_prompts, scored_answers
from knowflow.evaluation.options import EvalConfig
from knowflow.evaluation.run import evaluate
from knowflow.evaluation.steer_heads import HeadSteering, steered
from knowflow.lens.arch import arch_of
from knowflow.lens.heads import head_shape


@pytest.fixture(scope="module")
def setup(make_tiny_llama):
    tok = byte_tokenizer()
    model = make_tiny_llama(tok)
    items = get_suite("cf-capitals", limit=4)
    prompts, seqs = render_prompts(items, tok, EvalConfig(prompt_format="chat"), True)
    return tok, model, items, seqs, scored_answers(items, prompts)


def _run(method, model, tok, seqs, conts):
    run = dict(batch_size=3, max_new_tokens=6)
    return (generate_with(method, model, tok, seqs, **run),
            score_with(method, model, tok, seqs, None, conts, batch_size=3))


def test_gamma_one_and_no_heads_equal_greedy_exactly(setup):
    tok, model, _, seqs, conts = setup
    greedy = _run(parse_methods("greedy")[0], model, tok, seqs, conts)
    for spec in ("heads:0.1+1.3x1", "heads:x0", "heads:x3"):
        (m,) = parse_methods(spec)
        assert m.base == HEADS and not m.contrastive
        assert _run(m, model, tok, seqs, conts) == greedy
    (changed,) = parse_methods("heads:0.1+1.3x0")
    assert _run(changed, model, tok, seqs, conts)[1] != greedy[1]  # the steering acts


@torch.no_grad()
def test_pruning_equals_zeroing_o_proj_input_by_hand(setup):
    tok, model, _, seqs, _ = setup
    _, _, d = head_shape(model)
    ids = torch.tensor([seqs[0]])

    def zero_head_1(module, args):
        x = args[0].clone()
        x[..., 1 * d:2 * d] = 0.0
        return (x,)

    handle = arch_of(model).o[1].register_forward_pre_hook(zero_head_1)
    ref = model(ids).logits
    handle.remove()
    with steered(model, HeadSteering(((1, 1),), 0.0)):
        got = model(ids).logits
    torch.testing.assert_close(got, ref, atol=0, rtol=0)
    with pytest.raises(ConfigError, match="outside the model"), \
            steered(model, HeadSteering(((9, 0),), 2.0)):
        pass


def test_spec_round_trip_and_errors():
    (m,) = parse_methods("heads:3.1+10.2x2.5")
    assert m.spec == "heads:3.1+10.2x2.5" and m.label == "heads:3.1+10.2x2.5"
    assert m.steering == HeadSteering(((3, 1), (10, 2)), 2.5)
    with pytest.raises(ConfigError, match="calibration"):
        _ = parse_methods("heads")[0].steering
    for bad in ("heads:3x", "heads:3.1x-1", "heads:a.bx2"):
        with pytest.raises(ConfigError, match="heads spec"):
            parse_methods(bad)


def test_split_candidates_and_choice():
    items = get_suite("cf-capitals", limit=10)
    cal, held = split_items({"cf-capitals": items}, 0.5, seed=1)
    assert len(cal) == 5 and len(held["cf-capitals"]) == 5
    assert {i.id for i in cal}.isdisjoint(i.id for i in held["cf-capitals"])
    assert split_items({"cf-capitals": items}, 0.5, seed=1)[0] == cal
    effects = torch.tensor([[-2.0, 1.0], [0.5, -0.1]]).numpy()
    cands = candidates(effects, CalibrationConfig(ks=(1, 2), gammas=(3.0,)))
    assert cands[0] == HeadSteering()
    assert HeadSteering(((0, 0),), 3.0) in cands and HeadSteering(((0, 1),), 0.0) in cands
    assert HeadSteering(((0, 0), (1, 1)), 3.0) in cands
    assert HeadSteering(((0, 1), (1, 0)), 0.0) in cands
    scored = [{"heads": [], "cf_acc": 0.5, "robustness": 0.9},
              {"heads": [[0, 0]], "cf_acc": 0.9, "robustness": 0.7},
              {"heads": [[0, 1]], "cf_acc": 0.7, "robustness": 0.86},
              {"heads": [[0, 1], [1, 0]], "cf_acc": 0.7, "robustness": 0.9}]
    assert choose(scored, 0.05)["heads"] == [[0, 1]]


def test_evaluate_calibrates_and_scores_held_out_items_only(setup):
    tok, model, _, _, _ = setup
    res = evaluate(model, "cf-capitals", tokenizer=tok, limit=6, scoring="loglik",
                   method="greedy,heads", conditions="conflicting,irrelevant",
                   n_bootstrap=20, batch_size=4)
    cal = res.config["heads_calibration"]
    assert cal["n_calibration"] == 3 and cal["n_held_out"] == {"cf-capitals": 3}
    assert res.config["method"].startswith("greedy,heads:")
    assert len(res.by_suite["cf-capitals"]) == 3
    assert set(res.conditions) == {"greedy", cal["spec"]}
