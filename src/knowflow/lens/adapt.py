"""Which parameters a finetuning run trains: all of them, LoRA adapters (peft), or only the
attention's query and key projections (QK-only, the mitigation of Goyal et al. 2025: the
inversion is driven by attention moving from the context to the subject, and values and MLPs
that already store facts are left untouched).

    model = prepare_trainable(model, TrainableConfig(mode="qk_only"))

LoRA targets follow the architecture when none are given (`lora_targets`): the Llama-style
attention projections q/k/v/o_proj where a model has all four (knowflow's default since its
first release), else peft's default for the model type
(`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`: GPT-2 `c_attn`, GPT-NeoX
`query_key_value`, OPT `q_proj`/`v_proj`), else the attention projections of knowflow's
architecture map (Phi-3: `qkv_proj`, `o_proj`).

QK-only on a fused qkv projection (GPT-2 `c_attn`, GPT-NeoX `query_key_value`, Phi-3
`qkv_proj`) trains the fused weight and bias with a gradient hook that zeroes the value
features (`lens.arch.fused_value_features`, exact for the [q | k | v] and per-head layouts):
a zero gradient leaves Adam's moments at zero, so the value slice never moves, bit for bit.
Decoupled weight decay would still shrink it, so that combination is refused
(`check_qk_weight_decay`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from knowflow.errors import ConfigError, KnowflowError
from knowflow.lens.arch import FAMILIES, arch_of, fused_value_features

TrainMode = Literal["full", "lora", "qk_only"]
TRAIN_MODES = ("full", "lora", "qk_only")
# Query/key projection names across HF causal LMs (Llama/Mistral/Qwen, GPT-NeoX, Falcon).
_QUERY_KEY = ("q_proj", "k_proj", "query", "key", "wq", "wk")
LLAMA_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
# every projection of a Llama-style block (attention and MLP)
ALL_PROJECTIONS = (*LLAMA_ATTENTION, "gate_proj", "up_proj", "down_proj")
_FROZEN = "_knowflow_frozen_features"  # a parameter's (out_features,) mask of frozen features


@dataclass(frozen=True)
class TrainableConfig:
    mode: TrainMode = "lora"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ()  # empty: the family's (see `lora_targets`)

    def validate(self) -> None:
        if self.mode not in TRAIN_MODES:
            raise ConfigError(f"{self.mode!r} is not one of {', '.join(TRAIN_MODES)}", "train")
        if self.lora_r < 1:
            raise ConfigError("must be at least 1", "lora_r")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError("must lie in [0, 1)", "lora_dropout")


def linear_module_names(model: nn.Module) -> set[str]:
    """Last name components of the model's linear layers (what LoRA can target)."""
    return {name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
            if isinstance(mod, nn.Linear) or type(mod).__name__ == "Conv1D"}


def lora_targets(model: nn.Module, given: Sequence[str] = ()) -> list[str]:
    """The modules LoRA adapts: `given`, else the family's (see the module docstring)."""
    if given:
        return list(given)
    known = linear_module_names(model)
    if set(LLAMA_ATTENTION) <= known:
        return list(LLAMA_ATTENTION)
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT

    kind = getattr(getattr(model, "config", None), "model_type", None)
    targets = [t for t in PEFT.get(kind, ()) if t in known]
    paths = FAMILIES.get(kind)
    if not targets and paths is not None:
        targets = [p.rsplit(".", 1)[-1] for p in (paths.q, paths.k, paths.v, paths.qkv, paths.o)
                   if p and p.rsplit(".", 1)[-1] in known]
    if not targets:
        raise ConfigError(f"no default LoRA targets for {type(model).__name__} (model type "
                          f"{kind!r})", "lora_targets",
                          f"name them, e.g. --lora-targets from: {', '.join(sorted(known))}")
    return targets


