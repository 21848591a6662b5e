"""Where a model's files come from, resolved as transformers resolves them.

A hub id (`ORG/NAME`) downloads from the Hugging Face Hub when the machine is online
(huggingface_hub's own progress bars) and loads from the Hugging Face cache (`$HF_HOME/hub`)
when it is offline (`HF_HUB_OFFLINE=1`, or `ModelSource.offline`) or the Hub cannot be reached.
`ModelSource` carries what transformers' `from_pretrained` takes besides the name: the
`revision` (branch, tag or commit), `trust_remote_code` and offline use.

Remote code: a model whose config.json or tokenizer_config.json names its own Python code
(`auto_map`) is loaded with transformers' built-in classes when transformers has them for
its `model_type` (the repository's code never runs); when it has none, the model is refused
with one line naming `--trust-remote-code`, before anything else loads. knowflow always
passes `trust_remote_code` explicitly, so transformers never asks on stdin.

Every failure here is one line (`KnowflowError`/`ConfigError`): offline and not cached (with
the `hf download` command that fetches it), no such model, a gated model, an unknown revision,
a local path that does not exist.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from knowflow.config import option
from knowflow.errors import ConfigError, DataError, KnowflowError
from knowflow.lens.device import check_device
from knowflow.store.readers import read_json

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
SMOLLM2 = "smollm2-135m-instruct"
# the options of how a model loads (ModelSource's, and SFTJobConfig's, which saves them)
REVISION_HELP = "The hub id's branch, tag or commit (default: main)."
TRUST_REMOTE_CODE_HELP = ("Let the model's repository run its own Python code (its auto_map); "
                          "off unless given.")
OFFLINE_HELP = "Only the Hugging Face cache, never the network (as HF_HUB_OFFLINE=1)."
MODEL_HELP = "HF id or local folder, a knowflow checkpoint folder, or smollm2-135m-instruct."


@dataclass(frozen=True)
class ModelSource:
    """How a model name loads, besides the name: `revision` (a hub id's branch, tag or
    commit; None: main), `trust_remote_code` (run the repository's own Python code that its
    `auto_map` names; never unless asked) and `offline` (only the Hugging Face cache, never the
    network, as `HF_HUB_OFFLINE=1` does)."""

    revision: str | None = option(None, REVISION_HELP)
    trust_remote_code: bool = option(False, TRUST_REMOTE_CODE_HELP)
    offline: bool = option(False, OFFLINE_HELP)

    def validate(self) -> None:
        if self.revision is not None and (not isinstance(self.revision, str) or
                                          not self.revision.strip() or
                                          self.revision != self.revision.strip()):
            raise ConfigError(f"{self.revision!r} is not a branch, tag or commit", "revision",
                              "give e.g. main, v1.0 or a 40-character commit hash")
        for name in ("trust_remote_code", "offline"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"must be true or false, got {getattr(self, name)!r}", name)

    @property
    def is_offline(self) -> bool:
        """Offline by this source's choice or by `HF_HUB_OFFLINE`/`TRANSFORMERS_OFFLINE`."""
        from huggingface_hub import constants

        return self.offline or constants.is_offline_mode()

    def pretrained_kwargs(self) -> dict:
        """What every `from_pretrained` of this model gets (trust_remote_code always explicit,
        so transformers never prompts)."""
        return {"revision": self.revision, "trust_remote_code": self.trust_remote_code,
                "local_files_only": self.is_offline}


@dataclass(frozen=True)
class ModelName:
    """--model and how it loads (--revision, --trust-remote-code, --offline): what a command
    that reads a model's files takes (`knowflow export lm-eval`: its tokenizer)."""

    model: str = option(SMOLLM2, MODEL_HELP)
    source: ModelSource = option(factory=ModelSource, flags="")


@dataclass(frozen=True)
class ModelOptions(ModelName):
    """The model a command loads, and where: --device (checked against this machine before
    any work) and --dtype."""

    device: str = option("auto", "auto, cpu, cuda, mps.")
    dtype: str = option("auto", "auto, float32, bfloat16, float16.")

    def validate(self) -> None:
        check_device(self.device)

    @property
    def load_keywords(self) -> dict:
        """The keywords every `knowflow.api` entry point takes for loading it."""
        return {"device": self.device, "dtype": self.dtype, **dataclasses.asdict(self.source)}


