"""Counterfactual augmentation: entity-substituted copies of examples whose context states the
answer, so that following the context and following memory disagree in training too (a
mitigation of Goyal et al., ICLR 2025).

A source example has a context (`input`) that contains its answer (`output`); rows marked
`kind: "C+S"` (context agrees with a known fact) are preferred when the file marks kinds. The
copy replaces every occurrence of the answer in the context by another answer of the same
`relation` (or, without relations, of the file), and that substitute becomes the output.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from knowflow.config import option, require
from knowflow.data.facts import Instruction
from knowflow.errors import ConfigError, KnowflowError

MAX_RATIO = 100  # counterfactual copies per example: beyond, the same substitutions repeat


@dataclass(frozen=True)
class AugmentConfig:
    ratio: float = option(0.25, "Counterfactual examples added per original example.")
    seed: int = option(0, "Seed (the substitutes drawn, and the built-in mixture).")

    def validate(self) -> None:
        if not 0 < self.ratio <= MAX_RATIO:  # also refuses nan and inf
            raise ConfigError(f"must be a positive number up to {MAX_RATIO}, got {self.ratio}",
                              "ratio", "e.g. 0.25 adds one counterfactual per four examples")


def _key(text: str) -> str:
    return re.sub(r"\W+", " ", text.casefold()).strip()


def sources(examples: Sequence[Instruction]) -> list[int]:
    """Indices of examples that can be substituted (C+S rows when kinds are marked)."""
    ok = [i for i, ex in enumerate(examples)
          if not ex.messages and ex.output.strip() and ex.output in ex.input]
    marked = [i for i in ok if examples[i].extra.get("kind") == "C+S"]
    return marked if any("kind" in ex.extra for ex in examples) else ok


def counterfactual(ex: Instruction, answer: str) -> Instruction:
    """`ex` with its answer replaced by `answer` in the context and the output."""
    extra = {**ex.extra, "kind": "CF", "augmented": True, "original_answer": ex.output}
    return dataclasses.replace(ex, input=ex.input.replace(ex.output, answer), output=answer,
                               extra=extra)


def augment(examples: Sequence[Instruction], ratio: float, seed: int = 0
            ) -> list[Instruction]:
    """`examples` plus round(ratio * len(examples)) counterfactual copies, shuffled in (fewer
    when a source's relation has no other answer to substitute)."""
    require(ratio > 0, "ratio", "must be positive")
    idx = sources(examples)
    if not idx:
        raise KnowflowError("augment: no example has its answer in its context (input), so "
                            "none can be substituted")
    pools: dict[str, list[str]] = {}  # substitutes: answers of the same relation
    for ex in examples:
        if not ex.messages and ex.output.strip():
            pools.setdefault(ex.extra.get("relation", ""), []).append(ex.output)
    rng = random.Random(f"{seed}:augment")
    n_new = round(ratio * len(examples))
    order = rng.sample(idx, len(idx))
    picks = [order[k % len(order)] for k in range(n_new)]
    added = []
    for i in picks:
        ex = examples[i]
        pool = sorted({a for a in pools[ex.extra.get("relation", "")]
                       if _key(a) != _key(ex.output) and _key(a) not in _key(ex.input)})
        if not pool:
            continue
        added.append(counterfactual(ex, rng.choice(pool)))
    out = list(examples) + added
    rng.shuffle(out)
    return out
