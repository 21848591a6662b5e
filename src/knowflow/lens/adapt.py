"""Which parameters a finetuning run trains: all of them, LoRA adapters (peft), or only the
attention's query and key projections (QK-only, the mitigation of Goyal et al. 2025: the
inversion is driven by attention moving from the context to the subject, and values and MLPs
that already store facts are left untouched).

    model = prepare_trainable(model, TrainableConfig(mode="qk_only"))
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from torch import nn

from knowflow.errors import ConfigError

TrainMode = Literal["full", "lora", "qk_only"]
TRAIN_MODES = ("full", "lora", "qk_only")
# Query/key projection names across HF causal LMs (Llama/Mistral/Qwen, GPT-NeoX, Falcon).
_QUERY_KEY = ("q_proj", "k_proj", "query", "key", "wq", "wk")
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
# every projection of a Llama-style block (attention and MLP)
ALL_PROJECTIONS = (*DEFAULT_LORA_TARGETS, "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class TrainableConfig:
    mode: TrainMode = "lora"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS

    def validate(self) -> None:
        if self.mode not in TRAIN_MODES:
            raise ConfigError(f"{self.mode!r} is not one of {', '.join(TRAIN_MODES)}", "train")
        if self.lora_r < 1:
            raise ConfigError("must be at least 1", "lora_r")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError("must lie in [0, 1)", "lora_dropout")
        if self.mode == "lora" and not self.lora_targets:
            raise ConfigError("LoRA needs at least one target module", "lora_targets")


def linear_module_names(model: nn.Module) -> set[str]:
    """Last name components of the model's linear layers (what LoRA can target)."""
    return {name.rsplit(".", 1)[-1] for name, mod in model.named_modules()
            if isinstance(mod, nn.Linear) or type(mod).__name__ == "Conv1D"}


def query_key_parameters(model: nn.Module) -> list[str]:
    """Names of the query and key projection parameters (weights and biases)."""
    names = [name for name, _ in model.named_parameters()
             if any(f".{qk}." in f".{name}" for qk in _QUERY_KEY)]
    if not names:
        raise ConfigError(f"{type(model).__name__} has no query/key projections named "
                          f"{', '.join(_QUERY_KEY)}; QK-only training cannot find them", "train")
    return names


def check_targets(model: nn.Module, targets: Sequence[str]) -> None:
    known = linear_module_names(model)
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise ConfigError(f"unknown target module {unknown[0]!r} for {type(model).__name__} "
                          f"(linear layers: {', '.join(sorted(known))})", "lora_targets")


def prepare_trainable(model: nn.Module, cfg: TrainableConfig) -> nn.Module:
    """The model to train: with only `cfg.mode`'s parameters requiring grad (LoRA wraps it in
    a peft model)."""
    cfg.validate()
    if cfg.mode == "lora":
        from peft import LoraConfig, get_peft_model

        check_targets(model, cfg.lora_targets)
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                          lora_dropout=cfg.lora_dropout, target_modules=list(cfg.lora_targets),
                          task_type="CAUSAL_LM")
        with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
            warnings.simplefilter("ignore", FutureWarning)
            return get_peft_model(model, lora)
    keep = set(query_key_parameters(model)) if cfg.mode == "qk_only" else None
    for name, param in model.named_parameters():
        param.requires_grad = keep is None or name in keep
    return model


def count_trainable(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    total = trainable = 0
    for param in model.parameters():
        total += param.numel()
        trainable += param.numel() if param.requires_grad else 0
    return trainable, total
