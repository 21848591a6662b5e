"""`EvalConfig`: the options of a knowledge-conflict evaluation, and their checks.

The decoding methods (`evaluation.decoding`) and context conditions (`evaluation.conditions`) an
evaluation sweeps are named here as strings and parsed once, when the config is validated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from knowflow.config import option
from knowflow.data.options import SuiteData
from knowflow.data.prompts import FORMAT_HELP, FORMATS, PromptFormat
from knowflow.errors import ConfigError
from knowflow.evaluation.decoding import BETA, BETA_METHODS, methods_of, parse_alphas, parse_betas
from knowflow.lens.memory import MAX_MEMORY_HELP, check_max_memory

Scoring = Literal["generate", "loglik", "both"]
MODES = {"generate": ("generate",), "loglik": ("loglik",), "both": ("generate", "loglik")}


@dataclass(frozen=True)
class EvalConfig:
    scoring: Scoring = option("both", "generate, loglik or both.")
    prompt_format: PromptFormat = option("auto", FORMAT_HELP)
    use_context: bool = option(True, "Ask the question alone (what the model knows).",
                               flag="no_context")  # False: the question alone
    context_only: bool = option(False, 'Add "Answer based on the context only."')
    limit: int | None = option(None, "Items per suite (seeded sample).")
    seed: int = option(0, "Seed for suites, sampling and bootstrap.")
    batch_size: int = option(16, "Prompts per forward pass (0: as many as free GPU memory "
                                 "allows).")  # or max_memory, with 0
    max_memory: float | None = option(None, MAX_MEMORY_HELP + " With --batch-size 0 the batch "
                                      "is sized to it instead.")  # lens.memory; None: no cap
    max_new_tokens: int = option(24, "Longest generated answer.")
    known_filter: bool | None = option(None, "Run the no-context pass that finds known facts "
                                             "(default: under generate and both, not under "
                                             "--scoring loglik); --no-known-filter skips it.")
    known_by: str = option("auto", "How the no-context pass finds known facts: loglik (the "
                                   "memorized answer is the likelier; no decoding), generate "
                                   "(greedy output mentions it), or auto (loglik under "
                                   "--scoring loglik, else generate).")
    n_bootstrap: int = 1000
    share_prefix: bool = True           # run the prompts' common prefix once
    method: str = option("greedy", "Decoding method(s), comma-separated: greedy, cad, adacad, "
                                   "coiecd, cocoa, heads (or heads:L.H+L.HxGAMMA), opinion, "
                                   "opinion+cad, opinion+adacad (several: one pass each, and a "
                                   "tradeoff figure).")  # decoding.py
    alpha: float | str | tuple[float, ...] = option(1.0, "CAD's alpha; several (0,0.5,1,2) "
                                                         "sweep it.")
    beta: float | str | tuple[float, ...] = option(BETA, "Plausibility constraint of cad, "
                                                         "adacad and cocoa in generation: only "
                                                         "tokens with p(y|c,x) >= beta * max "
                                                         "p(.|c,x) are eligible (0: off; "
                                                         "ignored by log-likelihood scoring); "
                                                         "several (0,0.3) sweep it.")
    conditions: str | tuple[str, ...] = option("conflicting", "Context conditions, "
                                               "comma-separated: conflicting, agreeing, "
                                               "irrelevant (sensitivity and robustness need "
                                               "conflicting and irrelevant).")  # conditions.py
    guard: bool = True                  # contrastive generation: stops, word pieces by the
    #                                     with-context model (guard.py); False: plain methods

    def validate(self) -> None:
        if self.scoring not in MODES:
            raise ConfigError(f"{self.scoring!r} is not one of generate, loglik, both",
                              "scoring")
        if self.prompt_format not in FORMATS:
            raise ConfigError(f"{self.prompt_format!r} is not one of {', '.join(FORMATS)}",
                              "prompt_format")
        for name in ("max_new_tokens", "n_bootstrap"):
            if getattr(self, name) < 1:
                raise ConfigError("must be at least 1", name)
        if self.batch_size < 0:
            raise ConfigError("must be at least 1 (or 0: by free GPU memory)", "batch_size")
        check_max_memory(self.max_memory)
        if self.known_by not in ("auto", "loglik", "generate"):
            raise ConfigError(f"{self.known_by!r} is not one of auto, loglik, generate",
                              "known_by")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("must be at least 1", "limit")
        if self.seed < 0:
            raise ConfigError(f"must not be negative, got {self.seed}", "seed")
        if self.context_only and not self.use_context:
            raise ConfigError("asks to answer from the context, but no context is shown",
                              "context_only", "give --no-context or --context-only, not both")
        validate_sweep(self)


@dataclass(frozen=True)
class EvalData(SuiteData):
    """What `knowflow eval` reads: suites and files, or lm-eval's samples of knowflow's
    exported tasks (then no model runs)."""

    from_lm_eval: tuple[Path, ...] = option((), "Report knowflow's metrics from lm_eval "
                                                "--log_samples files of tasks written by "
                                                "`knowflow export lm-eval` (repeatable; no "
                                                "model runs).")

    def validate(self) -> None:
        super().validate()
        if self.from_lm_eval and (self.suite is not None or self.data):
            raise ConfigError("reads lm-eval's results; it takes no --suite or --data",
                              "from_lm_eval", "drop --suite/--data")


def known_filter(cfg: EvalConfig) -> bool:
    """Whether the no-context pass that marks known facts runs: as `cfg.known_filter` says,
    else under generation scoring ("generate", "both") and not under "loglik" alone. There
    the split would rest on log-likelihood "known" flags, which agree with generation's on
    about half of the items (docs/commands/eval.md), and the pass adds up to half the main
    pass's tokens to an lm-eval-style accuracy run; `--known-filter` asks for it."""
    if cfg.known_filter is not None:
        return cfg.known_filter
    return cfg.scoring != "loglik"


