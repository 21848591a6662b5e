"""The source verdict's rules on hand-made probabilities, and the expected verdicts."""

import math

import pytest

from knowflow.data.facts import ConflictItem
from knowflow.explanation.source import (
    answer_span,
    confusion,
    copied_from_context,
    expected_verdict,
    first_clause,
    log_odds,
    names,
    produced_label,
    same_answer,
    says_first,
    verdict,
)
from knowflow.explanation.summary import summarize

ln = math.log


@pytest.mark.parametrize("p_ctx, p_bare, memory, expected", [
    (0.90, 0.01, False, "context"),     # the context raised it 90x; memory says otherwise
    (0.95, 0.60, True, "both"),         # odds 1.5 -> 19; memory says the same
    (0.30, 0.60, True, "memory"),       # the context lowered it; memory says it
    (0.02, 0.03, False, "neither"),     # nothing supports it
    (0.10, 0.05, False, "context"),     # odds 0.0526 -> 0.111: x2.11
    (0.09, 0.05, False, "neither"),     # odds x1.88: not enough
    (0.60, 0.59, False, "neither"),     # likely, but the context left it as it was (x1.04)
    (0.60, 0.59, True, "memory"),       # ... and memory says it: memory alone
    (0.99, 0.98, True, "both"),         # nearly sure without; the context confirms: odds 49 -> 99
    (0.60, 0.61, True, "memory"),       # likely but lowered by the context
])
def test_verdict_rules(p_ctx, p_bare, memory, expected):
    name, numbers = verdict(ln(p_ctx), ln(p_bare), memory, context_ratio=2.0)
    assert name == expected
    assert numbers["context_contribution"] == pytest.approx(ln(p_ctx) - ln(p_bare))
    odds = (p_ctx / (1 - p_ctx)) / (p_bare / (1 - p_bare))
    assert numbers["context_odds_gain"] == pytest.approx(ln(odds))
    assert numbers["memory_agrees"] is memory


@pytest.mark.parametrize("p_ctx, p_bare, memory, rival, expected", [
    # "Mumbai" 0.34 -> 0.49 (odds x1.9), the rival "New Delhi" 0.45 -> 0.05: the context
    # moved the model from the rival to the answer
    (0.49, 0.34, False, (0.05, 0.45), "context"),
    (0.49, 0.34, False, (0.40, 0.45), "neither"),   # rival barely moved: x1.62 over it
    (0.34, 0.36, False, (0.05, 0.45), "neither"),   # the context lowered the answer itself
    (0.49, 0.34, True, (0.05, 0.45), "memory"),     # memory says the answer: no rival
    (0.90, 0.01, False, (0.90, 0.01), "context"),   # odds alone suffice
])
def test_verdict_against_the_rival(p_ctx, p_bare, memory, rival, expected):
    name, numbers = verdict(ln(p_ctx), ln(p_bare), memory, (ln(rival[0]), ln(rival[1])))
    assert name == expected
    if memory:
        assert numbers["context_gain_over_rival"] is None
    else:
        gain = ln(p_ctx / p_bare) - ln(rival[0] / rival[1])
        assert numbers["context_gain_over_rival"] == pytest.approx(gain)


def test_log_odds():
    assert log_odds(ln(0.5)) == pytest.approx(0.0)
    assert log_odds(ln(0.8)) == pytest.approx(ln(4.0))
    assert log_odds(0.0) == math.inf
    name, numbers = verdict(0.0, 0.0, True)              # certain both ways: no gain
    assert (name, numbers["context_odds_gain"]) == ("memory", 0.0)


def test_same_answer_contains_words():
    assert same_answer("Paris", "The capital of France is Paris.")
    assert same_answer("the Eiffel Tower", "Eiffel Tower")
    assert not same_answer("Rome", "Romeo")
    assert not same_answer("", "Paris")


def _item(cf="Lyon", par="Paris", context="c", question="q"):
    return ConflictItem(id="x", suite="s", context=context, question=question,
                        counterfactual_answer=cf, parametric_answer=par, subject="France")


