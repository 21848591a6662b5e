"""The architecture map and the per-head hook points on a tiny random model of each listed
family (built from its config class, no downloads): every part is found, every point has its
shape, an identity edit changes no bit, and zeroed values give zero head outputs."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from knowflow.lens.arch import FAMILIES, arch_of
from knowflow.lens.hooks import captured, hook_name, hook_points, hooked

SIZES = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", SIZES),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", SIZES),
    "mistral": ("MistralConfig", "MistralForCausalLM", SIZES),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {**SIZES, "head_dim": 8}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**SIZES, "pad_token_id": 0,
                                                "bos_token_id": 1, "eos_token_id": 2}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=64, n_embd=32, n_layer=2,
                                                    n_head=4, n_positions=64)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 {k: v for k, v in SIZES.items() if k != "num_key_value_heads"}),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(vocab_size=64, hidden_size=32, ffn_dim=64,
                                                 num_hidden_layers=2, num_attention_heads=4,
                                                 word_embed_proj_dim=32, pad_token_id=1,
                                                 max_position_embeddings=64)),
}
BATCH, SEQ, D_MODEL = 2, 5, 32


def _model(family: str):
    config_cls, model_cls, sizes = CONFIGS[family]
    torch.manual_seed(0)
    return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**sizes)).eval()


def _ids() -> torch.Tensor:
    return torch.randint(3, 64, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))


def test_every_family_is_tested():
    assert set(CONFIGS) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_the_map_finds_every_part(family):
    model = _model(family)
    arch = arch_of(model)
    assert arch.paths is FAMILIES[family]
    assert arch.n_layers == 2 and len(arch.attn) == len(arch.mlp) == len(arch.o) == 2
    assert arch.decoder is model.get_decoder()
    assert arch.unembed is model.get_output_embeddings()
    assert isinstance(arch.final_norm, nn.Module)
    assert (arch.qkv is None) == (arch.q is not None)  # separate q/k/v, or one fused qkv
    for parts in (arch.attn, arch.mlp, arch.o, arch.q or arch.qkv):
        assert all(isinstance(p, nn.Module) for p in parts)
    n_kv = 2 if family not in ("gpt2", "gpt_neox", "opt") else 4
    assert (arch.n_heads, arch.n_kv_heads, arch.head_dim) == (4, n_kv, 8)


@pytest.mark.parametrize("family", sorted(CONFIGS))
@torch.no_grad()
def test_hook_points_have_their_shapes(family):
    model = _model(family)
    arch = arch_of(model)
    with captured(model) as acts:
        model(_ids())
    assert list(acts) == list(hook_points(model))  # every point fired
    heads = {"attn.q": arch.n_heads, "attn.k": arch.n_kv_heads, "attn.v": arch.n_kv_heads,
             "attn.z": arch.n_heads}
    for layer in range(arch.n_layers):
        for point, n in heads.items():
            assert acts[hook_name(layer, point)].shape == (BATCH, SEQ, n, arch.head_dim)
        for point in ("attn.out", "mlp.out", "resid_post"):
            assert acts[hook_name(layer, point)].shape == (BATCH, SEQ, D_MODEL)


@pytest.mark.parametrize("family", sorted(CONFIGS))
@torch.no_grad()
def test_per_head_edits_reach_the_right_slice(family):
    model = _model(family)
    ids = _ids()
    plain = model(ids).logits
    names = [hook_name(1, p) for p in ("attn.q", "attn.k", "attn.v", "attn.z", "mlp.out")]
    with hooked(model, {name: torch.clone for name in names}):  # replaced by itself
        assert torch.equal(model(ids).logits, plain)
    z = hook_name(1, "attn.z")
    with hooked(model, {hook_name(1, "attn.v"): torch.zeros_like}), captured(model, [z]) as acts:
        zeroed = model(ids).logits
    assert not acts[z].any()  # no values, no head outputs
    assert not torch.allclose(zeroed, plain)
    with hooked(model, {hook_name(1, "attn.q"): lambda q: q * 3}):
        assert not torch.allclose(model(ids).logits, plain)
