"""Sublayer knockout: zero layers is the identity; zeroing everywhere matches zeroed weights."""

from __future__ import annotations

import copy

import pytest
import torch

from helpers import SHARP, byte_bpe
from knowflow.errors import ConfigError
from knowflow.probes.examples import ProbeExample
from knowflow.probes.spans import locate
from knowflow.probes.sublayer import (
    SublayerConfig,
    sublayer_knockout,
    sublayer_probs,
    summarize_sublayer,
    zeroed_sublayers,
)

PROMPT = ProbeExample(prompt="The capital of France is", subject="France", answer="Paris")


@torch.no_grad()
def test_zero_layers_is_the_identity(make_tiny_llama):
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=4, **SHARP)
    loc = locate(tok, PROMPT)
    ids = torch.tensor([loc.input_ids])
    plain = model(ids).logits
    with zeroed_sublayers(model, {}):
        assert torch.equal(model(ids).logits, plain)
    target = int(plain[0, -1].argmax())
    probs = sublayer_probs(model, loc, target, [("mlp", loc.subject, None),
                                                ("attn", (), (0, 3)), ("mlp", (), (1, 2))])
    assert torch.equal(probs, torch.full_like(probs, probs[0].item()))
    torch.testing.assert_close(probs[0], plain[0, -1].softmax(-1)[target])
    assert not model.model.layers[0].mlp._forward_hooks  # hooks removed


@pytest.mark.parametrize("kind,weight", [("mlp", "mlp.down_proj"), ("attn", "self_attn.o_proj")])
@torch.no_grad()
def test_zeroing_everywhere_matches_zeroed_weights(make_tiny_llama, kind, weight):
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=4, **SHARP)
    loc = locate(tok, PROMPT)
    ids = torch.tensor([loc.input_ids])
    reference = copy.deepcopy(model)
    for layer in (1, 2):
        module = reference.model.layers[layer].get_submodule(weight)
        module.weight.zero_()
    target = int(model(ids).logits[0, -1].argmax())
    everywhere = tuple(range(loc.last + 1))
    probs = sublayer_probs(model, loc, target, [(kind, everywhere, (1, 2))])
    expected = reference(ids).logits[0, -1].softmax(-1)[target]
    torch.testing.assert_close(probs[0], expected, atol=1e-6, rtol=1e-5)
    assert abs(probs[0] - model(ids).logits[0, -1].softmax(-1)[target]) > 1e-4


def test_records_and_config_errors(make_tiny_llama):
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=4, **SHARP)
    records = sublayer_knockout(model, tok, [PROMPT],
                                SublayerConfig(window=1, known_only=False))
    assert len(records) == 2 * 2 * 4
    summary = summarize_sublayer(records, 4)
    assert set(summary) == {"mlp@subject", "mlp@last", "attn@subject", "attn@last"}
    with pytest.raises(ConfigError, match="larger than the model"):
        sublayer_knockout(model, tok, [PROMPT], SublayerConfig(window=9))
    with pytest.raises(ConfigError, match="unknown sublayer"):
        sublayer_knockout(model, tok, [PROMPT], SublayerConfig(window=1, sublayer=("ln",)))
