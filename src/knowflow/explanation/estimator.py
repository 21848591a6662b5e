"""The learned attribution estimator of one model on disk: its head weights and provenance.

`knowflow explain fit --model M` writes `$KNOWFLOW_CACHE/models/<M's slug>.explain-learned.json`
beside the model's cache entry (`models/<name>/`): the head weights (layers x heads), and the
provenance: the model's name, its revision where one was asked for, a fingerprint of its
weights (so an estimator is never applied to another model of the same name), the training
data's description (never the evaluation items), the fit date, the ablations used, the fit
quality (held-out LDS) and the cost of the fit. The file is written atomically.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from knowflow.errors import ConfigError, DataError
from knowflow.explanation.features import KINDS
from knowflow.explanation.options import ExplainConfig
from knowflow.lens.arch import arch_of
from knowflow.lens.load import cache_dir
from knowflow.store.files import atomic_write_text
from knowflow.store.readers import read_json

SUFFIX = ".explain-learned.json"
FORMAT = 2          # 2: `soft` and `total` weigh the readers' attention only (features.py)
READERS_SINCE = 2   # estimators of these kinds fitted before this format are refused


@dataclass(frozen=True)
class Estimator:
    weights: tuple[float, ...]            # (kinds * layers * heads,) kind-, then layer-major
    n_layers: int
    n_heads: int
    provenance: dict = field(default_factory=dict)
    features: tuple[str, ...] = ("attention",)    # the feature kinds (features.py), in order

    def tensor(self) -> torch.Tensor:
        return torch.tensor(self.weights, dtype=torch.float64)   # (kinds * layers * heads,)

    def head_weights(self) -> list[list[list[float]]]:
        """(kinds, layers, heads) as nested lists."""
        return self.tensor().reshape(len(self.features), self.n_layers, self.n_heads).tolist()


def slug(model_name: str) -> str:
    """A file name for a model name or path ("HuggingFaceTB/SmolLM2-135M" ->
    "HuggingFaceTB--SmolLM2-135M")."""
    name = str(model_name).rstrip("/")
    name = Path(name).name if Path(name).is_absolute() or name.startswith(".") else name
    return re.sub(r"[^A-Za-z0-9._-]+", "--", name).strip("-") or "model"


def estimator_path(model_name: str) -> Path:
    return cache_dir() / "models" / (slug(model_name) + SUFFIX)


def fingerprint(model) -> str:
    """sha256 of the model type and, per parameter tensor, its name, shape and a sample (its
    first and last 64 values): the same weights give the same fingerprint. The rest of the
    configuration is left out: it records loading details (dtype, transformers' version)
    that change no weight."""
    digest = hashlib.sha256(str(model.config.model_type).encode())
    for name, p in model.named_parameters():
        flat = p.detach().reshape(-1)
        sample = torch.cat([flat[:64], flat[-64:]]).float().cpu().numpy().tobytes()
        digest.update(f"{name}{tuple(p.shape)}".encode() + sample)
    return digest.hexdigest()[:24]


def save_estimator(est: Estimator, model_name: str, path: Path | None = None) -> Path:
    target = path or estimator_path(model_name)
    # atomic_write_text makes the cache folders, and takes them back if the write fails
    atomic_write_text(target, json.dumps({"format": FORMAT, **asdict(est),
                                          "weights": list(est.weights),
                                          "features": list(est.features)}, indent=1) + "\n")
    return target


def load_estimator(model, model_name: str, path: Path | None = None) -> Estimator | None:
    """The saved estimator of `model_name` (None when there is none); refused when it was
    fitted on other weights or another architecture."""
    source = path or estimator_path(model_name)
    if not source.exists():
        return None
    refit = "fit it again: knowflow explain fit --model M"
    raw = read_json(source, hint=refit)
    try:
        est = Estimator(tuple(float(w) for w in raw["weights"]), int(raw["n_layers"]),
                        int(raw["n_heads"]), dict(raw.get("provenance") or {}),
                        tuple(str(k) for k in raw.get("features", ["attention"])))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(str(source), f"not a learned estimator ({exc})", hint=refit) from None
    unknown = [k for k in est.features if k not in KINDS]
    if unknown or not est.features:
        raise DataError(str(source), f"{unknown or 'empty'} (known: {', '.join(KINDS)})",
                        field="features", hint="fit it again: knowflow explain fit --model M")
    fmt = int(raw.get("format", 1))
    if fmt < READERS_SINCE and {"soft", "total"} & set(est.features):
        raise DataError(str(source), f"format {fmt}: its soft/total "
                        "features weighed every row's attention, they now weigh the rows "
                        "after the context only", field="format",
                        hint="fit it again: knowflow explain fit --model M")
    arch = arch_of(model)
    if (est.n_layers, est.n_heads) != (arch.n_layers, arch.n_heads) or \
            len(est.weights) != len(est.features) * arch.n_layers * arch.n_heads:
        raise DataError(str(source), f"fitted for {est.n_layers} layers x {est.n_heads} "
                        f"heads, the model has {arch.n_layers} x {arch.n_heads}",
                        hint="fit it again: knowflow explain fit --model M")
    saved = est.provenance.get("model_fingerprint")
    if saved and saved != fingerprint(model):
        raise ConfigError(f"the learned estimator in {source} was fitted on other weights of "
                          f"{model_name!r}; fit it again (knowflow explain fit --model "
                          f"{model_name}) or use --attribution ablation", "attribution")
    return est


def unit_estimator(model) -> Estimator:
    """`--attribution gradient`: the `soft` feature with every head weight 1, no fit (each
    sentence's keep-weight gradient at 1/2 summed over heads: explanation/features.py)."""
    arch = arch_of(model)
    return Estimator(tuple([1.0] * (arch.n_layers * arch.n_heads)), arch.n_layers,
                     arch.n_heads, {"method": "soft keep-weight gradient at 1/2, summed over "
                                              "heads (every head weight 1, no fit)"},
                     ("soft",))


def resolve_estimator(model, name: str, cfg: ExplainConfig) -> tuple[Estimator | None, str]:
    """(the learned estimator to apply or None, the attribution method used): `learned`
    needs an estimator (one clear error without), `auto` uses one where it exists,
    `gradient` applies unit head weights (`unit_estimator`)."""
    if not cfg.sentences or cfg.attribution == "ablation":
        return None, "ablation" if cfg.sentences else "none"
    if cfg.attribution == "gradient":
        return unit_estimator(model), "gradient"
    path = Path(cfg.estimator) if cfg.estimator else None
    if path is not None and not path.is_file():
        raise ConfigError(f"{path} is not a file", "estimator",
                          "give the file `knowflow explain fit` wrote")
    est = load_estimator(model, name, path)
    if est is None:
        check_estimator(name, cfg)
    return est, "learned" if est is not None else "ablation"


def check_estimator(name: str, cfg: ExplainConfig) -> None:
    """`--attribution learned` without an estimator file: one clear error (no model
    needed)."""
    if not cfg.sentences or cfg.attribution != "learned":
        return
    path = Path(cfg.estimator) if cfg.estimator else estimator_path(name)
    if not path.is_file():
        raise ConfigError(f"no learned estimator for {name!r} (looked for {path})",
                          "attribution", f"fit one: knowflow explain fit --model {name}; "
                          "or use --attribution ablation")


def attribution_note(name: str, cfg: ExplainConfig, est: Estimator | None) -> str:
    """One line on the attribution used, for the CLI to print."""
    if not cfg.sentences:
        return "attribution: none (--levels source)"
    passes = "one pass" if not cfg.gradient_masks else \
        f"one context pass, {cfg.gradient_masks} mask points"
    passes += f" + {cfg.learned_ablations} ablations" if cfg.learned_ablations else ""
    at = "at 1/2" if not cfg.gradient_masks else f"averaged over {cfg.gradient_masks} masks"
    if est is not None and cfg.attribution == "gradient":
        return (f"attribution: gradient ({passes}: each sentence's keep-weight gradient {at}, "
                "summed over heads; no fit)")
    if est is not None:
        prov = est.provenance
        lds = prov.get("heldout_lds")
        return (f"attribution: learned ({passes}; estimator fitted {prov.get('fitted', '?')} "
                f"on {prov.get('n_contexts', '?')} generated contexts, held-out LDS "
                f"{'-' if lds is None else f'{lds:.2f}'})")
    if cfg.attribution == "ablation":
        return f"attribution: ablation ({cfg.ablations} ablations)"
    return (f"attribution: ablation ({cfg.ablations} ablations); no learned estimator for "
            f"{name!r}: `knowflow explain fit --model {name}` fits one")
