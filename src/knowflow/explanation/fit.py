"""`knowflow explain fit`: fit a model's learned attribution estimator (`learned.py`) on
generated training contexts (`contexts.py`) and save it beside the model's cache entry
(`estimator.py`).

Per training context: the model's greedy answer, its span (`target.explained_span`, as
explain weighs it), the span's log-probability under `ablations` random ablations (scored
over the token trie, as explain's ablation attribution) and the per-head features of the
full context (`features`: one forward pass; `soft`, the default, and `total` add one
backward pass). The last
`heldout` share of the contexts chooses the ridge penalty and gives the fit quality (their
mean LDS). The cost is that of explaining each
training context by ablation once: about `contexts` x the ablation time of one item.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from knowflow.config import option, require
from knowflow.data.prompts import FORMAT_HELP, FORMATS, PromptFormat, resolve_format
from knowflow.errors import ConfigError
from knowflow.evaluation.generate import generate
from knowflow.explanation.attribution import ablation_masks, score_masks
from knowflow.explanation.contexts import DESCRIPTION, training_items
from knowflow.explanation.estimator import Estimator, fingerprint, save_estimator
from knowflow.explanation.features import KINDS
from knowflow.explanation.learned import (
    FitExample,
    fit_head_weights,
    prior_weights,
    sentence_features,
)
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import encode, rendered, sentence_tokens, with_lead
from knowflow.explanation.splitter import split_sentences
from knowflow.explanation.target import explained_span
from knowflow.lens.arch import arch_of
from knowflow.lens.hub import ModelSource
from knowflow.lens.load import resolve_model
from knowflow.store.run_folder import Progress


@dataclass(frozen=True)
class FitConfig:
    RENAMED = {"n_contexts": "contexts", "n_ablations": "ablations"}  # earlier versions' keys

    contexts: int = option(48, "Generated training contexts.")
    ablations: int = option(32, "Ablations per training context.")
    heldout: float = 0.25                # share of contexts that choose the penalty
    multi_document: float = 0.5          # share of multi-document contexts
    world: float = 0.5                   # share of real-fact contexts (contexts.py)
    max_new_tokens: int = 12             # the answers explained
    prompt_format: PromptFormat = option("auto", FORMAT_HELP)
    seed: int = option(0, "Seed of the generated contexts and their ablations.")
    features: str = "soft"               # feature kinds (features.py), joined by "+"

    def kinds(self) -> tuple[str, ...]:
        return tuple(self.features.split("+"))

    def validate(self) -> None:
        require(self.contexts >= 4, "contexts", "must be at least 4")
        require(self.ablations >= 8, "ablations", "must be at least 8")
        require(0.0 < self.heldout < 1.0, "heldout", "must lie strictly between 0 and 1")
        require(0.0 <= self.multi_document <= 1.0, "multi_document", "must lie in [0, 1]")
        require(0.0 <= self.world <= 1.0, "world", "must lie in [0, 1]")
        require(self.max_new_tokens >= 1, "max_new_tokens", "must be at least 1")
        bad = [k for k in self.kinds() if k not in KINDS]
        require(not bad, "features", f"{bad} unknown: kinds of {', '.join(KINDS)} joined "
                "by '+'")
        if self.prompt_format not in FORMATS:
            raise ConfigError(f"{self.prompt_format!r} is not one of {', '.join(FORMATS)}",
                              "prompt_format")


def fit_examples(model, tokenizer, cfg: FitConfig, progress: Progress | None = None
                 ) -> list[FitExample]:
    """The training contexts' features and ablation scores (see the module docstring)."""
    return list(iter_fit_examples(model, tokenizer, cfg, progress))


