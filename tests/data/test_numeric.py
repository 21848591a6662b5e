"""cf-numeric: every graded context states the value its strength intends (the true value moved
by exactly that step, written as the answer is), every strength holds the same facts, and the
per-strength summary and curve come from those items."""

import re
from collections import Counter

import pytest

from knowflow.data.facts import read_table
from knowflow.data.numeric import STRENGTHS, written
from knowflow.data.suites import get_suite
from knowflow.evaluation.strength import by_strength
from knowflow.report.strength import strength_figure


def _numbers(text: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*\d|\d", text)]


@pytest.mark.parametrize("seed", [0, 3])
def test_graded_contexts_state_the_intended_value(seed):
    items = get_suite("cf-numeric", seed=seed)
    facts = read_table("numeric.tsv")
    assert len(items) == len(facts) * len(STRENGTHS)
    levels = Counter(it.meta["strength_level"] for it in items)
    assert set(levels.values()) == {len(facts)} and len(levels) >= 4 and len(facts) >= 40
    for it in items:
        true, new = it.meta["true_value"], it.meta["context_value"]
        label, factor, offset = STRENGTHS[it.meta["strength_level"] - 1]
        assert it.meta["strength"] == label
        if it.relation == "year":
            assert abs(new - true) == offset and 1 <= new <= 2024
        else:
            assert new == max(round(true * factor), true + 1) and new > true
        # the context states the moved value and no other (beyond the subject's own numbers,
        # "September 11"); the answers are the two values as written
        named = _numbers(it.subject)
        assert sorted(_numbers(it.context)) == sorted([*named, new]), it.context
        assert it.counterfactual_answer == written(new) and it.parametric_answer == written(true)
        assert sorted(_numbers(it.meta["agreeing_context"])) == sorted([*named, true])
        assert written(new) in it.context and it.question not in it.context
    assert [it.context for it in get_suite("cf-numeric", seed=seed)] == \
        [it.context for it in items]


def test_by_strength_against_hand_counts(tmp_path):
    def rec(level, cf, par):
        return {"meta": {"strength": f"s{level}", "strength_level": level},
                "generate": {"counterfactual": cf, "parametric": par}}
    records = [rec(2, True, False), rec(1, True, False), rec(1, False, True),
               rec(2, False, False), rec(2, True, False), rec(1, True, False)]
    block = by_strength(records, "generate", n_boot=200)["by_strength"]
    assert list(block) == ["s1", "s2"]
    assert block["s1"]["n"] == 3 and block["s1"]["cf_acc"] == 2 / 3
    assert block["s2"]["param_acc"] == 0.0
    assert by_strength([{"meta": {}, "generate": {}}], "generate") == {}
    summary = {"cf-numeric": {"generate": {"by_strength": block}}, "cf-bio": {"generate": {}}}
    assert strength_figure(summary, tmp_path / "c.png").stat().st_size > 1000
    assert strength_figure({"cf-bio": {"generate": {}}}, tmp_path / "d.png") is None
