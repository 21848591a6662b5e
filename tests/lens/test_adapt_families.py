"""What a finetuning run trains on each family (`lens.adapt`): LoRA targets that follow the
architecture, and QK-only on fused qkv projections (GPT-2's Conv1D `c_attn`, GPT-NeoX's
per-head `query_key_value`, Phi-3's `qkv_proj` with grouped kv heads), where a gradient mask
keeps the value slice fixed bit for bit while the query and key slices train."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from knowflow.errors import ConfigError
from knowflow.lens.adapt import (
    TrainableConfig,
    check_qk_weight_decay,
    count_trainable,
    fused_qkv_masks,
    lora_targets,
    prepare_trainable,
)

SIZES = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
FUSED = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=64, n_embd=32, n_layer=2,
                                                    n_head=4, n_positions=64)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 {k: v for k, v in SIZES.items() if k != "num_key_value_heads"}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**SIZES, "pad_token_id": 0}),
}
OTHERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", SIZES),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(vocab_size=64, hidden_size=32, ffn_dim=64,
                                                 num_hidden_layers=2, num_attention_heads=4,
                                                 word_embed_proj_dim=32, pad_token_id=1,
                                                 max_position_embeddings=64)),
}


def _model(spec) -> nn.Module:
    config_cls, model_cls, sizes = spec
    torch.manual_seed(0)
    return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**sizes))


def _qkv_rows(family: str, proj: nn.Module) -> dict[str, torch.Tensor]:
    """The q, k and v slices of a fused projection's weight, each as (features, d_model),
    cut by the family's layout written out here independently of the library."""
    w = proj.weight.T if family == "gpt2" else proj.weight   # (out_features, d_model)
    d, heads = 8, 4
    if family == "gpt_neox":                               # per head [q_h k_h v_h]
        per = w.view(heads, 3, d, -1)
        return {"q": per[:, 0], "k": per[:, 1], "v": per[:, 2]}
    kv = 2 if family == "phi3" else 4                      # [q | k | v], grouped kv heads
    q, k = heads * d, kv * d
    return {"q": w[:q], "k": w[q:q + k], "v": w[q + k:]}


@pytest.mark.parametrize("family", sorted(FUSED))
def test_qk_only_on_a_fused_projection_moves_only_q_and_k(family):
    model = _model(FUSED[family])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    projs = {n: m for n, m in model.named_modules()
             if n.endswith(("c_attn", "query_key_value", "qkv_proj"))}
    slices_before = {n: {s: t.detach().clone() for s, t in _qkv_rows(family, m).items()}
                     for n, m in projs.items()}
    model = prepare_trainable(model, TrainableConfig(mode="qk_only"))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.rsplit(".", 2)[-2] in ("c_attn", "query_key_value", "qkv_proj")
                             for n in trainable)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2,
                            weight_decay=0.0)
    ids = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    for name, param in model.named_parameters():
        if name not in trainable:
            assert torch.equal(param, before[name]), name      # bitwise unchanged
    for name, proj in projs.items():
        after = _qkv_rows(family, proj)
        assert torch.equal(after["v"], slices_before[name]["v"]), name
        assert not torch.equal(after["q"], slices_before[name]["q"]), name
        assert not torch.equal(after["k"], slices_before[name]["k"]), name
        if getattr(proj, "bias", None) is not None:        # the bias's value slice too
            mask = fused_qkv_masks(model)[f"{name}.bias"]
            assert torch.equal(proj.bias[mask], before[f"{name}.bias"][mask])
            assert not torch.equal(proj.bias[~mask], before[f"{name}.bias"][~mask])
    trained, _ = count_trainable(model)                     # the q and k slices only
    per_layer = sum(t.numel() for s, t in _qkv_rows(family, next(iter(projs.values()))).items()
                    if s != "v")
    biases = sum(int((~m).sum()) for n, m in fused_qkv_masks(model).items()
                 if n.endswith("bias"))
    assert trained == len(projs) * per_layer + biases
    with pytest.raises(ConfigError, match="weight_decay"):
        check_qk_weight_decay(model, 0.01)


def test_qk_only_on_separate_projections_is_unchanged():
    model = prepare_trainable(_model(OTHERS["llama"]), TrainableConfig(mode="qk_only"))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith(("q_proj.weight", "k_proj.weight")) for n in trainable)
    assert fused_qkv_masks(model) == {}
    check_qk_weight_decay(model, 0.01)  # no fused slice to keep: weight decay is fine


@pytest.mark.parametrize(("family", "expected"), [
    ("llama", ["q_proj", "k_proj", "v_proj", "o_proj"]),   # knowflow's default, unchanged
    ("opt", ["q_proj", "v_proj"]),                          # peft's default for OPT
    ("gpt2", ["c_attn"]), ("gpt_neox", ["query_key_value"]),
    ("phi3", ["qkv_proj", "o_proj"]),                       # peft has none: the arch map's
])
def test_lora_targets_follow_the_family(family, expected):
    model = _model({**FUSED, **OTHERS}[family])
    assert lora_targets(model) == expected
    assert lora_targets(model, ("fc2",)) == ["fc2"]        # given targets win
    peft_model = prepare_trainable(model, TrainableConfig(mode="lora"))
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in
               peft_model.named_parameters() if ".lora_A" in n}
    assert adapted == set(expected)


def test_no_default_lora_targets_is_a_clear_error():
    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)
    with pytest.raises(ConfigError, match="lora_targets.*no default LoRA targets|"
                                          "no default LoRA targets.*proj"):
        lora_targets(Bare())
