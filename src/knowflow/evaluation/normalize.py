"""Answer normalization and presence matching for generation scoring.

Text is compared as word sequences after Unicode NFKD (accents dropped), casefolding,
dropping a word-final possessive 's, removing other apostrophes and zero-width characters,
turning other punctuation into spaces and dropping the articles a/an/the, as SQuAD-style
evaluation does (`data.answer_text.words`: the one answer-text rule, whose reading half the
loader applies to every answer). An answer is present when one of its alternatives occurs as a
contiguous word sequence (so "Rome" does not match "Romeo"). A gold answer may be
compound — "A (x); B (y)" or "A or B" — and any alternative counts. When answers overlap
("New Cairo" / "Cairo"), a mention of the longer one does not count for the shorter:
each answer's matches that lie strictly inside a longer match of a competing answer are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from knowflow.data.answer_text import ARTICLES, Words, words

__all__ = ["ARTICLES", "Words", "alternatives", "answers_present", "find_spans", "normalize",
           "primary", "score_output", "words"]

_PARENS = re.compile(r"\([^)]*\)")
_OR = re.compile(r"\s+or\s+", re.IGNORECASE)

Span = tuple[int, int]


def normalize(text: str) -> str:
    """`words(text)` joined by single spaces."""
    return " ".join(words(text))


def alternatives(answer: str, aliases: Iterable[str] = ()) -> list[Words]:
    """Every accepted word sequence for a gold answer: its ';'/'or' parts (parenthetical
    qualifiers dropped) and its aliases, without duplicates or empty entries (kept once by a
    set: linear in the number of aliases)."""
    out: list[Words] = []
    seen: set[Words] = set()
    for text in (answer, *aliases):
        for part in text.split(";"):
            for option in _OR.split(part):
                w = words(_PARENS.sub(" ", option))
                if w and w not in seen:
                    seen.add(w)
                    out.append(w)
    return out


def primary(answer: str) -> str:
    """The first alternative of a compound answer as written ("A (x); B" -> "A"): the
    continuation that log-likelihood scoring uses."""
    first = _OR.split(answer.split(";")[0])[0]
    return " ".join(_PARENS.sub(" ", first).split()) or answer.strip()


def find_spans(haystack: Sequence[str], needle: Sequence[str]) -> list[Span]:
    """Word-index spans [start, end) where `needle` occurs contiguously in `haystack`."""
    n = len(needle)
    if n == 0:
        return []
    first = needle[0]
    return [(i, i + n) for i in range(len(haystack) - n + 1)
            if haystack[i] == first and tuple(haystack[i:i + n]) == tuple(needle)]


def answers_present(output: str, answer_sets: Sequence[Sequence[Words]]) -> list[bool]:
    """For each answer (a list of alternatives), whether `output` mentions it.

    A match of answer k is ignored when a strictly longer match of another answer contains
    it; each answer is otherwise judged independently (both may be present).
    """
    hay = words(output)
    spans = [[s for alt in alts for s in find_spans(hay, alt)] for alts in answer_sets]
    present = []
    for k, own in enumerate(spans):
        others = [t for j, sp in enumerate(spans) if j != k for t in sp]
        present.append(any(
            not any(t[0] <= s[0] and s[1] <= t[1] and t[1] - t[0] > s[1] - s[0] for t in others)
            for s in own))
    return present


def score_output(output: str, counterfactual: Sequence[Words], parametric: Sequence[Words],
                 subject: Sequence[Words] = ()) -> tuple[bool, bool]:
    """(counterfactual answer present, parametric answer present) in a generated output.

    `subject` (the question's subject, e.g. "the Sydney Opera House") competes like a third
    answer, so an echo of the subject does not count as a mention of "Sydney"."""
    found = answers_present(output, [counterfactual, parametric, subject])
    return found[0], found[1]
