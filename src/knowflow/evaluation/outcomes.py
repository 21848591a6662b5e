"""What each generated answer names: the context's answer, the memory's, both, or neither, and
why neither.

Counterfactual and parametric accuracy count mentions independently, so an answer that names
nothing counts in neither and a table of the two hides it: a contrastive decoder that ends
"The capital city of Nepal." before the name looks like one that answered "Kathmandu" less
often. Every generation is put in exactly one class:

- `context`: names the context's answer only; `memory`: the memorized answer only; `both`;
- `garbled`: neither, but a near-miss of the context's answer (`garbled.py`: "Suhan Reap");
- `cut_off`: neither, and no name at all: every word of the answer is a word of the question,
  of the subject, or a function word ("The capital city of Nepal.", an empty answer, a saying
  repeated without its last word);
- `other`: neither, naming something else (another city, a refusal, a digression).

Shares carry Wilson score intervals (95%): each share is a binomial proportion over the
scored items, and Wilson's interval stays inside [0, 1] and is not degenerate at 0 or 1, where
a percentile bootstrap of a share of 0 is the single point 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from knowflow.evaluation.normalize import words

OUTCOMES = ("context", "memory", "both", "cut_off", "garbled", "other")
NEITHER = ("cut_off", "garbled", "other")
FUNCTION_WORDS = frozenset((
    "a", "an", "the", "is", "was", "are", "were", "be", "been", "being", "has", "have", "had",
    "it", "its", "this", "that", "these", "those", "there", "of", "in", "on", "at", "to", "for",
    "by", "from", "with", "as", "and", "or", "but", "so", "which", "who", "whose", "where",
    "when", "what", "how", "city", "capital", "answer", "according", "passage", "text",
    "context", "i", "my", "we", "our", "you", "your", "s"
))
Z95 = 1.959963984540054


def cut_off(output: str, question: str, subject: str = "") -> bool:
    """Whether `output` adds no word beyond the question's, the subject's and function words."""
    known = set(words(question)) | set(words(subject)) | FUNCTION_WORDS
    return all(w in known for w in words(output))


def classify(output: str, hit_context: bool, hit_memory: bool, garbled: bool, question: str,
             subject: str = "") -> str:
    """The class of one generated answer (one of OUTCOMES; see the module docstring)."""
    if hit_context and hit_memory:
        return "both"
    if hit_context:
        return "context"
    if hit_memory:
        return "memory"
    if garbled:
        return "garbled"
    return "cut_off" if cut_off(output, question, subject) else "other"


def wilson_ci(successes: int, n: int, z: float = Z95) -> list[float] | None:
    """Wilson score interval of a binomial proportion; None for n = 0."""
    if n == 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [max(0.0, centre - half), min(1.0, centre + half)]


def outcome_shares(outcomes: Sequence[str]) -> dict:
    """{outcome_<class>: share, outcome_<class>_ci: Wilson interval} for every class."""
    n = len(outcomes)
    out: dict = {}
    for name in OUTCOMES:
        k = sum(o == name for o in outcomes)
        out[f"outcome_{name}"] = k / n if n else None
        out[f"outcome_{name}_ci"] = wilson_ci(k, n)
    return out
