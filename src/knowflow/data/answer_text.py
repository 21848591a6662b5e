"""The one answer-text rule: how an answer or alias is read from any file, and the word
sequence generation scoring compares.

Reading (`clean_answer`, applied by `loaders.py` to every answer and alias, whatever the file,
preset or hub dataset): Unicode NFC, so an answer typed with a combining accent ("cafe" + U+0301)
is the same text as the precomposed one; zero-width characters (U+200B, U+200C, U+200D, U+2060,
U+FEFF) and control characters removed, a control character that is a line or tab break
turned into a space; surrounding spaces dropped. Two answers equal after this rule are the same
text under every scoring (the loader skips such an item, as it skips one whose answers are
identical as written); answers equal only after generation's normalisation below (" End." /
" end.") stay distinct for log-likelihood scoring and are skipped by generation scoring alone.

Comparing (`words`, what `evaluation.normalize` matches outputs with): NFKD with accents
dropped, casefolded, a word-final possessive 's dropped (Michelangelo's -> michelangelo),
other apostrophes removed, other punctuation and zero-width characters turned
into word breaks or removed, the articles a/an/the dropped, as SQuAD-style evaluation does. An
answer whose words are none (only punctuation "???", only an article "The", only a zero-width
space) could never be found in an output: `answer_problem` names it. The loader refuses an
answer left empty, with the file, line and field; one with text but no word is kept (it is a
continuation log-likelihood scores, e.g. a multiple-choice letter "A") and generation leaves
its item out as it does equal answers; an alias of that kind is dropped. An alias is kept once
(`unique_aliases`, by a set: linear in their number); generation scoring then keeps one
alternative per word sequence (`evaluation.normalize.alternatives`, by a set of those).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

ARTICLES = frozenset({"a", "an", "the"})
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
_DROP = str.maketrans("", "", ZERO_WIDTH)
_APOSTROPHES = re.compile(r"['\u2018\u2019\u02bc\u02bb`\u00b4]")
# A word-final possessive 's (Michelangelo's -> michelangelo): a name in the possessive still
# names it; elsewhere an apostrophe is only removed (O'Brien -> obrien).
_POSSESSIVE = re.compile(r"(?<=[^\W_])['\u2019\u02bc]s(?![^\W_])")
_ASCII_BREAK = re.compile(r"[^0-9a-z]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

Words = tuple[str, ...]


def clean_answer(text: str) -> str:
    """`text` under the reading rule: NFC, zero-width and control characters removed (a line
    or tab break becomes a space), surrounding spaces dropped."""
    if not text.isascii():
        text = unicodedata.normalize("NFC", text.translate(_DROP))
    if _CONTROL.search(text):
        text = _CONTROL.sub(lambda m: " " if m.group().isspace() else "", text)
    return text.strip()


def words(text: str) -> Words:
    """The normalized word sequence of `text` (what generation scoring compares)."""
    if text.isascii():  # NFKD and accents change nothing, casefold is lower
        text = _POSSESSIVE.sub("", text.lower())
        text = _ASCII_BREAK.sub(" ", text.replace("'", "").replace("`", ""))
        return tuple(w for w in text.split() if w not in ARTICLES)
    text = text.translate(_DROP)
    for _ in range(2):  # casefolding can expose decompositions and vice versa
        text = unicodedata.normalize("NFKD", text).casefold()
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = _APOSTROPHES.sub("", _POSSESSIVE.sub("", text))
    text = "".join(c if c.isalnum() else " " for c in text)
    return tuple(w for w in text.split() if w not in ARTICLES)


def answer_problem(text: str) -> str | None:
    """Why `text` (already cleaned) can never be an answer, or None: it is empty, or it has no
    word generation scoring could find (only punctuation, only an article)."""
    if not text:
        return "empty (or only zero-width and control characters)"
    if not words(text):
        shown = text if len(text) <= 20 else text[:20] + "..."
        return (f"{shown!r} has no word to match once punctuation and the articles a/an/the "
                "are dropped")
    return None


def unique_aliases(answer: str, aliases: Iterable[str]) -> tuple[str, ...]:
    """`aliases` cleaned, without those that normalise to nothing or repeat the answer or an
    earlier alias after cleaning (a set of the cleaned texts: linear in their number). Case
    variants stay, as written; generation scoring keeps one per word sequence
    (`evaluation.normalize.alternatives`)."""
    seen = {answer}
    out = []
    for alias in aliases:
        text = clean_answer(alias)
        if text not in seen and words(text):
            seen.add(text)
            out.append(text)
    return tuple(out)