def iter_fit_examples(model, tokenizer, cfg: FitConfig, progress: Progress | None = None
                      ) -> Iterator[FitExample]:
    """`fit_examples` one context at a time (a caller may keep each as it comes)."""
    fmt = resolve_format(cfg.prompt_format, tokenizer)
    items = training_items(cfg.contexts, cfg.seed, cfg.multi_document, cfg.world)
    prompts = [rendered(it, tokenizer, fmt) for it in items]
    said = generate(model, tokenizer, encode(tokenizer, prompts), batch_size=8,
                    max_new_tokens=cfg.max_new_tokens, progress=progress,
                    stage="generate answers")
    ecfg = ExplainConfig(ablations=cfg.ablations, holdout=0, prompt_format=fmt,
                         seed=cfg.seed)
    for i, (it, prompt, answer) in enumerate(zip(items, prompts, said, strict=True)):
        if progress is not None:
            progress(i, len(items), "fit contexts")
        if not answer.strip():
            continue
        lead, span, _ = explained_span(it, answer)
        cont = (prompt.answer_prefix if not lead else "") + span
        led_ids = encode(tokenizer, [with_lead(prompt, lead)])[0]
        sents = split_sentences(it.context)
        masks, _ = ablation_masks(len(sents), ecfg, it.id + it.context)
        targets = score_masks(model, tokenizer, it, sents, masks, cont, ecfg, lead)
        spans = sentence_tokens(it, sents, tokenizer, fmt)
        span_ids = tokenizer(cont, add_special_tokens=False)["input_ids"]
        feats = sentence_features(model, led_ids, span_ids, spans, cfg.kinds())
        yield FitExample(feats, masks, targets, tuple(led_ids), tuple(span_ids),
                         tuple(tuple(s) for s in spans))
    if progress is not None:
        progress(len(items), len(items), "fit contexts")


def fit_estimator(model, tokenizer, model_name: str, cfg: FitConfig | None = None,
                  progress: Progress | None = None, revision: str | None = None,
                  examples: list[FitExample] | None = None) -> Estimator:
    """Fit the estimator of `model` (see the module docstring); the caller saves it.
    `examples` (from `fit_examples`) skips computing them; the fit's cost then counts
    only the regression."""
    cfg = cfg or FitConfig()
    cfg.validate()
    clock, cpu = time.perf_counter(), time.process_time()
    if examples is None:
        examples = fit_examples(model, tokenizer, cfg, progress)
    cut = max(1, round(len(examples) * (1 - cfg.heldout)))
    arch = arch_of(model)
    fit = fit_head_weights(examples[:cut], examples[cut:],
                           prior=prior_weights(cfg.kinds(), arch.n_layers * arch.n_heads))
    provenance = {
        "model": model_name, "revision": revision, "model_fingerprint": fingerprint(model),
        "training_data": DESCRIPTION, "fit_config": dataclasses.asdict(cfg),
        "fitted": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "n_contexts": len(examples), "n_train": cut, "n_heldout": len(examples) - cut,
        "ablations_used": cfg.ablations * len(examples),
        "ridge": fit.ridge, "heldout_lds": fit.heldout_lds, "train_lds": fit.train_lds,
        "fit_seconds": time.perf_counter() - clock, "fit_cpu_seconds": time.process_time() - cpu,
        "method": "ridge regression of ablated log-probabilities on masks x per-head "
                  f"sentence features ({cfg.features}; explanation/features.py), shrunk "
                  "towards 1 per head's signed effect, 0 otherwise (explanation/learned.py)"}
    weights = tuple(float(w) for w in fit.weights)
    if not all(torch.isfinite(fit.weights)):
        raise ConfigError("the fit gave non-finite weights", "contexts",
                          "fit on more contexts")
    return Estimator(weights, arch.n_layers, arch.n_heads, provenance, cfg.kinds())


def fit_model(model_name: str, cfg: FitConfig | None = None, *, device: str = "auto",
              dtype: str = "auto", progress: Progress | None = None,
              out: Path | None = None, source: ModelSource | None = None
              ) -> tuple[Estimator, Path]:
    """Load `model_name`, fit its estimator and save it beside its cache entry (or to `out`):
    (the estimator, where it was saved)."""
    cfg = cfg or FitConfig()
    cfg.validate()
    if progress is not None:
        progress(0, 1, "load model")
    model, tokenizer, _ = resolve_model(model_name, device=device, dtype=dtype, source=source)
    if progress is not None:
        progress(1, 1, "load model")
    est = fit_estimator(model, tokenizer, model_name, cfg, progress,
                        source.revision if source else None)
    return est, save_estimator(est, model_name, out)
