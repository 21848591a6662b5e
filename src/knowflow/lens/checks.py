"""Checks of a model's files, made where every command loads a model (`lens/load.py`), so that
a broken folder is one line naming the file and what is wrong (exit 2) instead of an error
from deep inside transformers, torch or safetensors, or a run on a broken model.

Before anything loads, reading only config.json, the weights index, the safetensors headers
and the file names (a local folder at once, `check_model` included; a hub model's snapshot in
the Hugging Face cache once its files are there): config.json's sizes are integers
(`check_config`); it describes a causal LM, not a masked LM, an encoder or a bare base model
whose LM head transformers would fill with random weights (`check_causal`); the index names
weights and only files the folder holds (`check_weight_index`); every safetensors file has a
whole header and every byte it promises, and weights only as a pickle (`pytorch_model.bin`,
which can run code when unpickled) are refused, never opened (`check_weights`); the embedding,
the output head and the blocks have the sizes config.json gives them (`check_shapes`); the
folder holds a tokenizer (`check_tokenizer_files`). Once the tokenizer loads
(`check_tokenizer`): it encodes ordinary text, its tokens (added ones included) fit the
embedding, and its chat template renders a tiny conversation with its messages. Once the
model loads (`check_finite`): no weight is NaN or infinite. `check_loaded` makes the checks
that apply to a model passed in memory. `check_pad_token`: finetuning pads batches, so its
tokenizer needs a pad or an end-of-sequence token.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from knowflow.errors import ConfigError, DataError, KnowflowError
from knowflow.lens.arch import FAMILIES
from knowflow.lens.hub import json_object
from knowflow.store.readers import read_json

# config.json sizes that must be integers (transformers' names, old and new)
_SIZES = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
          "intermediate_size", "vocab_size", "max_position_embeddings", "n_layer", "n_head",
          "n_embd", "n_positions", "head_dim")
_PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
_HINT = "save or download the model again"
_SAVE_TOGETHER = "save the model and its config.json together (save_pretrained), or fix " \
                 "config.json"
# the fix for a model folder without a usable tokenizer
TOKENIZER_HINT = "save the tokenizer beside the model (tokenizer.save_pretrained(folder)), " \
                 "or copy in the tokenizer files of the model it was trained from"
# the input embedding and the output head of each family `lens.arch.FAMILIES` maps, as
# save_pretrained names them (matched at the end of a name: older checkpoints drop the
# leading module, GPT-2's `wte.weight`); a tied head is not saved
_EMBEDDINGS = {"gpt2": ("wte.weight", "lm_head.weight"),
               "gpt_neox": ("embed_in.weight", "embed_out.weight")}
_LLAMA_EMBEDDINGS = ("embed_tokens.weight", "lm_head.weight")
# file names a tokenizer's vocabulary is saved under (tokenizers' JSON, SentencePiece,
# tiktoken, BPE and WordPiece files); tokenizer_config.json alone holds none
_VOCABULARY = re.compile(r"^(tokenizer(?!_config\.json$).*|vocab.*|merges.*|spiece.*"
                         r"|sentencepiece.*|.*\.(model|tiktoken|vocab|spm|bpe))$")
_TEXT = "The capital of France is Paris."


def _text_config(config: dict) -> dict:
    """The language model's part of a config (multimodal configs nest it)."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def _size(config: dict, *keys: str) -> int | None:
    """The first of `keys` config.json gives as an integer, or None."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def vocab_rows(config: dict) -> int | None:
    """The number of embedding rows config.json gives the language model (vocab_size)."""
    return _size(_text_config(config), "vocab_size")


def check_config(config: dict, where: str) -> None:
    """config.json (`config`, read from `where`) gives its sizes as integers."""
    for part in (config, _text_config(config)):
        for key in _SIZES:
            value = part.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise DataError(where, f"expected an integer, got {value!r}", field=key,
                                hint="fix config.json, or save the model again")


def check_causal(config: dict, where: str) -> None:
    """config.json (`config`, read from `where`) describes a causal LM: not a class that
    transformers knows as something else (a masked LM, an encoder, a base model without its LM
    head), nor a model of an encoder family (one with a masked LM: BERT, RoBERTa, ...) that is
    not marked as a decoder, which transformers would load as a causal LM attending both
    ways."""
    if config.get("auto_map"):
        return  # transformers decides (or the repository's own code, when trusted)
    names = config.get("architectures")
    names = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
    causal, known, encoders = _architectures()
    if names and not causal.intersection(names) and known.intersection(names):
        raise KnowflowError(f"{where}: a {names[0]}, not a causal language model (knowflow "
                            "reads next-token predictions)",
                            "give a decoder-only model (a ...ForCausalLM)")
    text = _text_config(config)
    model_type = text.get("model_type")
    if model_type in encoders and text.get("is_decoder") is not True and \
            text.get("causal") is not True:  # XLM's own flag
        raise KnowflowError(f"{where}: a {model_type} encoder (is_decoder is not true: it "
                            "reads the text both ways), not a causal language model (knowflow "
                            "reads next-token predictions)",
                            "give a decoder-only model (a ...ForCausalLM)")


@functools.cache
def _architectures() -> tuple[frozenset, frozenset, frozenset]:
    """(causal LM class names, every model class name transformers' Auto classes know, the
    model types that have a masked LM: encoder families)."""
    from transformers.models.auto import modeling_auto

    def names(mapping: dict) -> set[str]:
        return {n for v in mapping.values() for n in ((v,) if isinstance(v, str) else v)}

    causal = names(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    known = set().union(*(names(getattr(modeling_auto, a)) for a in dir(modeling_auto)
                          if a.startswith("MODEL_") and a.endswith("_MAPPING_NAMES")))
    encoders = set(modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    return frozenset(causal), frozenset(known), frozenset(encoders)


def check_weight_index(folder: Path) -> None:
    """The weights index of a sharded folder (model.safetensors.index.json), if it has one:
    a weight_map naming at least one tensor, each in a file the folder holds."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return
    try:
        weight_map = read_json(index)["weight_map"]
    except (OSError, DataError, KeyError, TypeError):
        raise DataError(index, "not a safetensors index (no weight_map)", hint=_HINT) from None
    if not isinstance(weight_map, dict) or not all(isinstance(f, str)
                                                   for f in weight_map.values()):
        raise DataError(index, "weight_map must map tensor names to file names", hint=_HINT)
    if not weight_map:
        raise DataError(index, "the weight_map is empty: the index names no weights, so the "
                        "model would load with none of its own", hint=_HINT)
    missing = sorted(s for s in set(weight_map.values()) if not (folder / s).is_file())
    if missing:
        raise DataError(index, f"names {missing[0]}, which the folder does not hold",
                        hint=_HINT)


