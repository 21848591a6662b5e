"""Where the parts of a decoder-only HF model live: blocks, attention, MLP, final norm, unembed.

Probes need to hook sublayers and to intercept attention through transformers' attention
interface, so a model is supported when its attention dispatches through
`ALL_ATTENTION_FUNCTIONS` (Llama, Mistral, Qwen, GPT-2 and most current causal LMs) and its
blocks expose an attention and an MLP submodule under one of the usual names.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from knowflow.errors import KnowflowError
from knowflow.lens.heads import first_child as _child

_BLOCKS = ("layers", "h", "blocks", "block")
_ATTN = ("self_attn", "attn", "attention", "self_attention")
_MLP = ("mlp", "feed_forward", "ffn")
_NORM = ("norm", "ln_f", "final_layernorm", "final_layer_norm", "final_norm")


@dataclass(frozen=True)
class Arch:
    decoder: nn.Module          # the stack without the LM head (model.model, model.transformer)
    blocks: tuple[nn.Module, ...]
    attn: tuple[nn.Module, ...]
    mlp: tuple[nn.Module, ...]
    final_norm: nn.Module | None
    unembed: nn.Module          # hidden -> vocabulary logits
    n_heads: int

    @property
    def n_layers(self) -> int:
        return len(self.blocks)


def arch_of(model: nn.Module) -> Arch:
    """The parts of `model`, or a KnowflowError saying why it is not supported."""
    kind = type(model).__name__
    unsupported = f"unsupported architecture {kind}"
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if can_set is None or not can_set():
        raise KnowflowError(f"{unsupported}: its attention does not go through transformers' "
                            "attention interface, so knowflow cannot intercept it")
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    blocks = _child(decoder, _BLOCKS) if decoder is not None else None
    unembed = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(blocks, nn.ModuleList) or unembed is None:
        raise KnowflowError(f"{unsupported}: expected a causal LM with a list of decoder "
                            "blocks and an output embedding")
    attn = tuple(_child(b, _ATTN) for b in blocks)
    mlp = tuple(_child(b, _MLP) for b in blocks)
    if any(a is None for a in attn) or any(m is None for m in mlp):
        raise KnowflowError(f"{unsupported}: a decoder block has no attention or MLP module "
                            f"under the usual names ({', '.join(_ATTN + _MLP)})")
    for i, a in enumerate(attn):
        if getattr(a, "layer_idx", i) != i:
            raise KnowflowError(f"{unsupported}: attention module {i} has layer_idx "
                                f"{a.layer_idx}")
    n_heads = getattr(model.config, "num_attention_heads", None)
    if not isinstance(n_heads, int):
        raise KnowflowError(f"{unsupported}: config has no num_attention_heads")
    return Arch(decoder=decoder, blocks=tuple(blocks), attn=attn, mlp=mlp,
                final_norm=_child(decoder, _NORM), unembed=unembed, n_heads=n_heads)