@contextlib.contextmanager
def hub_mode(source: ModelSource):
    """huggingface_hub in offline mode while an offline source loads: `local_files_only`
    alone still lets it ask the Hub once per process (for its user-agent header); offline
    mode makes no request at all, as HF_HUB_OFFLINE=1 does."""
    from huggingface_hub import constants

    if not source.offline or constants.HF_HUB_OFFLINE:
        yield
        return
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = False


def looks_like_path(name: str) -> bool:
    """True for a name only a path can be (absolute, ./, ../, ~, or more than one folder
    level): it is never looked up on the Hub."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if name.startswith(("/", ".", "~")) or "\\" in name:
        return True
    try:
        validate_repo_id(name)
    except HFValidationError:
        return True
    return False


def fetch_command(name: str, source: ModelSource) -> str:
    """The command that puts hub id `name` (at the source's revision) in the cache."""
    return f"hf download {name}" + (f" --revision {source.revision}" if source.revision else "")


def _offline_reason(source: ModelSource) -> str:
    from huggingface_hub import constants

    if source.offline:
        return "offline: --offline"
    if constants.is_offline_mode():
        return "offline: HF_HUB_OFFLINE=1"
    return "the Hugging Face Hub cannot be reached"


def _at(name: str, source: ModelSource) -> str:
    return f"model {name!r}" + (f" at revision {source.revision!r}" if source.revision else "")


def hub_file(name: str, filename: str, source: ModelSource, required: bool = True,
             reason: str | None = None) -> Path | None:
    """`filename` of hub model `name` at the source's revision: from the cache, or downloaded
    when online. None when an optional file (`required=False`) does not exist; a one-line
    error for everything a user can fix (`reason`: why the cache is all there is, if not the
    source's offline setting)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return Path(hf_hub_download(name, filename, revision=source.revision,
                                    local_files_only=source.is_offline))
    except GatedRepoError:
        raise KnowflowError(f"model {name!r}: a gated model on the Hugging Face Hub",
                            f"accept its terms on https://huggingface.co/{name} and log in "
                            "with `hf auth login`") from None
    except RepositoryNotFoundError:
        raise KnowflowError(f"model {name!r}: not a local folder and no such model on the "
                            "Hugging Face Hub", "check the id (a private model needs `hf auth "
                            "login`), or give a local folder") from None
    except RevisionNotFoundError:
        raise ConfigError(f"model {name!r} has no branch, tag or commit "
                          f"{source.revision!r}", "revision",
                          "give one of its branches, tags or commits") from None
    except LocalEntryNotFoundError:
        if not required and _cached_revision(name, source):
            return None  # the model is cached; this optional file is not part of it
        raise KnowflowError(
            f"{_at(name, source)}: not a local folder and not in the Hugging Face cache "
            f"({reason or _offline_reason(source)})",
            f"fetch it on a connected machine with `{fetch_command(name, source)}` (or run "
            "online), or give a local folder") from None
    except EntryNotFoundError:
        if not required:
            return None
        raise KnowflowError(f"{_at(name, source)}: the repository has no {filename} (not a "
                            "transformers model)",
                            "give a model saved with save_pretrained") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        raise KnowflowError(f"model {name!r}: the Hugging Face Hub answered "
                            f"{status or type(exc).__name__}",
                            "try again later, or use a cached copy with --offline") from None


def _cached_revision(name: str, source: ModelSource) -> bool:
    """Whether the cache holds some snapshot of `name` at the source's revision."""
    from huggingface_hub import constants

    repo = Path(constants.HF_HUB_CACHE) / f"models--{name.replace('/', '--')}"
    revision = source.revision or "main"
    if _COMMIT.match(revision):
        return (repo / "snapshots" / revision).is_dir()
    ref = repo / "refs" / revision
    return ref.is_file() and (repo / "snapshots" / ref.read_text().strip()).is_dir()


def json_object(path: Path, hint: str) -> dict:
    """The JSON object in `path` ({} for any other JSON value); one line (with `hint`) when
    the file cannot be read as JSON."""
    try:
        data = read_json(path)
    except (OSError, DataError):
        raise KnowflowError(f"{path}: not a readable JSON file", hint) from None
    return data if isinstance(data, dict) else {}


def _read(path: Path | None) -> dict:
    if path is None or not path.is_file():
        return {}
    return json_object(path, "the model's files are damaged; fetch or save them again")


def model_configs(name: str, source: ModelSource, reason: str | None = None
                  ) -> tuple[dict, dict]:
    """(config.json, tokenizer_config.json) of a local folder or a hub id ({} where absent).
    For a hub id this downloads (or finds in the cache) only those two small files."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        return _read(folder / "config.json"), _read(folder / "tokenizer_config.json")
    return (_read(hub_file(name, "config.json", source, reason=reason)),
            _read(hub_file(name, "tokenizer_config.json", source, required=False,
                           reason=reason)))


def hub_weights(name: str, source: ModelSource) -> Path:
    """The snapshot folder of hub model `name` in the Hugging Face cache, holding its config
    and safetensors weights: the index and each file it names, or model.safetensors (from the
    cache, or downloaded now when online, as the load would download them next), so that the
    folder's checks read the files the load will."""
    config = hub_file(name, "config.json", source)
    index = hub_file(name, "model.safetensors.index.json", source, required=False)
    weight_map = _read(index).get("weight_map") if index is not None else None
    if isinstance(weight_map, dict):
        for shard in sorted({f for f in weight_map.values() if isinstance(f, str)}):
            if ".." not in Path(shard).parts:  # only files inside the repository
                hub_file(name, shard, source, required=False)
    elif index is None:
        hub_file(name, "model.safetensors", source, required=False)
    return config.parent


def hub_reachable(name: str, source: ModelSource) -> bool:
    """One quick request (no retries) for the model's config.json: False when the Hub cannot
    be reached at all (no network, a firewall); an HTTP answer of any kind counts as reached."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url

    try:
        get_hf_file_metadata(hf_hub_url(name, "config.json", revision=source.revision),
                             timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - classified below; hub_file reports the rest
        # no answer at all: the HTTP client's transport errors (httpx or httpx2, whichever
        # this huggingface_hub uses), offline mode, a refused or timed-out connection
        return not (isinstance(exc, (ConnectionError, TimeoutError)) or
                    any(c.__name__ in ("TransportError", "OfflineModeIsEnabled")
                        for c in type(exc).__mro__))
    return True


def resolve_hub(name: str, source: ModelSource, warn: bool = True) -> ModelSource:
    """Check hub model `name` (its config files found, its code allowed) and return the source
    its files load with: offline when the Hub cannot be reached, so that transformers takes the
    cached files at once instead of retrying every file it looks for (`warn`: log that)."""
    reason = None
    if not source.is_offline and not hub_reachable(name, source):
        reason = "the Hugging Face Hub cannot be reached"
        if warn:
            log.warning("model %r: %s; loading it from the Hugging Face cache", name, reason)
        source = dataclasses.replace(source, offline=True)
    with hub_mode(source):
        check_remote_code(name, *model_configs(name, source, reason), source)
    return source


def check_remote_code(name: str, config: dict, tokenizer_config: dict,
                      source: ModelSource) -> None:
    """Refuse a model that needs its own Python code unless `trust_remote_code` is set; one
    whose `model_type` transformers has built in loads with transformers' classes (its code
    never runs, as transformers does with trust_remote_code=False)."""
    files = [f for f, c in (("config.json", config), ("tokenizer_config.json",
                                                       tokenizer_config)) if c.get("auto_map")]
    if not files or source.trust_remote_code:
        return
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in CONFIG_MAPPING and \
            _builtin_tokenizer(tokenizer_config):
        log.warning("model %r: %s names the repository's own code (auto_map); loading "
                    "transformers' built-in %s classes instead (--trust-remote-code runs the "
                    "repository's code)", name, " and ".join(files), model_type)
        return
    raise ConfigError(
        f"model {name!r}: its {' and '.join(files)} asks to run the repository's own Python "
        f"code (auto_map), which knowflow runs only when asked",
        hint="pass --trust-remote-code (trust_remote_code=True) if you trust that code")


def _builtin_tokenizer(tokenizer_config: dict) -> bool:
    """Whether transformers has the tokenizer class tokenizer_config.json names (none named:
    the model type's own); a class only the repository's code defines needs that code."""
    import transformers

    name = tokenizer_config.get("tokenizer_class")
    if name is None:
        return True
    return isinstance(name, str) and name.isidentifier() and any(
        hasattr(transformers, n) for n in (name, name.removesuffix("Fast")))
