"""The source verdict's rules on hand-made probabilities, and the expected verdicts."""

import math

import pytest

from knowflow.explain.source import (
    answer_span,
    confusion,
    expected_verdict,
    same_answer,
    verdict,
)
from knowflow.worlds.facts import ConflictItem

ln = math.log


@pytest.mark.parametrize("p_ctx, p_bare, memory, expected", [
    (0.90, 0.01, False, "context"),     # the context raised it 90x; memory says otherwise
    (0.95, 0.60, True, "both"),         # sure with the context, memory says the same
    (0.30, 0.60, True, "memory"),       # the context lowered it; memory says it
    (0.02, 0.03, False, "neither"),     # nothing supports it
    (0.10, 0.05, False, "context"),     # exactly the ratio of 2: raised enough
    (0.09, 0.05, False, "neither"),     # raised 1.8x and unlikely
    (0.60, 0.59, False, "context"),     # confident with the context and not lowered
    (0.60, 0.61, True, "memory"),       # confident but lowered by the context
])
def test_verdict_rules(p_ctx, p_bare, memory, expected):
    name, numbers = verdict(ln(p_ctx), ln(p_bare), memory, context_ratio=2.0, confident=0.5)
    assert name == expected
    assert numbers["context_contribution"] == pytest.approx(ln(p_ctx) - ln(p_bare))
    assert numbers["memory_agrees"] is memory


def test_same_answer_contains_words():
    assert same_answer("Paris", "The capital of France is Paris.")
    assert same_answer("the Eiffel Tower", "Eiffel Tower")
    assert not same_answer("Rome", "Romeo")
    assert not same_answer("", "Paris")


def _item(cf="Lyon", par="Paris"):
    return ConflictItem(id="x", suite="s", context="c", question="q",
                        counterfactual_answer=cf, parametric_answer=par, subject="France")


def test_expected_verdict_from_the_produced_answer():
    assert expected_verdict(_item(), "It is Lyon.") == "context"
    assert expected_verdict(_item(), "Paris") == "memory"
    assert expected_verdict(_item(), "Marseille") == "neither"
    assert expected_verdict(_item(), "Lyon or Paris") is None
    assert expected_verdict(_item(cf="Paris"), "Paris") == "both"      # an agreeing context


def test_confusion_counts_only_checked_items():
    table = confusion(["context", "memory", None, "context"],
                      ["context", "both", "memory", "neither"])
    assert table == {"context": {"context": 1, "memory": 0, "both": 0, "neither": 1},
                     "memory": {"context": 0, "memory": 0, "both": 1, "neither": 0}}


def test_answer_span_cuts_before_the_named_answer():
    assert answer_span(_item(), "The capital of France is Lyon.") == \
        ("The capital of France is", " Lyon")
    assert answer_span(_item(), "Paris, of course.") == ("", "Paris")
    assert answer_span(_item(), "Marseille.") == ("", "Marseille.")       # names neither
    unlabelled = _item(cf="", par="")
    assert answer_span(unlabelled, "It is Lyon.") == ("", "It is Lyon.")
