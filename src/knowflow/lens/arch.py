"""Where the parts of a decoder-only HF model live: the one architecture map.

`FAMILIES` names, per model family (`config.model_type`), the module path of each part: the
list of blocks (from the decoder), a block's attention and MLP, the attention's q/k/v
projections (or its fused qkv projection and how that splits) and output projection, the
final norm (from the decoder) and the unembedding (from the causal LM). A family not listed
is read by the usual names (`_GUESS`). Probes hook sublayers and intercept attention through
transformers' attention interface, so a model is supported when its attention dispatches
through `ALL_ATTENTION_FUNCTIONS` (Llama, Mistral, Qwen, GPT-2 and most current causal LMs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import nn

from knowflow.errors import KnowflowError


@dataclass(frozen=True)
class Paths:
    """One family's module paths (dotted attribute names)."""

    layers: str                         # from the decoder: the ModuleList of blocks
    attn: str                           # from a block
    mlp: str                            # from a block (OPT: `fc2`, whose output is flat)
    o: str                              # from the attention: the output projection
    q: str | None = None                # from the attention: separate projections ...
    k: str | None = None
    v: str | None = None
    qkv: str | None = None              # ... or one fused projection
    qkv_layout: Literal["split", "heads"] = "split"  # [q | k | v], or per head [q_h k_h v_h]
    final_norm: str | None = "norm"     # from the decoder
    decoder: str = "model"              # from the causal LM: the stack without the LM head
    unembed: str = "lm_head"            # from the causal LM
    flat_mlp: bool = False              # the MLP sees (batch * seq, d_model) (OPT)


_LLAMA = Paths(layers="layers", attn="self_attn", mlp="mlp", o="o_proj", q="q_proj",
               k="k_proj", v="v_proj")
FAMILIES: dict[str, Paths] = {
    "llama": _LLAMA,
    "qwen2": _LLAMA,
    "mistral": _LLAMA,
    "gemma2": _LLAMA,
    "phi3": replace(_LLAMA, q=None, k=None, v=None, qkv="qkv_proj"),
    "gpt2": Paths(layers="h", attn="attn", mlp="mlp", o="c_proj", qkv="c_attn",
                  final_norm="ln_f", decoder="transformer"),
    "gpt_neox": Paths(layers="layers", attn="attention", mlp="mlp", o="dense",
                      qkv="query_key_value", qkv_layout="heads",
                      final_norm="final_layer_norm", decoder="gpt_neox"),
    "opt": replace(_LLAMA, mlp="fc2", o="out_proj", final_norm="final_layer_norm",
                   decoder="model.decoder", flat_mlp=True),
}

# the usual names of each part, for families not in FAMILIES
_GUESS = {
    "layers": ("layers", "h", "blocks", "block"),
    "attn": ("self_attn", "attn", "attention", "self_attention"),
    "mlp": ("mlp", "feed_forward", "ffn"),
    "o": ("o_proj", "c_proj", "out_proj", "dense"),
    "final_norm": ("norm", "ln_f", "final_layernorm", "final_layer_norm", "final_norm"),
}
_QKV_GUESS = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"))


@dataclass(frozen=True)
class Arch:
    decoder: nn.Module          # the stack without the LM head (model.model, model.transformer)
    blocks: tuple[nn.Module, ...]
    attn: tuple[nn.Module, ...]
    mlp: tuple[nn.Module, ...]
    o: tuple[nn.Module, ...]    # attention output projections: input (batch, seq, heads * d)
    q: tuple[nn.Module, ...] | None   # separate projections, or None
    k: tuple[nn.Module, ...] | None
    v: tuple[nn.Module, ...] | None
    qkv: tuple[nn.Module, ...] | None  # fused projections, or None
    final_norm: nn.Module | None
    unembed: nn.Module          # hidden -> vocabulary logits
    n_heads: int
    n_kv_heads: int
    head_dim: int
    paths: Paths

    @property
    def n_layers(self) -> int:
        return len(self.blocks)


def get_path(module: nn.Module | None, path: str | None) -> nn.Module | None:
    """The submodule at dotted `path`, or None where any step is missing."""
    for name in (path.split(".") if path else ()):
        module = getattr(module, name, None)
    return module if path and isinstance(module, nn.Module) else None


def _first(module: nn.Module | None, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if get_path(module, n) is not None), None)


def _guess_paths(decoder: nn.Module) -> Paths | None:
    """A family's paths read off its first block by the usual names (None: no blocks)."""
    layers = _first(decoder, _GUESS["layers"])
    blocks = get_path(decoder, layers)
    if not isinstance(blocks, nn.ModuleList) or not len(blocks):
        return None
    attn = _first(blocks[0], _GUESS["attn"])
    qkv = next((t for t in _QKV_GUESS
                if all(get_path(blocks[0], f"{attn}.{n}") is not None for n in t)),
               (None, None, None)) if attn else (None, None, None)
    return Paths(layers=layers, attn=attn or _GUESS["attn"][0],
                 mlp=_first(blocks[0], _GUESS["mlp"]) or _GUESS["mlp"][0],
                 o=(_first(get_path(blocks[0], attn), _GUESS["o"]) if attn else None)
                 or _GUESS["o"][0], q=qkv[0], k=qkv[1], v=qkv[2],
                 final_norm=_first(decoder, _GUESS["final_norm"]))


