"""`ExplainConfig`: the options of `knowflow explain`, and their checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from knowflow.config import option
from knowflow.data.prompts import FORMAT_HELP, FORMATS, PromptFormat
from knowflow.errors import ConfigError
from knowflow.lens.memory import MAX_MEMORY_HELP, check_max_memory

Target = Literal["generated", "counterfactual", "parametric"]
TARGETS = ("generated", "counterfactual", "parametric")
LEVELS = ("source", "sentences", "mechanism", "tokens", "one_pass")
DEFAULT_LEVELS = ("source", "sentences", "mechanism")
Design = Literal["random", "balanced"]
Method = Literal["auto", "ablation", "learned", "gradient"]
METHODS = ("auto", "ablation", "learned", "gradient")
DESIGNS = ("random", "balanced")
# the most gradient mask points: each is a backward pass over the answer's readers (about
# 0.2 CPU s at 150 context tokens on SmolLM2-135M), and past 8 the LDS rose little
# (docs/findings/explain.md); a bound, so that a mistyped count is refused, not run for hours
# with a (points, sentences) mask tensor in memory
MAX_GRADIENT_MASKS = 256
MAX_ABLATIONS = 4096       # each ablation (and held-out mask) is a forward pass of its text


@dataclass(frozen=True)
class ExplainConfig:
    RENAMED = {"n_ablations": "ablations", "n_holdout": "holdout"}  # keys of earlier versions

    target: Target = option("generated", "The answer explained: generated (the model's own), "
                                         "counterfactual (the context's) or parametric "
                                         "(memory's).")
    levels: tuple[str, ...] = option(DEFAULT_LEVELS, "What to compute: source, sentences, "
                                     "mechanism, tokens (per-token attribution of the whole "
                                     "generation), one_pass (gradient x input beside the "
                                     "ablation: a forward and a backward pass); "
                                     "comma-separated; source is always on.")
    prompt_format: PromptFormat = option("auto", FORMAT_HELP)
    max_new_tokens: int = 16             # longest generated answer
    # source verdict
    context_ratio: float = 2.0           # the context supports the answer: it multiplies its
    #                                      odds (against all others, or the rival) this much
    # sentence attribution: ablation (the reference and the default: learned's LDS is still
    # below it, docs/commands/explain.md), learned (one pass, with a fitted estimator:
    # `knowflow explain fit`), auto (learned where the model has one), gradient (one pass,
    # no fit: the `soft` feature summed over heads, every head weight 1)
    attribution: Method = option("ablation", "Sentence attribution: ablation (the reference), "
                                             "learned (one pass; needs `explain fit`; below "
                                             "ablation's fidelity so far), auto (learned where "
                                             "fitted), gradient (one pass, no fit: each "
                                             "sentence's keep-weight gradient).")
    estimator: str | None = None         # the estimator file (default: beside the model's
    #                                      cache entry, estimator.estimator_path)
    learned_ablations: int = 0           # learned: scored ablations that correct its scores
    #                                      (learned.corrected_scores; 0: one pass only)
    gradient_masks: int = 0              # gradient: `soft` averaged over this many
    #                                      antithetic half masks (even; 0: one point, keep 1/2)
    ablations: int = option(64, "Most random sentence subsets for the surrogate (its "
                                 "rounds stop earlier once the LDS converges).")
    keep_prob: float = 0.5               # each sentence's chance to stay in an ablation
    design: Design = "random"            # fit masks: "random" (independent draws) or
    #                                      "balanced" (each sentence kept in exactly keep_prob
    #                                      of them, orthogonal columns where possible: see
    #                                      surrogate.balanced_masks)
    holdout: int = option(0, "Further held-out subsets for the LDS (0: the LDS out-of-fold, "
                             "on the fit's own ablations).")
    top_k: tuple[int, ...] = (1, 3)      # top-k drops: remove the k top sentences
    cv_folds: int = 4                    # the lasso's penalty is chosen by k-fold CV
    # mechanism
    window: int = 1                      # layers blocked together, centred on each layer
    n_heads: int = 5                     # heads with the most attention to the top sentence
    batch_size: int = 8                  # prompts per forward pass (8 is fastest on a CPU)
    score_chunk: int = 64                # ablated prompts scored per trie pass, at most ...
    score_tokens: int = 32768            # ... and at most this many prompt tokens (memory)
    max_memory: float | None = option(None, MAX_MEMORY_HELP)  # weights + one pass: refused
    # long contexts: documents first, then the sentences of the top documents (opt-in: on
    # long items the flat surrogate ranked sentences better at 40 and 80 sentences, at about
    # twice the CPU; docs/commands/explain.md, "Long contexts")
    hierarchy_above: int | None = None   # more sentences than this: hierarchical (None: never)
    document_ablations: int = 32         # masks over documents (stage 1)
    top_documents: int = 2               # documents whose sentences are attributed
    block_sentences: int = 8             # one-paragraph contexts: sentences per unit
    seed: int = option(0, "Seed of the ablations and of the --limit sample.")
    limit: int | None = option(None, "Items of --data/--suite (seeded sample).")
    offset: int = option(0, "Skip the first N items of the seeded order (held-out samples: "
                            "--offset 60 --limit 60).")
    min_ablations: int = option(16, "Ablations of the first round (sentence attribution adds "
                                "rounds until its out-of-fold LDS converges).", ge=8)
    ablation_step: int = option(8, "Ablations added per round.", ge=1)
    converge: float = option(0.02, "Stop adding ablations once the out-of-fold LDS rose less "
                             "than this over a round (0: always --ablations).", ge=0)
    lds_floor: float = option(0.7, "... and only once it is at least this (a flat but poor "
                              "fit goes on to --ablations; -1: any level).", ge=-1, le=1)
    prior: str = option("gradient", "One-pass scores that steer the ablation surrogate: "
                        "gradient (each sentence's keep-weight gradient at 1/2, the adaptive "
                        "lasso's penalty weights) or none.", one_of=("gradient", "none"))

    def validate(self) -> None:
        if self.target not in TARGETS:
            raise ConfigError(f"{self.target!r} is not one of {', '.join(TARGETS)}", "target")
        bad = [lv for lv in self.levels if lv not in LEVELS]
        if bad or "source" not in self.levels:
            raise ConfigError(f"{','.join(self.levels)!r}: give source and any of sentences, "
                              "mechanism, tokens, one_pass", "levels")
        if "mechanism" in self.levels and "sentences" not in self.levels:
            raise ConfigError("mechanism blocks the top sentence, so it needs sentences",
                              "levels")
        for level in ("tokens", "one_pass"):
            if level in self.levels and "sentences" not in self.levels:
                raise ConfigError(f"{level} attributes to sentences, so it needs sentences",
                                  "levels")
        if self.prompt_format not in FORMATS:
            raise ConfigError(f"{self.prompt_format!r} is not one of {', '.join(FORMATS)}",
                              "prompt_format")
        if self.cv_folds < 2:  # one fold would hold out every ablation and fit on none
            raise ConfigError(f"must be at least 2, got {self.cv_folds}", "cv_folds",
                              "k-fold cross-validation fits on all folds but the held-out one")
        for name in ("max_new_tokens", "ablations", "window", "batch_size",
                     "score_chunk", "score_tokens", "hierarchy_above", "top_documents",
                     "block_sentences"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError("must be at least 1", name)
        check_max_memory(self.max_memory)
        for name in ("ablations", "document_ablations"):
            if getattr(self, name) < 8:
                raise ConfigError("a surrogate needs at least 8 ablations", name)
        for name in ("ablations", "document_ablations", "holdout"):
            if getattr(self, name) > MAX_ABLATIONS:
                raise ConfigError(f"{getattr(self, name)} ablations: at most {MAX_ABLATIONS} "
                                  "(each is a forward pass of the prompt)", name,
                                  "the default is 64; the rounds stop earlier once the LDS "
                                  "converges")
        if not 0 <= self.learned_ablations <= self.ablations:
            raise ConfigError(f"must lie in [0, ablations = {self.ablations}]",
                              "learned_ablations")
        if self.gradient_masks < 0 or self.gradient_masks % 2:
            raise ConfigError(f"must be an even number (masks come in pairs), got "
                              f"{self.gradient_masks}", "gradient_masks",
                              "0 keeps the one pass at keep weight 1/2")
        if self.gradient_masks > MAX_GRADIENT_MASKS:
            raise ConfigError(f"{self.gradient_masks} mask points: at most "
                              f"{MAX_GRADIENT_MASKS} (each point is a backward pass)",
                              "gradient_masks", f"give an even number up to "
                              f"{MAX_GRADIENT_MASKS}; 2-8 is the measured range")
        if self.gradient_masks and self.attribution != "gradient":
            raise ConfigError("applies to --attribution gradient only (an estimator is fitted "
                              "on the one point's features)", "gradient_masks")
        for name in ("holdout", "n_heads"):
            if getattr(self, name) < 0:
                raise ConfigError("must not be negative", name)
        if self.attribution not in METHODS:
            raise ConfigError(f"{self.attribution!r} is not one of {', '.join(METHODS)}",
                              "attribution")
        if self.design not in DESIGNS:
            raise ConfigError(f"{self.design!r} is not one of {', '.join(DESIGNS)}", "design")
        if not 0.0 < self.keep_prob < 1.0:
            raise ConfigError("must lie strictly between 0 and 1", "keep_prob")
        if self.context_ratio < 1.0:
            raise ConfigError("must be at least 1", "context_ratio")
        if any(k < 1 for k in self.top_k):
            raise ConfigError("every k must be at least 1", "top_k")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("must be at least 1", "limit")
        if self.offset < 0:
            raise ConfigError("must not be negative", "offset")

    @property
    def sentences(self) -> bool:
        return "sentences" in self.levels

    @property
    def mechanism(self) -> bool:
        return "mechanism" in self.levels

    @property
    def tokens(self) -> bool:
        return "tokens" in self.levels

    @property
    def one_pass(self) -> bool:
        return "one_pass" in self.levels
