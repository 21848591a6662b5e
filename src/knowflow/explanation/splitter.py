"""An offline sentence splitter (nothing downloaded, no model): rules over punctuation.

A sentence ends at `.`, `!` or `?` (with any closing quotes or brackets after it) followed by
whitespace and then something that can open a sentence: a capital letter, a digit or an
opening quote/bracket. A period does not end a sentence after a known abbreviation (Mr., Dr.,
St., e.g., U.S., D.C., ...) or a single capital initial (J. K. Rowling); a decimal point has no
space after it (3.14), so it never splits. Blank lines always separate sentences.

Each `Sentence` keeps its character span, so a context rebuilt from a subset of its sentences
(`join_kept`) keeps the original spacing, and keeping every sentence gives the context back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

ABBREVIATIONS = frozenset((
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "gen", "col", "lt", "sgt",
    "capt", "rev", "hon", "gov", "pres", "sen", "rep", "inc", "ltd", "co", "corp", "bros", "vs",
    "etc", "al", "approx", "dept", "fig", "vol", "univ", "jan", "feb", "mar", "apr", "jun",
    "jul", "aug", "sep", "sept", "oct", "nov", "dec", "e.g", "i.e", "a.m", "p.m", "u.s", "u.k",
    "u.n", "d.c"))

_END = re.compile(r"""[.!?]+['"\u2019\u201d)\]]*(?=\s)""")
_OPENS = re.compile(r"""\s+['"\u2018\u201c(\[]*[A-Z0-9\u00c0-\u024f]""")
_PARAGRAPH = re.compile(r"\n\s*\n")


@dataclass(frozen=True)
class Sentence:
    text: str
    start: int     # character span [start, end) in the context, whitespace excluded
    end: int


def _abbreviation(text: str, dot: int) -> bool:
    """Whether the period at `dot` closes an abbreviation or an initial, not a sentence."""
    word = re.search(r"[\w.]*$", text[:dot]).group(0).lower()
    word = word.lstrip(".")
    if not word:
        return False
    if len(word) == 1 and word.isalpha():                   # an initial: J. K. Rowling
        return True
    return word in ABBREVIATIONS


def _cuts(text: str) -> list[int]:
    """Character offsets where a new sentence starts."""
    cuts = [m.end() for m in _PARAGRAPH.finditer(text)]
    for m in _END.finditer(text):
        opens = _OPENS.match(text, m.end())
        if opens is None:
            continue
        if text[m.start()] == "." and m.end() - m.start() == 1 and _abbreviation(text, m.start()):
            continue
        cuts.append(m.end())
    return sorted(set(cuts))


def split_sentences(text: str) -> list[Sentence]:
    """The sentences of `text` in order (empty text: none)."""
    bounds = [0, *_cuts(text), len(text)]
    out = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        piece = text[lo:hi]
        stripped = piece.strip()
        if stripped:
            start = lo + len(piece) - len(piece.lstrip())
            out.append(Sentence(stripped, start, start + len(stripped)))
    return out


def join_kept(text: str, sentences: Sequence[Sentence], keep: Sequence[bool]) -> str:
    """The context with only the kept sentences: each kept sentence with the whitespace that
    followed it in `text`; keeping all of them gives `text` back (less outer whitespace)."""
    parts = []
    for i, (sent, k) in enumerate(zip(sentences, keep, strict=True)):
        if k:
            nxt = sentences[i + 1].start if i + 1 < len(sentences) else sent.end
            parts.append(text[sent.start:nxt])
    return "".join(parts).strip()