def arch_of(model: nn.Module) -> Arch:
    """The parts of `model`, or a KnowflowError saying why it is not supported."""
    kind = type(model).__name__
    unsupported = f"unsupported architecture {kind}"
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if can_set is None or not can_set():
        raise KnowflowError(f"{unsupported}: its attention does not go through transformers' "
                            "attention interface, so knowflow cannot intercept it")
    paths = FAMILIES.get(getattr(model.config, "model_type", None))
    if paths is not None:  # a peft model keeps the HF model as its base model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        decoder, unembed = get_path(base, paths.decoder), get_path(base, paths.unembed)
    else:
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        unembed = (model.get_output_embeddings() if hasattr(model, "get_output_embeddings")
                   else None)
        paths = _guess_paths(decoder) if decoder is not None else None
    blocks = get_path(decoder, paths.layers) if paths is not None else None
    if not isinstance(blocks, nn.ModuleList) or unembed is None:
        raise KnowflowError(f"{unsupported}: expected a causal LM with a list of decoder "
                            "blocks and an output embedding")

    def each(path: str | None, within: str = "") -> tuple[nn.Module | None, ...]:
        full = f"{within}.{path}" if within and path else path
        return tuple(get_path(b, full) for b in blocks)

    attn, mlp, o = each(paths.attn), each(paths.mlp), each(paths.o, paths.attn)
    if any(a is None for a in attn) or any(m is None for m in mlp):
        raise KnowflowError(f"{unsupported}: a decoder block has no attention or MLP module "
                            f"(expected {paths.attn} and {paths.mlp})")
    if any(p is None or not hasattr(p, "weight") for p in o):
        raise KnowflowError(f"{unsupported}: a decoder block has no attention output "
                            f"projection (expected {paths.attn}.{paths.o})")
    for i, a in enumerate(attn):
        if getattr(a, "layer_idx", i) != i:
            raise KnowflowError(f"{unsupported}: attention module {i} has layer_idx "
                                f"{a.layer_idx}")
    n_heads = getattr(model.config, "num_attention_heads", None)
    if not isinstance(n_heads, int):
        raise KnowflowError(f"{unsupported}: config has no num_attention_heads")
    width = out_weight(o[0]).shape[1]                    # heads * head_dim
    if width % n_heads:
        raise KnowflowError(f"{unsupported}: cannot split the attention output into "
                            f"{n_heads} heads")
    q, k, v, qkv = (each(p, paths.attn) if p else None
                    for p in (paths.q, paths.k, paths.v, paths.qkv))
    return Arch(decoder=decoder, blocks=tuple(blocks), attn=attn, mlp=mlp, o=o, q=q, k=k, v=v,
                qkv=qkv, final_norm=get_path(decoder, paths.final_norm), unembed=unembed,
                n_heads=n_heads,
                n_kv_heads=getattr(model.config, "num_key_value_heads", None) or n_heads,
                head_dim=width // n_heads, paths=paths)


def out_weight(proj: nn.Module):
    """An output projection's weight as (d_model, heads * head_dim) (GPT-2's Conv1D stores it
    transposed)."""
    return proj.weight if isinstance(proj, nn.Linear) else proj.weight.T


def fused_value_features(arch: Arch) -> torch.Tensor:
    """(out_features,) bool over a fused qkv projection's outputs: True where a feature is a
    value, per the family's layout: [q | k | v] ("split": n_heads query heads, then the key and
    value heads, GQA included) or per head [q_h k_h v_h] ("heads", GPT-NeoX)."""
    d = arch.head_dim
    if arch.paths.qkv_layout == "heads":
        return (torch.arange(3 * d) >= 2 * d).repeat(arch.n_heads)
    qk = (arch.n_heads + arch.n_kv_heads) * d
    return torch.arange(qk + arch.n_kv_heads * d) >= qk


def model_window(model) -> int | None:
    """The most positions `model` reads (`max_position_embeddings`; GPT-2's `n_positions`
    through its config's attribute map), or None when its config does not say."""
    window = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return window if isinstance(window, int) and not isinstance(window, bool) else None


def check_fits(model, n_tokens: int, where: str, what: str = "the prompt with its answer"
               ) -> None:
    """`n_tokens` fit in `model`'s window; else a `KnowflowError` naming `where` (past the
    window a model fails with an index error, or reads positions it never learned)."""
    window = model_window(model)
    if window is not None and n_tokens > window:
        raise KnowflowError(f"{where}: {what} is {n_tokens} tokens, longer than the model's "
                            f"window ({window})", "shorten it, or use a model with a longer "
                            "window")