def known_by(cfg: EvalConfig) -> str:
    """How the known-facts pass decides: "loglik" (no decoding) under log-likelihood scoring
    alone, else "generate"; `cfg.known_by` overrides."""
    if cfg.known_by != "auto":
        return cfg.known_by
    return "loglik" if cfg.scoring == "loglik" else "generate"


CONDITIONS = ("conflicting", "agreeing", "irrelevant")


def parse_conditions(conditions) -> tuple[str, ...]:
    """--conditions: names from CONDITIONS, comma-separated, each once."""
    names = [n.strip() for n in conditions.split(",")] if isinstance(conditions, str) \
        else [str(n).strip() for n in conditions]
    bad = next((n for n in names if n not in CONDITIONS), None) if names else ""
    if bad is not None:
        raise ConfigError(f"unknown condition {bad!r}", "conditions",
                          f"give one or more of {', '.join(CONDITIONS)}, comma-separated")
    return tuple(dict.fromkeys(names))


def validate_sweep(cfg) -> None:
    """The method, alpha and conditions fields of an `EvalConfig`."""
    methods = methods_of(cfg)
    conditions = parse_conditions(cfg.conditions)
    if not cfg.use_context:
        if any(m.contrastive or m.opinion for m in methods):
            raise ConfigError("contrasts or recasts the context, but no context is shown",
                              "method", "drop --no-context or use --method greedy")
        if conditions != ("conflicting",):
            raise ConfigError("shows contexts, but --no-context shows none", "conditions",
                              "drop --no-context or --conditions")
    check_method_flags(cfg, methods)


def check_method_flags(cfg, methods) -> None:
    """A method's own setting given to methods that do not use it is refused (it would have
    no effect): --alpha without cad, --beta without cad, adacad or cocoa, the guard off
    without a contrastive method. Values equal to the defaults pass (nothing to ignore)."""
    bases = {m.base for m in methods}
    named = f"--method {cfg.method}"
    if parse_alphas(cfg.alpha) != (1.0,) and "cad" not in bases:
        raise ConfigError(f"is CAD's alpha, but {named} has no cad: it would have no effect",
                          "alpha", "drop --alpha, or add cad to --method")
    if parse_betas(getattr(cfg, "beta", BETA)) != (BETA,) and not bases & set(BETA_METHODS):
        raise ConfigError(f"is the plausibility constraint of {', '.join(BETA_METHODS)}, but "
                          f"{named} uses none of them: it would have no effect", "beta",
                          "drop --beta, or add one of those methods to --method")
    if not getattr(cfg, "guard", True) and not any(m.contrastive for m in methods):
        raise ConfigError(f"turns off the contrastive methods' generation guard, but {named} "
                          "has no contrastive method: it would have no effect", "guard",
                          "drop guard=false, or add a contrastive method to --method")
