"""Attention-edge knockout against references: the unmodified model, a hand-built 4D mask,
and the last token run alone."""

from __future__ import annotations

import pytest
import torch

from helpers import SHARP, byte_bpe, tiny_gpt2
from knowflow.errors import ConfigError, KnowflowError
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.probes.common import window
from knowflow.probes.examples import ProbeExample
from knowflow.probes.knockout import (
    KnockoutConfig,
    knockout,
    knockout_logits,
    summarize_knockout,
)
from knowflow.probes.spans import locate

PROMPT = ProbeExample(prompt="The Eiffel Tower is located in the city of",
                      subject="The Eiffel Tower", relation="is located in the city of",
                      answer="Paris")


@pytest.fixture
def setup(make_tiny_llama):
    """(a fresh 4-layer sharp tiny Llama, its tokenizer, the located prompt)."""
    tok = byte_bpe()
    return make_tiny_llama(tok, layers=4, **SHARP), tok, locate(tok, PROMPT)


@torch.no_grad()
def test_plan_without_blocks_gives_exactly_the_unmodified_logits(setup):
    model, _, loc = setup
    ids = torch.tensor([loc.input_ids])
    plain = model(ids).logits
    with intercepted(model) as layer_of:
        same = model(ids, knowflow_plan=AttentionPlan(layer_of=layer_of)).logits
    assert torch.equal(plain, same)
    assert model.config._attn_implementation == "sdpa"  # restored


@torch.no_grad()
def test_key_bias_zero_changes_nothing_and_a_huge_one_blocks_the_keys(setup):
    """A per-key bias of 0 gives the unmodified model; a bias of -1e4 on some keys in one
    layer and head gives that head's knockout of those keys (blocked for every query)."""
    model, _, loc = setup
    ids = torch.tensor([loc.input_ids])
    seq, heads = ids.shape[1], model.config.num_attention_heads
    plain = model(ids).logits
    keys = torch.tensor([2, 3, 5])
    bias = torch.zeros(1, heads, seq)
    bias[0, 1, keys] = -1e4
    block = torch.zeros(1, heads, seq, seq, dtype=torch.bool)
    block[0, 1, :, keys] = True                      # every query; key 0 stays for row 0
    with intercepted(model) as layer_of:
        zero = model(ids, knowflow_plan=AttentionPlan(
            key_bias={2: torch.zeros(1, 1, seq)}, layer_of=layer_of)).logits
        biased = model(ids, knowflow_plan=AttentionPlan(key_bias={2: bias},
                                                        layer_of=layer_of)).logits
        cut = model(ids, knowflow_plan=AttentionPlan(block={2: block}, layer_of=layer_of)).logits
    assert torch.allclose(zero, plain, atol=1e-5)
    assert torch.allclose(biased, cut, atol=1e-5)
    assert (biased - plain).abs().max() > 1e-3


@pytest.mark.parametrize("shared_prefix", [True, False])
@torch.no_grad()
def test_empty_edge_set_matches_the_unmodified_model(setup, shared_prefix):
    model, _, loc = setup
    ref = model(torch.tensor([loc.input_ids])).logits[0, -1]
    with intercepted(model) as layer_of:
        logits = knockout_logits(model, loc, [((), None), ((), (0, 3)), ((), (1, 2))],
                                 shared_prefix=shared_prefix, layer_of=layer_of)
    assert torch.equal(logits[0], logits[1]) and torch.equal(logits[0], logits[2])
    torch.testing.assert_close(logits[0], ref, atol=1e-5, rtol=1e-5)


def _diagonal_only_reference(model_eager, ids: torch.Tensor) -> torch.Tensor:
    """Logits at the last position with a hand-built 4D mask: causal, except that the last
    row sees only itself."""
    n = ids.shape[1]
    keep = torch.tril(torch.ones(n, n, dtype=torch.bool))
    keep[-1, :-1] = False
    mask = torch.zeros(1, 1, n, n).masked_fill(~keep, torch.finfo(torch.float32).min)
    return model_eager(ids, attention_mask=mask).logits[0, -1]


