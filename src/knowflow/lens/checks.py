"""Checks of a model's files, made where every command loads a model (`lens/load.py`), so that
a broken folder is one line naming the file and what is wrong (exit 2) instead of an error
from deep inside transformers, torch or safetensors.

Before anything loads (`check_config`, `check_weights`): config.json's sizes are integers; the
folder holds a causal LM (not a masked LM, an encoder or a bare base model whose LM head
transformers would fill with random weights); every safetensors file has a whole header and
every byte it promises; weights only as a pickle (`pytorch_model.bin`, which can run code when
unpickled) are refused, never opened. Once the tokenizer loads (`check_tokenizer`): its
tokens fit the embedding, and its chat template renders a tiny conversation. Once the model
loads (`check_finite`): no weight is NaN or infinite. `check_pad_token`: finetuning pads
batches, so its tokenizer needs a pad or an end-of-sequence token.
"""

from __future__ import annotations

import functools
from pathlib import Path

from knowflow.errors import ConfigError, DataError, KnowflowError
from knowflow.store.readers import read_json

# config.json sizes that must be integers (transformers' names, old and new)
_SIZES = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
          "intermediate_size", "vocab_size", "max_position_embeddings", "n_layer", "n_head",
          "n_embd", "n_positions", "head_dim")
_PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
_HINT = "save or download the model again"


def _text_config(config: dict) -> dict:
    """The language model's part of a config (multimodal configs nest it)."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def check_config(config: dict, where: str) -> None:
    """config.json (`config`, read from `where`) describes a causal LM with integer sizes."""
    for part in (config, _text_config(config)):
        for key in _SIZES:
            value = part.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise DataError(where, f"expected an integer, got {value!r}", field=key,
                                hint="fix config.json, or save the model again")
    names = config.get("architectures")
    if not isinstance(names, list) or config.get("auto_map"):
        return  # transformers decides (or the repository's own code, when trusted)
    names = [n for n in names if isinstance(n, str)]
    causal, known = _architectures()
    if names and not causal.intersection(names) and known.intersection(names):
        raise KnowflowError(f"{where}: the folder holds a {names[0]}, not a causal language "
                            "model (knowflow reads next-token predictions)",
                            "give a decoder-only model (a ...ForCausalLM)")


@functools.cache
def _architectures() -> tuple[frozenset, frozenset]:
    """(causal LM class names, every model class name transformers' Auto classes know)."""
    from transformers.models.auto import modeling_auto

    def names(mapping: dict) -> set[str]:
        return {n for v in mapping.values() for n in ((v,) if isinstance(v, str) else v)}

    causal = names(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    known = set().union(*(names(getattr(modeling_auto, a)) for a in dir(modeling_auto)
                          if a.startswith("MODEL_") and a.endswith("_MAPPING_NAMES")))
    return frozenset(causal), frozenset(known)


def check_weights(folder: Path) -> None:
    """The weight files of a local model folder: whole safetensors files, or a refusal for
    weights saved only as pickles (never opened here or by the load)."""
    from safetensors import SafetensorError, safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(read_json(index)["weight_map"].values())
        except (OSError, DataError, KeyError, TypeError, AttributeError):
            raise DataError(index, "not a safetensors index (no weight_map)", hint=_HINT
                            ) from None
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            raise DataError(index, f"names {missing[0]}, which the folder does not hold",
                            hint=_HINT)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = sorted(p for pattern in _PICKLES for p in folder.glob(pattern))
        if pickles:
            raise KnowflowError(f"{pickles[0]}: weights saved as a pickle, which can run code "
                                "when loaded; knowflow loads safetensors weights only",
                                "convert it where you trust the file: load it and "
                                "save_pretrained(folder) (safetensors is the default)")
        return  # transformers says what it misses
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except (SafetensorError, OSError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if path.stat().st_size == 0:
                reason = "the file is empty"
            raise DataError(path, f"damaged weights file ({reason})", hint=_HINT) from None


def check_tokenizer(tokenizer, config: dict, name: str) -> None:
    """The tokenizer fits the model: every token id has an embedding row (config.json's
    vocab_size), and its chat template (if any) renders a two-turn conversation."""
    rows = _text_config(config).get("vocab_size")
    if isinstance(rows, int) and not isinstance(rows, bool):
        size = max(tokenizer.get_vocab().values(), default=-1) + 1
        if size > rows:
            raise KnowflowError(f"model {name!r}: the tokenizer has token ids up to "
                                f"{size - 1}, but the model embeds only {rows} (config.json "
                                "vocab_size)", "give the tokenizer the model was trained with, "
                                "or resize its embeddings (resize_token_embeddings) and save "
                                "it again")
    if not getattr(tokenizer, "chat_template", None):
        return
    conversation = [{"role": "user", "content": "Hello"},
                    {"role": "assistant", "content": "Hi"}]
    try:
        tokenizer.apply_chat_template(conversation[:1], tokenize=False,
                                      add_generation_prompt=True)
        tokenizer.apply_chat_template(conversation, tokenize=False)
    except Exception as exc:  # noqa: BLE001 - a template is the folder's code: any error is its
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise KnowflowError(f"model {name!r}: its chat template fails on a two-turn "
                            f"conversation ({type(exc).__name__}: {first})",
                            "fix chat_template.jinja (or tokenizer_config.json's "
                            "chat_template), or remove it to use plain prompts") from None


def check_finite(model, name: str) -> None:
    """No weight of the loaded `model` is NaN or infinite (weights offloaded to disk, on the
    meta device, are not read)."""
    import torch

    with torch.no_grad():
        for key, param in model.named_parameters():
            if param.device.type != "meta" and not bool(torch.isfinite(param).all()):
                raise KnowflowError(f"model {name!r}: weight {key} holds NaN or infinite "
                                    "values", "the model is damaged (a diverged training run?); "
                                    "give another checkpoint")


def check_pad_token(tokenizer, name: str) -> None:
    """Finetuning pads its batches: the tokenizer needs a pad token or, in its place, an
    end-of-sequence token."""
    if tokenizer.pad_token is None and tokenizer.eos_token is None:
        raise KnowflowError(f"model {name!r}: the tokenizer has neither a pad token nor an "
                            "end-of-sequence token; finetuning needs one to pad its batches",
                            "set pad_token (or eos_token) in the folder's tokenizer_config.json")


def check_loaded(model, tokenizer) -> None:
    """A model passed in memory (the Python API): a torch module whose weights are loaded
    (none on the meta device, unless accelerate offloaded them: `hf_device_map`), with a
    tokenizer that can encode text."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"expected a hub id, a local folder or a loaded model, got "
                          f"{type(model).__name__} {model!r:.60}", "model")
    if tokenizer is None:
        raise ConfigError("a loaded model needs its tokenizer", "tokenizer")
    if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
        raise ConfigError(f"expected the model's tokenizer, got {type(tokenizer).__name__}",
                          "tokenizer", "pass the tokenizer loaded with the model")
    if getattr(model, "hf_device_map", None) is None and any(
            p.device.type == "meta" for p in model.parameters()):
        raise ConfigError("its weights are on the meta device (an empty skeleton, never "
                          "loaded)", "model", "load the weights (from_pretrained), or pass "
                          "the model's name or folder")