def check_weights(folder: Path) -> None:
    """The weight files of a model folder: whole safetensors files (header and data), or a
    refusal for weights saved only as pickles (never opened here or by the load)."""
    from safetensors import SafetensorError, safe_open

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


def check_shapes(folder: Path, config: dict) -> None:
    """The safetensors headers of a model folder (whole: `check_weights` first) agree with
    config.json, for the families `lens.arch.FAMILIES` maps: the embedding and the output head
    are vocab_size x hidden size (OPT's: word_embed_proj_dim), and the weights hold exactly the
    blocks 0 .. num_hidden_layers - 1 (transformers drops weights of blocks the config lacks,
    and fills those the weights lack with random ones)."""
    from safetensors import safe_open

    family = FAMILIES.get(config.get("model_type"))  # a plain causal LM, not a part of one
    if family is None:
        return
    vocab = _size(config, "vocab_size")
    width = _size(config, "word_embed_proj_dim", "hidden_size", "n_embd")
    suffixes = _EMBEDDINGS.get(config["model_type"], _LLAMA_EMBEDDINGS)
    block = re.compile(rf"(?:^|\.){re.escape(family.layers)}\.(\d+)\.")
    blocks: set[int] = set()
    shapes: dict[str, tuple[Path, str, list[int]]] = {}  # suffix: (file, tensor, shape)
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            names = weights.keys()  # a safe_open handle is not iterable
            for name in names:
                if found := block.search(name):
                    blocks.add(int(found.group(1)))
                for suffix in suffixes:
                    if name == suffix or name.endswith("." + suffix):
                        shapes[suffix] = path, name, list(weights.get_slice(name).get_shape())
    for path, name, shape in (shapes[s] for s in suffixes if s in shapes):  # embedding first
        if None not in (vocab, width) and shape != [vocab, width]:
            raise DataError(path, f"tensor {name} is {' x '.join(map(str, shape))}, but "
                            f"config.json gives {vocab} x {width} (vocab_size x hidden size)",
                            hint=_SAVE_TOGETHER)
    layers = _size(config, "num_hidden_layers", "n_layer")
    if blocks and layers is not None and blocks != set(range(layers)):
        held = f"{len(blocks)} blocks ({min(blocks)} to {max(blocks)})"
        raise DataError(folder / "config.json", f"num_hidden_layers is {layers}, but the "
                        f"weights hold {held}", hint=_SAVE_TOGETHER)


def check_tokenizer_files(folder: Path) -> None:
    """A model folder holds a tokenizer's vocabulary (a folder saved with model.save_pretrained
    alone has none, and transformers would build a tokenizer of one token or fail deep inside),
    unless tokenizer_config.json names the repository's own tokenizer code."""
    if any(_VOCABULARY.match(p.name) for p in folder.iterdir()):
        return
    config = folder / "tokenizer_config.json"
    if config.is_file() and json_object(config, TOKENIZER_HINT).get("auto_map"):
        return
    raise KnowflowError(f"{folder}: no tokenizer files (tokenizer.json, tokenizer.model, "
                        "vocab.json, ...): the model was saved without its tokenizer",
                        TOKENIZER_HINT)