def fused_qkv_masks(model: nn.Module) -> dict[str, torch.Tensor]:
    """{parameter name: bool mask of its value entries} for the weights and biases of the
    fused qkv projections of a family that has them (empty otherwise). Linear weights are
    (out, in), GPT-2's Conv1D weights (in, out); the mask has the parameter's shape."""
    kind = getattr(getattr(model, "config", None), "model_type", None)
    if kind not in FAMILIES or FAMILIES[kind].qkv is None:
        return {}
    try:
        arch = arch_of(model)
    except KnowflowError:
        return {}
    values = fused_value_features(arch)                 # (out_features,)
    owner = {id(p): n for n, p in model.named_parameters()}
    masks = {}
    for proj in arch.qkv:
        conv = not isinstance(proj, nn.Linear)          # Conv1D: weight (in, out)
        for pname, param in proj.named_parameters(recurse=False):
            out = param.shape[-1] if conv and pname == "weight" else param.shape[0]
            if out != values.numel():
                raise ConfigError(f"{type(model).__name__}: the fused qkv projection has "
                                  f"{out} outputs, not the {values.numel()} its heads imply; "
                                  "QK-only cannot split it", "train", "use --train lora or full")
            if pname == "weight":
                mask = values[None, :] if conv else values[:, None]
                mask = mask.expand(param.shape)
            else:
                mask = values
            masks[owner[id(param)]] = mask
    return masks


def query_key_parameters(model: nn.Module) -> list[str]:
    """Names of the query and key projection parameters (weights and biases); for a fused
    qkv projection, its weight and bias (of which QK-only trains the q and k slices)."""
    fused = fused_qkv_masks(model)
    if fused:
        return list(fused)
    names = [name for name, _ in model.named_parameters()
             if any(f".{qk}." in f".{name}" for qk in _QUERY_KEY)]
    if not names:
        raise ConfigError(f"{type(model).__name__} has no query/key projections named "
                          f"{', '.join(_QUERY_KEY)}; QK-only training cannot find them", "train",
                          "use --train lora or full")
    return names


def _freeze_values(param: nn.Parameter, mask: torch.Tensor) -> None:
    """Zero the gradient of `param`'s value entries (`mask`), so they never change."""
    setattr(param, _FROZEN, mask)
    param.register_hook(lambda grad: grad.masked_fill(mask.to(grad.device), 0.0))


def check_qk_weight_decay(model: nn.Module, weight_decay: float) -> None:
    """QK-only with a fused qkv projection keeps its value slice by zero gradients, which
    decoupled weight decay would not respect: refused."""
    if weight_decay > 0 and any(hasattr(p, _FROZEN) for p in model.parameters()):
        raise ConfigError(f"{weight_decay} would shrink the value slice of the fused qkv "
                          "projection that QK-only keeps fixed", "weight_decay",
                          "use weight_decay=0 with QK-only on this model, or --train lora")


def check_targets(model: nn.Module, targets: Sequence[str]) -> None:
    known = linear_module_names(model)
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise ConfigError(f"unknown target module {unknown[0]!r} for {type(model).__name__} "
                          f"(linear layers: {', '.join(sorted(known))})", "lora_targets")


@contextmanager
def unchanged_vocabulary() -> Iterator[None]:
    """Saving a LoRA adapter: peft asks the hub whether the base model's vocabulary changed, and
    offline (or for a base it cannot reach) warns at every save that it assumes it did not.
    knowflow never resizes the embeddings, so the vocabulary is the base's and the assumption
    holds; the warning is left out."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Could not find a config file in .* vocabulary",
                                UserWarning)
        yield


def prepare_trainable(model: nn.Module, cfg: TrainableConfig) -> nn.Module:
    """The model to train: with only `cfg.mode`'s parameters requiring grad (LoRA wraps it in
    a peft model)."""
    cfg.validate()
    if cfg.mode == "lora":
        from peft import LoraConfig, get_peft_model

        targets = lora_targets(model, cfg.lora_targets)
        check_targets(model, targets)
        conv = any(type(m).__name__ == "Conv1D" and n.rsplit(".", 1)[-1] in targets
                   for n, m in model.named_modules())  # GPT-2 stores weights (in, out)
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, fan_in_fan_out=conv,
                          lora_dropout=cfg.lora_dropout, target_modules=targets,
                          task_type="CAUSAL_LM")
        with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
            warnings.simplefilter("ignore", FutureWarning)
            return get_peft_model(model, lora)
    keep = set(query_key_parameters(model)) if cfg.mode == "qk_only" else None
    fused = fused_qkv_masks(model) if cfg.mode == "qk_only" else {}
    for name, param in model.named_parameters():
        param.requires_grad = keep is None or name in keep
        if name in fused and not hasattr(param, _FROZEN):
            _freeze_values(param, fused[name])
    return model


def count_trainable(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    total = trainable = 0
    for param in model.parameters():
        total += param.numel()
        frozen = int(getattr(param, _FROZEN).sum()) if hasattr(param, _FROZEN) else 0
        trainable += param.numel() - frozen if param.requires_grad else 0
    return trainable, total