@pytest.mark.parametrize("shared_prefix", [True, False])
@torch.no_grad()
def test_every_edge_but_the_diagonal_matches_hand_masking(setup, make_tiny_llama,
                                                          shared_prefix):
    model, tok, loc = setup
    eager = make_tiny_llama(tok, layers=4, **(SHARP | {"attn": "eager"}))  # same weights
    ids = torch.tensor([loc.input_ids])
    everything_else = tuple(range(loc.last))
    with intercepted(model) as layer_of:
        logits = knockout_logits(model, loc, [((), None), (everything_else, (0, 3))],
                                 shared_prefix=shared_prefix, layer_of=layer_of)
    torch.testing.assert_close(logits[1], _diagonal_only_reference(eager, ids),
                               atol=1e-5, rtol=1e-5)
    # seeing only itself in every layer, the last token computes what it computes alone
    alone = model(ids[:, -1:], position_ids=torch.tensor([[loc.last]])).logits[0, -1]
    torch.testing.assert_close(logits[1], alone, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(logits[0], logits[1], atol=1e-3)  # and the knockout mattered


@torch.no_grad()
def test_gpt2_style_models_are_intercepted_the_same_way():
    tok = byte_bpe()
    model, loc = tiny_gpt2(tok), locate(tok, PROMPT)
    ids = torch.tensor([loc.input_ids])
    with intercepted(model) as layer_of:
        logits = knockout_logits(model, loc, [((), None), (tuple(range(loc.last)), (0, 2))],
                                 layer_of=layer_of)
    torch.testing.assert_close(logits[0], model(ids).logits[0, -1], atol=1e-5, rtol=1e-5)
    alone = model(ids[:, -1:], position_ids=torch.tensor([[loc.last]])).logits[0, -1]
    torch.testing.assert_close(logits[1], alone, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_rows_are_independent_and_heads_select(setup):
    model, _, loc = setup
    subject = loc.subject
    a, b = (subject, (0, 1)), ((loc.last,), (2, 3))
    with intercepted(model) as layer_of:
        both = knockout_logits(model, loc, [a, b], layer_of=layer_of)
        only_a = knockout_logits(model, loc, [a], layer_of=layer_of)
        only_b = knockout_logits(model, loc, [b], layer_of=layer_of)
        all_heads = knockout_logits(model, loc, [a], heads=(0, 1, 2, 3), layer_of=layer_of)
        some_heads = knockout_logits(model, loc, [a], heads=(1,), layer_of=layer_of)
        base = knockout_logits(model, loc, [((), None)], layer_of=layer_of)
    torch.testing.assert_close(both[0], only_a[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(both[1], only_b[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(all_heads, only_a, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(some_heads, only_a, atol=1e-4)
    assert not torch.allclose(some_heads, base, atol=1e-4)


def test_windows():
    assert window(0, 9, 30) == (0, 4)
    assert window(15, 9, 30) == (11, 19)
    assert window(29, 9, 30) == (25, 29)
    assert window(5, 10, 30) == (1, 10)
    assert window(2, 1, 4) == (2, 2)


def test_knockout_records_and_summary(setup):
    model, tok, _ = setup
    cfg = KnockoutConfig(window=2, known_only=False)
    records = knockout(model, tok, [PROMPT, PROMPT], cfg)
    assert len(records) == 2 * 3 * 4
    assert {r["source"] for r in records} == {"subject", "non_subject", "last"}
    for r in records:
        assert r["rel_change"] == pytest.approx((r["p"] - r["p_base"]) / r["p_base"])
    summary = summarize_knockout(records, 4)
    for source in ("subject", "non_subject", "last"):
        curve = summary[source]["mean_rel_change"]
        assert len(curve) == 4
        assert summary[source]["most_negative_layer"] == min(range(4), key=curve.__getitem__)
        # PROMPT has no id, so the two copies are examples "0" and "1"
        assert summary[source]["n_examples"] == 2
        # the same prompt twice: the mean curve is each copy's own curve, layer by layer
        for example in ("0", "1"):
            own = {r["layer"]: r["rel_change"] for r in records
                   if r["source"] == source and r["example"] == example}
            assert curve == pytest.approx([own[layer] for layer in range(4)])


def test_summary_means_by_hand():
    records = [{"example": e, "source": "subject", "layer": layer, "rel_change": v}
               for e, vals in (("a", [-0.1, -0.5, 0.2]), ("b", [-0.3, -0.1, 0.0]))
               for layer, v in enumerate(vals)]
    s = summarize_knockout(records, 3)["subject"]
    assert s["mean_rel_change"] == pytest.approx([-0.2, -0.3, 0.1])
    assert s["most_negative_layer"] == 1 and s["n_examples"] == 2


def test_bad_configs(setup):
    model, tok, _ = setup
    with pytest.raises(ConfigError, match="larger than the model"):
        knockout(model, tok, [PROMPT], KnockoutConfig(window=5))
    with pytest.raises(ConfigError, match="head 7"):
        knockout(model, tok, [PROMPT], KnockoutConfig(window=2, heads=(7,)))
    with pytest.raises(KnowflowError, match="unknown source"):
        knockout(model, tok, [PROMPT], KnockoutConfig(window=2, source=("verbs",)))
    with pytest.raises(KnowflowError, match="has no subject"):
        knockout(model, tok, [ProbeExample(prompt="The city of")], KnockoutConfig(window=2))


def test_unsupported_architecture():
    class NotAnLM(torch.nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(KnowflowError, match="unsupported architecture NotAnLM"):
        knockout(NotAnLM(), byte_bpe(), [PROMPT])
