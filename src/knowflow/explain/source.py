"""The source verdict: did one answer come from the context, from memory, from both, or from
neither?

The numbers are the answer's teacher-forced log-probability with the context and without it
(summed over its tokens) and whether the model, asked without the context, says the same
answer. Where a generated answer names one of the item's two answers, only that name is
scored, after the generated text that leads to it (`answer_span`): "The capital of India is
Mumbai." is weighed by " Mumbai", not by how likely the phrasing is. The difference of the
two log-probabilities is the context's pointwise contribution, log p(a | c, q) - log p(a | q).
The rules:

* the context *supports* the answer when it multiplies the answer's probability by at least
  `context_ratio`, or the answer is at least `confident` likely with the context and the
  context did not lower it (a context that agrees with an answer the model was already sure of
  has little room to raise it);
* memory *supports* it when the model gives the same answer without the context;
* context and memory -> `both`; context alone -> `context`; memory alone -> `memory`;
  neither -> `neither`.

Where an item carries a counterfactual and a parametric answer, `expected_verdict` names the
verdict the produced answer calls for, so every verdict can be checked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from knowflow.evaluate.normalize import alternatives, answers_present, find_spans, words
from knowflow.worlds.facts import ConflictItem

VERDICTS = ("context", "memory", "both", "neither")


def same_answer(answer: str, other: str) -> bool:
    """Whether two answers say the same thing: one's normalized words contain the other's
    ("Paris" and "The capital is Paris.")."""
    a, b = words(answer), words(other)
    if not a or not b:
        return False
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return bool(find_spans(long_, short))


def verdict(logprob_context: float, logprob_no_context: float, memory_agrees: bool,
            context_ratio: float = 2.0, confident: float = 0.5) -> tuple[str, dict]:
    """(verdict, the numbers and tests that decided it); see the module docstring."""
    delta = logprob_context - logprob_no_context
    rises = delta >= math.log(context_ratio)
    sure = logprob_context >= math.log(confident) and delta >= 0.0
    context = rises or sure
    name = ("both" if memory_agrees else "context") if context else \
        ("memory" if memory_agrees else "neither")
    return name, {"context_contribution": delta, "context_raises": rises,
                  "confident_with_context": sure, "context_supports": context,
                  "memory_agrees": memory_agrees}


def expected_verdict(item: ConflictItem, produced: str) -> str | None:
    """The verdict the produced answer calls for, from the item's two answers: the context's
    answer -> context (both, where the context agrees with memory), the memorized one ->
    memory, neither -> neither; None where it mentions both (nothing to check)."""
    cf = alternatives(item.counterfactual_answer, item.counterfactual_aliases)
    par = alternatives(item.parametric_answer, item.parametric_aliases)
    agree = bool(set(cf) & set(par))
    subject = alternatives(item.subject) if item.subject else []
    hit_cf, hit_par, _ = answers_present(produced, [cf, par, subject])
    if agree:
        return "both" if hit_cf or hit_par else "neither"
    if hit_cf and hit_par:
        return None
    return "context" if hit_cf else "memory" if hit_par else "neither"


def answer_span(item: ConflictItem, produced: str) -> tuple[str, str]:
    """(lead, span): where a produced answer names one of the item's two answers ("The capital
    of India is Mumbai."), the text before that name and the name with the space before it
    ("The capital of India is", " Mumbai"), so that the verdict weighs the name, not the
    phrasing around it; otherwise ("", produced)."""
    labelled = item.counterfactual_answer.strip() and item.parametric_answer.strip()
    found = expected_verdict(item, produced) if labelled else None
    if found in (None, "neither"):
        return "", produced
    names = (item.parametric_answer, *item.parametric_aliases) if found == "memory" else \
        (item.counterfactual_answer, *item.counterfactual_aliases)
    low = produced.lower()
    for name in sorted((n.strip() for n in names if n.strip()), key=len, reverse=True):
        at = low.find(name.lower())
        if at > 0:
            lead = produced[:at].rstrip()
            return lead, produced[len(lead):at + len(name)]
        if at == 0:
            return "", produced[:len(name)]
    return "", produced


def confusion(expected: Sequence[str | None], found: Sequence[str]) -> dict[str, dict[str, int]]:
    """{expected: {verdict: count}} over the items with an expected verdict."""
    table = {e: dict.fromkeys(VERDICTS, 0) for e in VERDICTS}
    for e, f in zip(expected, found, strict=True):
        if e is not None:
            table[e][f] += 1
    return {e: row for e, row in table.items() if any(row.values())}