def check_tokenizer(tokenizer, rows: int | None, where: str, template: str | None = None
                    ) -> None:
    """The tokenizer loaded from `where` (its chat template from `template`, if another file)
    can serve the model: it encodes ordinary text (`check_encodes`), every token id (added
    tokens included) has one of the model's `rows` embedding rows (`check_vocabulary`), and its
    chat template renders (`check_chat_template`)."""
    check_encodes(tokenizer, where)
    if rows is not None:
        check_vocabulary(tokenizer, rows, where)
    check_chat_template(tokenizer, template or where)


def check_encodes(tokenizer, where: str) -> None:
    """The tokenizer turns ordinary text into tokens other than its special ones (a tokenizer
    built without its vocabulary files gives none, or only the unknown token)."""
    try:
        ids = tokenizer.encode(_TEXT, add_special_tokens=False)
    except Exception as exc:  # noqa: BLE001 - a tokenizer is the folder's: any error is its
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise KnowflowError(f"{where}: the tokenizer fails on ordinary text "
                            f"({type(exc).__name__}: {first})", TOKENIZER_HINT) from None
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    if not any(i not in special for i in ids):
        what = "no tokens" if not ids else "only special tokens"
        raise KnowflowError(f"{where}: the tokenizer has no usable vocabulary ({_TEXT!r} "
                            f"encodes to {what}; {len(tokenizer)} token(s) in all)",
                            TOKENIZER_HINT)


def check_vocabulary(tokenizer, rows: int, where: str) -> None:
    """Every token id of the tokenizer, the added tokens included, is below `rows`, the
    number of the model's embedding rows (config.json's vocab_size, checked against the
    embedding by `check_shapes`)."""
    ids = {i for i in tokenizer.get_vocab().values() if isinstance(i, int)}
    ids.update(getattr(tokenizer, "added_tokens_decoder", None) or {})
    top = max(ids, default=-1)
    if top >= rows:
        token = tokenizer.convert_ids_to_tokens(top)
        raise KnowflowError(f"{where}: the tokenizer has token ids up to {top}, but the model "
                            f"embeds only {rows} (config.json vocab_size; token {top} is "
                            f"{token!r})", "give the tokenizer the model was trained with, or "
                            "resize its embeddings (resize_token_embeddings) and save it again")


def check_chat_template(tokenizer, where: str) -> None:
    """The tokenizer's chat template (if any) renders a one-turn conversation with its
    generation prompt and a two-turn one, each holding the messages' text (a template that
    renders nothing, or drops the messages, would score every item on an empty prompt)."""
    if not getattr(tokenizer, "chat_template", None):
        return
    conversation = [{"role": "user", "content": "Hello"},
                    {"role": "assistant", "content": "Hi"}]
    fix = "fix chat_template.jinja (or tokenizer_config.json's chat_template), or remove it " \
          "to use plain prompts"
    try:
        rendered = [tokenizer.apply_chat_template(conversation[:1], tokenize=False,
                                                  add_generation_prompt=True),
                    tokenizer.apply_chat_template(conversation, tokenize=False)]
    except Exception as exc:  # noqa: BLE001 - a template is the folder's code: any error is its
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise KnowflowError(f"{where}: its chat template fails on a two-turn conversation "
                            f"({type(exc).__name__}: {first})", fix) from None
    for text, needs in zip(rendered, (("Hello",), ("Hello", "Hi")), strict=True):
        if not isinstance(text, str) or not text.strip():
            raise KnowflowError(f"{where}: its chat template renders a conversation to "
                                "nothing", fix)
        if not all(n in text for n in needs):
            raise KnowflowError(f"{where}: its chat template drops the messages' text (a "
                                f"conversation renders as {text[:80]!r})", fix)


def check_finite(model, where: str) -> None:
    """No weight of the loaded `model` (named by `where`) is NaN or infinite (weights
    offloaded to disk, on the meta device, are not read). A model found finite is not read
    again until a weight changes: each tensor's version counter (raised by every in-place
    write, an optimizer step's included) and identity are kept on the model."""
    import torch

    seen = tuple((id(p), p._version) for p in model.parameters())
    if model.__dict__.get("_knowflow_finite") == seen:
        return
    with torch.no_grad():
        for key, param in model.named_parameters():
            if param.device.type != "meta" and not bool(torch.isfinite(param).all()):
                raise KnowflowError(f"{where}: weight {key} holds NaN or infinite values",
                                    "the model is damaged (a diverged training run?); give "
                                    "another checkpoint")
    model.__dict__["_knowflow_finite"] = seen


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
    tokenizer; then the checks a loaded folder gets (a causal LM, its tokenizer fits it,
    finite weights)."""
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
    where = f"the loaded model ({type(model).__name__})"
    config = getattr(model, "config", None)
    if hasattr(config, "to_dict"):
        check_causal({**config.to_dict(), "architectures": [type(model).__name__]}, where)
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") \
        else None
    rows = getattr(embedding, "num_embeddings", None)
    check_tokenizer(tokenizer, rows if isinstance(rows, int) else None, where)
    check_finite(model, where)