def test_expected_verdict_from_the_produced_answer():
    assert expected_verdict(_item(), "It is Lyon.") == "context"
    assert expected_verdict(_item(), "Paris") == "memory"
    assert expected_verdict(_item(), "Marseille") == "neither"
    assert expected_verdict(_item(), "Lyon or Paris") is None
    assert expected_verdict(_item(cf="Paris"), "Paris") == "both"      # an agreeing context
    assert produced_label(_item(), "Lyon or Paris") == ("both", None)
    assert produced_label(_item(cf="Paris"), "Paris") == ("agreed", "both")
    assert [names(_item(), t) for t in ("Lyon.", "Paris, France", "Lyon, not Paris", "Rome")] \
        == ["counterfactual", "parametric", "both", "neither"]
    assert names(_item(cf="Paris"), "Rome") == "neither"


MONTENEGRO = dict(cf="Nikšić", par="Podgorica", question="What is the capital of Montenegro?",
                  context="The national parliament of Montenegro meets in Nikšić, which has "
                          "served as the capital of the country for many years.")


def test_an_answer_copied_from_the_context_is_labelled_context():
    item = _item(**MONTENEGRO)
    said = "The national parliament of Montenegro is the capital of the country."
    assert produced_label(item, said, "The capital of Montenegro is Dubrovnik.") == \
        ("copied", "context")
    # the no-context answer says the copied words too: not evidence of the context
    assert produced_label(item, said, said) == ("neither", "neither")
    # only the question's words repeated ("the capital of Montenegro"): not a copy
    assert produced_label(item, "The capital of Montenegro is Montenegro.", "") == \
        ("neither", "neither")
    assert not copied_from_context("Montenegro meets", item.context, item.question)  # 2 words
    assert copied_from_context("Montenegro meets in", item.context, item.question)


def test_says_first_needs_the_answer_at_the_start():
    assert says_first(" Budapest", "Budapest. It is on the Danube.")
    assert says_first(" the pound sterling", "pound sterling")             # articles dropped
    assert not says_first(" Thomas Edison", "Alexander Graham Bell is credited to Thomas Edison")
    assert not says_first("", "Paris")


def test_first_clause():
    assert first_clause(" New Delhi. It is in the north.") == "New Delhi"
    assert first_clause("St. Louis, of course.") == "St. Louis, of course"
    assert first_clause("  ") == ""


def test_summary_counts_one_answer_items_apart():
    def rec(produced, expected, found, bare="parametric"):
        return {"verdict": found, "expected_verdict": expected, "produced": produced,
                "produced_no_context": bare,
                "verdict_agrees": None if expected is None else expected == found}
    records = [rec("counterfactual", "context", "context"), rec("parametric", "memory", "both"),
               rec("neither", "neither", "context"), rec("copied", "context", "context"),
               rec("both", None, "memory"), rec("agreed", "both", "both", "agreed"),
               rec("counterfactual", "context", "both", "counterfactual")]
    s = summarize(records)
    assert (s["n_checked"], s["agreement"]) == (6, pytest.approx(3 / 6))
    assert (s["one_answer"]["n_checked"], s["one_answer"]["agreement"]) == \
        (4, pytest.approx(2 / 4))
    # known: the no-context answer names the parametric answer (or the agreed one)
    assert (s["known_answer"]["n_checked"], s["known_answer"]["agreement"]) == \
        (3, pytest.approx(2 / 3))
    assert s["one_answer"]["confusion"] == {
        "context": {"context": 1, "memory": 0, "both": 1, "neither": 0},
        "memory": {"context": 0, "memory": 0, "both": 1, "neither": 0},
        "both": {"context": 0, "memory": 0, "both": 1, "neither": 0}}
    assert s["produced"] == {"counterfactual": 2, "parametric": 1, "neither": 1, "copied": 1,
                             "both": 1, "agreed": 1}
    assert "(50% of the 4 that name exactly one" in s["findings"]["verdict"]


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
    # a whole word only: not the "ca" of "calcium"
    assert answer_span(_item(cf="Co", par="Ca"), "The chemical symbol of calcium is Ca.") == \
        ("The chemical symbol of calcium is", " Ca")
    unlabelled = _item(cf="", par="")
    assert answer_span(unlabelled, "It is Lyon.") == ("", "It is Lyon.")
