"""Which part of a generated answer explain weighs: the answer span.

A generation such as "The Eiffel Tower is located in Paris, France, which is a city that"
asserts one thing ("Paris"); its lead-in restates the question and its tail wanders on.
Weighing the whole text attributes the phrasing (the sentence that shares the words "The
Eiffel Tower"), not the answer. So, without `--answer`, explain weighs a span:

1. where the item carries labelled answers and the generation names one of them, that name
   (`source.answer_span`: " Mumbai" in "The capital of India is Mumbai.");
2. otherwise the span this rule finds (`generated_span`):
   * the *lead-in* is the longest run of words at the start that are all words of the
     question or lead-in words (`LEAD_WORDS`: articles, copulas, prepositions and the verbs
     answers restate relations with: "located", "founded", "written", ...);
   * the span starts at the first other word and runs to the first punctuation mark or
     clause word (`BREAK_WORDS`: "which", "is", "and", ...), at most `MAX_SPAN_WORDS` words;
     a span that starts in lower case (a number, a common noun) also ends at a preposition;
     a span that starts with a capital (a name) also ends at the first lower-case word that
     does not join two capitalised words ("of" in "Statue of Liberty", "da" in "Leonardo da
     Vinci" do);
   * a generation with no such word (it only restates the question) is weighed whole.

The lead-in stays in the prompt (the span is scored after it), so "Paris" is weighed as the
model's choice at that point, against what it would say there without the context.
"""

from __future__ import annotations

import re

from knowflow.data.facts import ConflictItem
from knowflow.explanation.source import answer_span


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


LEAD_WORDS = _wordset("""
a an the this that it its is are was were be been being has have had do does did
in on at of to by from for with into as near inside within under over
located situated found based set built placed lies lie stands stand sits
called named known titled founded created invented written painted composed designed
discovered directed developed made produced built established started led run owned
works work worked lives live lived plays play played speaks speak spoke born died
capital city country town currency language author painter inventor founder answer
according context text passage guide document
""")
BREAK_WORDS = _wordset("""
which who whom whose that where when while because since although though but and or so
is are was were has have had will would can could may might also as
""")
PREPOSITIONS = _wordset("in on at of to by from for with into near during after before")
JOINERS = _wordset("of da de del della di van von der la le du y and the al bin")
MAX_SPAN_WORDS = 6
_WORD = re.compile(r"\S+")
_PUNCT_END = re.compile(r"[,.;:!?)\]\"'\u201d\u2019]+$")


def _norm(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower()).removesuffix("'s")


def generated_span(question: str, generation: str) -> tuple[str, str]:
    """(lead, span) of a generation by the module's rule: the span with the space before it,
    ("The Eiffel Tower is located in", " Paris"); ("", generation) where the generation has
    no word outside its lead-in."""
    asked = {_norm(w) for w in _WORD.findall(question)}
    words = list(_WORD.finditer(generation))
    first = next((i for i, m in enumerate(words)
                  if _norm(m.group()) and _norm(m.group()) not in asked
                  and _norm(m.group()) not in LEAD_WORDS), None)
    if first is None:
        return "", generation
    name = words[first].group()[:1].isupper()
    end = words[first].end()
    for k in range(first, min(len(words), first + MAX_SPAN_WORDS)):
        text = words[k].group()
        norm = _norm(text)
        if k > first:
            if not name and norm in PREPOSITIONS:
                break
            if norm in BREAK_WORDS and not (name and norm in JOINERS and k + 1 < len(words)
                                            and words[k + 1].group()[:1].isupper()):
                break
            if name and not text[:1].isupper() and not (
                    norm in JOINERS and k + 1 < len(words)
                    and words[k + 1].group()[:1].isupper()):
                break
        stripped = _PUNCT_END.sub("", text)
        end = words[k].start() + len(stripped) if stripped else end
        if stripped != text:                      # punctuation closes the span
            break
    start = words[first].start()
    lead = generation[:start].rstrip()
    span = generation[len(lead):end]
    return (lead, span) if span.strip() else ("", generation)


def explained_span(item: ConflictItem, generation: str) -> tuple[str, str, str]:
    """(lead, span, rule) of a generated answer: the labelled answer it names (rule
    "labelled"), else the span `generated_span` finds ("lead-in"), else the whole generation
    ("whole")."""
    lead, span = answer_span(item, generation)
    if span != generation or lead:
        return lead, span, "labelled"
    lead, span = generated_span(item.question, generation)
    return lead, span, "whole" if span == generation else "lead-in"
