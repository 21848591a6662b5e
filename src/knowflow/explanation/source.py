"""The source verdict: did one answer come from the context, from memory, from both, or from
neither?

The numbers are the answer's teacher-forced log-probability with the context and without it
(summed over its tokens), and the answer the model gives without the context (its *rival*,
where it differs). Where a generated answer names one of the item's two answers, only that
name is scored, after the generated text that leads to it (`answer_span`): "The capital of
India is Mumbai." is weighed by " Mumbai", not by how likely the phrasing is; its rival is then
what the model says after the same lead without the context (" New Delhi"). The difference of
the two log-probabilities is the context's pointwise contribution, log p(a | c, q) - log
p(a | q). The rules:

* the context *supports* the answer when it does not lower its probability and multiplies its
  odds by at least `context_ratio`: its odds against every other answer, p / (1 - p) (for an
  unlikely answer this is its probability; for a likely one it leaves room to rise, so a
  context that confirms an answer the model was nearly sure of still counts, and one that
  leaves a likely answer untouched does not), or its odds against the rival, p(a) / p(rival)
  (the context moved the model from the rival to the answer, as a contrastive decoder would
  measure it);
* memory *supports* it when the model gives the same answer without the context: its answer
  contains it, or its continuation of the same lead begins with it;
* context and memory -> `both`; context alone -> `context`; memory alone -> `memory`;
  neither -> `neither`.

Where an item carries a counterfactual and a parametric answer, `produced_label` says which
of them the produced answer names and the verdict that calls for, so every verdict can be
checked; it reads only the texts (the answer, the item, the context, the no-context answer),
never the verdict's numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from knowflow.data.facts import ConflictItem
from knowflow.evaluation.normalize import alternatives, answers_present, find_spans, words
from knowflow.explanation.splitter import split_sentences

VERDICTS = ("context", "memory", "both", "neither")
# what a produced answer names: exactly one labelled answer (or the answer both agree on),
# both, neither, or neither but a phrase copied from the context
PRODUCED = ("counterfactual", "parametric", "agreed", "both", "neither", "copied")
ONE = ("counterfactual", "parametric", "agreed")
KNOWN = ("parametric", "agreed")    # a no-context answer that shows the model knows the fact
COPY_WORDS = 3      # the shortest run of words that counts as copied from the context


def same_answer(answer: str, other: str) -> bool:
    """Whether two answers say the same thing: one's normalized words contain the other's
    ("Paris" and "The capital is Paris.")."""
    a, b = words(answer), words(other)
    if not a or not b:
        return False
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return bool(find_spans(long_, short))


def says_first(answer: str, continuation: str) -> bool:
    """Whether `continuation` begins with `answer`'s normalized words (" Budapest" and
    "Budapest. It is ..."; not "Bell is credited to Edison" for " Edison")."""
    a, c = words(answer), words(continuation)
    return bool(a) and c[:len(a)] == a


def log_odds(logprob: float) -> float:
    """log(p / (1 - p)) of a log-probability (+inf at p = 1)."""
    if logprob >= 0.0:
        return math.inf
    return logprob - math.log(-math.expm1(logprob))


def verdict(logprob_context: float, logprob_no_context: float, memory_agrees: bool,
            rival: tuple[float, float] | None = None, context_ratio: float = 2.0
            ) -> tuple[str, dict]:
    """(verdict, the numbers and tests that decided it); `rival`: the log-probabilities with
    and without the context of the answer the model gives without it, where that differs
    from the answer (ignored where memory agrees). See the module docstring."""
    delta = logprob_context - logprob_no_context
    odds = log_odds(logprob_context) - log_odds(logprob_no_context) \
        if logprob_context < 0.0 or logprob_no_context < 0.0 else 0.0
    against = None if memory_agrees or rival is None else delta - (rival[0] - rival[1])
    need = math.log(context_ratio)
    raises = delta >= 0.0 and odds >= need
    beats = delta >= 0.0 and against is not None and against >= need
    context = raises or beats
    name = ("both" if memory_agrees else "context") if context else \
        ("memory" if memory_agrees else "neither")
    return name, {"context_contribution": delta, "context_odds_gain": odds,
                  "context_gain_over_rival": against, "context_raises_odds": raises,
                  "context_beats_rival": beats, "context_supports": context,
                  "memory_agrees": memory_agrees}


def names(item: ConflictItem, text: str) -> str:
    """Which of the item's answers `text` names: counterfactual, parametric, agreed (the one
    answer both agree on), both or neither."""
    cf = alternatives(item.counterfactual_answer, item.counterfactual_aliases)
    par = alternatives(item.parametric_answer, item.parametric_aliases)
    subject = alternatives(item.subject) if item.subject else []
    hit_cf, hit_par, _ = answers_present(text, [cf, par, subject])
    if set(cf) & set(par):
        return "agreed" if hit_cf or hit_par else "neither"
    if hit_cf and hit_par:
        return "both"
    return "counterfactual" if hit_cf else "parametric" if hit_par else "neither"


def produced_label(item: ConflictItem, produced: str, no_context: str = ""
                   ) -> tuple[str, str | None]:
    """(what the produced answer names, the verdict that calls for), from the item's two
    answers: the context's answer -> context (both, where the context agrees with memory),
    the memorized one -> memory; neither -> neither, or context where it copies a phrase of
    the context that the no-context answer lacks (`copied`); both -> None (nothing to
    check)."""
    kind = names(item, produced)
    if kind != "neither":
        return kind, {"counterfactual": "context", "parametric": "memory", "agreed": "both",
                      "both": None}[kind]
    if copied_from_context(produced, item.context, item.question, no_context):
        return "copied", "context"
    return "neither", "neither"


def expected_verdict(item: ConflictItem, produced: str, no_context: str = "") -> str | None:
    """The verdict the produced answer calls for (`produced_label`)."""
    return produced_label(item, produced, no_context)[1]


def copied_from_context(produced: str, context: str, question: str, no_context: str = "",
                        n: int = COPY_WORDS) -> bool:
    """Whether `produced` repeats a run of `n` words of the context that holds a word the
    question lacks and that the no-context answer does not say."""
    said, ctx, asked, bare = words(produced), words(context), set(words(question)), \
        words(no_context)
    for i in range(len(said) - n + 1):
        run = said[i:i + n]
        if any(w not in asked for w in run) and find_spans(ctx, run) and \
                not find_spans(bare, run):
            return True
    return False


def answer_span(item: ConflictItem, produced: str) -> tuple[str, str]:
    """(lead, span): where a produced answer names one of the item's two answers ("The capital
    of India is Mumbai."), the text before that name and the name with the space before it
    ("The capital of India is", " Mumbai"), so that the verdict weighs the name, not the
    phrasing around it; otherwise ("", produced)."""
    labelled = item.counterfactual_answer.strip() and item.parametric_answer.strip()
    kind = produced_label(item, produced)[0] if labelled else None
    if kind not in ONE:
        return "", produced
    names = (item.parametric_answer, *item.parametric_aliases) if kind == "parametric" else \
        (item.counterfactual_answer, *item.counterfactual_aliases)
    for name in sorted((n.strip() for n in names if n.strip()), key=len, reverse=True):
        found = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", produced, re.IGNORECASE)
        at = found.start() if found else -1                 # a whole word: not "ca" in "calcium"
        if at > 0:
            lead = produced[:at].rstrip()
            return lead, produced[len(lead):at + len(name)]
        if at == 0:
            return "", produced[:len(name)]
    return "", produced


def first_clause(text: str) -> str:
    """The first sentence of a generated continuation, without its closing punctuation
    ("New Delhi. It is ..." -> "New Delhi")."""
    sentences = split_sentences(text.strip())
    return sentences[0].text.rstrip(" .!?;:,") if sentences else ""


def confusion(expected: Sequence[str | None], found: Sequence[str]) -> dict[str, dict[str, int]]:
    """{expected: {verdict: count}} over the items with an expected verdict."""
    table = {e: dict.fromkeys(VERDICTS, 0) for e in VERDICTS}
    for e, f in zip(expected, found, strict=True):
        if e is not None:
            table[e][f] += 1
    return {e: row for e, row in table.items() if any(row.values())}
