"""Named hook points against references: HF's own hidden states, the residual sum of a
Llama block, and the model's logits; and the shared sweep's records against a hand loop."""

from __future__ import annotations

import pytest
import torch

from helpers import SHARP, byte_bpe, tiny_gpt2
from knowflow.errors import KnowflowError
from knowflow.lens.hooks import captured, hook_name, hook_points, hooked
from knowflow.probes.sweep import layer_curves

TEXT = "The Eiffel Tower is located in the city of"


def _ids(tok):
    return torch.tensor([tok(TEXT)["input_ids"]])


def test_names_in_forward_order(make_tiny_llama):
    tok = byte_bpe()
    names = list(hook_points(make_tiny_llama(tok, layers=2, **SHARP)))
    assert names == [f"blocks.{layer}.{point}" for layer in (0, 1) for point in
                     ("attn.q", "attn.k", "attn.v", "attn.z", "attn.out", "mlp.out",
                      "resid_post")]
    assert len(hook_points(tiny_gpt2(tok, layers=3))) == 3 * 7
    with pytest.raises(KnowflowError, match="unknown hook point"):
        hook_name(0, "resid_pre")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@torch.no_grad()
def test_resid_post_is_hf_hidden_state_and_last_one_gives_the_logits(make_tiny_llama,
                                                                      family):
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=4, **SHARP) if family == "llama" else tiny_gpt2(tok)
    ids = _ids(tok)
    out = model(ids, output_hidden_states=True)
    with captured(model) as acts:
        logits = model(ids).logits
    n = model.config.num_hidden_layers
    for layer in range(n - 1):  # HF's last hidden state is after the final norm
        torch.testing.assert_close(acts[hook_name(layer, "resid_post")],
                                   out.hidden_states[layer + 1])
    decoder = model.get_decoder()
    norm = getattr(decoder, "norm", None) or decoder.ln_f
    last = acts[hook_name(n - 1, "resid_post")]
    torch.testing.assert_close(model.get_output_embeddings()(norm(last)), logits)


@torch.no_grad()
def test_llama_block_is_residual_plus_attn_out_plus_mlp_out(make_tiny_llama):
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=3, **SHARP)
    with captured(model) as acts:
        model(_ids(tok))
    for layer in (1, 2):
        before = acts[hook_name(layer - 1, "resid_post")]
        summed = before + acts[hook_name(layer, "attn.out")] + acts[hook_name(layer, "mlp.out")]
        torch.testing.assert_close(summed, acts[hook_name(layer, "resid_post")])


@torch.no_grad()
def test_hooked_edit_changes_the_output_and_is_removed(make_tiny_llama):
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=2, **SHARP)
    ids = _ids(tok)
    plain = model(ids).logits
    with hooked(model, {"blocks.1.resid_post": torch.zeros_like}):
        zeroed = model(ids).logits
    bias = model.get_output_embeddings().bias
    torch.testing.assert_close(zeroed, torch.zeros_like(plain) if bias is None
                               else bias.expand_as(plain))
    with hooked(model, {"blocks.0.mlp.out": lambda t: None}):  # None keeps the output
        assert torch.equal(model(ids).logits, plain)
    assert torch.equal(model(ids).logits, plain)  # hooks removed
    with (pytest.raises(KnowflowError, match="no hook point 'blocks.2.mlp.out'"),
          hooked(model, {"blocks.2.mlp.out": lambda t: None})):
        pass


def test_layer_curves_by_hand():
    recs = [{"g": "a", "layer": 0, "rel_change": -0.5, "example": "1"},
            {"g": "a", "layer": 0, "rel_change": -0.1, "example": "2"},
            {"g": "a", "layer": 2, "rel_change": 0.2, "example": "1"},
            {"g": "b", "layer": 1, "rel_change": -0.4, "example": "1"}]
    s = layer_curves(recs, lambda r: r["g"], 3)
    assert s["a"]["mean_rel_change"] == [pytest.approx(-0.3), None, 0.2]
    assert (s["a"]["most_negative_layer"], s["a"]["n_examples"]) == (0, 2)
    assert s["b"] == {"mean_rel_change": [None, -0.4, None], "most_negative_layer": 1,
                      "most_negative_value": -0.4, "n_examples": 1}
