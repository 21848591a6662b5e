"""Every generated answer in one class (outcomes.py), and the shares with Wilson intervals in
summaries, condition rows and the eval table."""

import math

import pytest

from knowflow.evaluation.conditions import condition_summary
from knowflow.evaluation.metrics import summarize
from knowflow.evaluation.outcomes import OUTCOMES, classify, cut_off, outcome_shares, wilson_ci

Q = "What is the capital city of Nepal? Answer in a full sentence."


@pytest.mark.parametrize("output, hits, garbled, want", [
    ("The capital city of Nepal is Pokhara.", (True, False), False, "context"),
    ("Kathmandu.", (False, True), False, "memory"),
    ("Pokhara, formerly Kathmandu.", (True, True), False, "both"),
    ("The capital city of Nepal.", (False, False), False, "cut_off"),
    ("", (False, False), False, "cut_off"),
    ("According to the passage, the capital is", (False, False), False, "cut_off"),
    ("The capital city of Nepal is Pokhra.", (False, False), True, "garbled"),
    ("The capital city of Nepal is Lalitpur.", (False, False), False, "other"),
    ("I don't know.", (False, False), False, "other"),
])
def test_classify(output, hits, garbled, want):
    assert classify(output, *hits, garbled, Q, "Nepal") == want


def test_cut_off_uses_the_question_and_subject():
    assert cut_off("Actions speak louder than", "Actions speak louder than")
    assert not cut_off("Actions speak louder than words", "Actions speak louder than")
    assert cut_off("Nepal.", "What is its capital?", "Nepal")


def test_wilson_against_hand_computation():
    # 3 of 10 at z = 1.96: the textbook interval 0.1078-0.6032
    lo, hi = wilson_ci(3, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.1078, 0.6032)
    lo, hi = wilson_ci(0, 20)
    assert lo == 0.0 and 0.15 < hi < 0.17        # not the degenerate [0, 0]
    assert wilson_ci(5, 5)[1] == 1.0 and wilson_ci(0, 0) is None


def test_shares_sum_to_one_and_reach_summaries():
    outcomes = ["context"] * 5 + ["cut_off"] * 3 + ["memory", "garbled"]
    shares = outcome_shares(outcomes)
    assert math.isclose(sum(shares[f"outcome_{o}"] for o in OUTCOMES), 1.0)
    assert shares["outcome_cut_off"] == 0.3 and shares["outcome_both"] == 0.0
    recs = [{"generate": {"output": "", "counterfactual": o in ("context", "both"),
                          "parametric": o in ("memory", "both"), "garbled": o == "garbled",
                          "outcome": o}} for o in outcomes]
    s = summarize(recs, "generate", n_boot=50)
    assert s["outcome_cut_off"] == 0.3 and s["outcome_cut_off_ci"] == wilson_ci(3, 10)
    assert s["cf_acc"] == s["outcome_context"] + s["outcome_both"]
    row = condition_summary({"conflicting": recs}, "generate", n_boot=50)["conflicting"]
    assert row["outcome_garbled"] == 0.1 and row["outcome_garbled_ci"] == wilson_ci(1, 10)


def test_eval_table_prints_outcomes(capsys):
    from knowflow.cli.eval_tables import print_outcomes
    block = {"n": 10, **outcome_shares(["context"] * 7 + ["cut_off"] * 3)}
    print_outcomes([("cf-phrasing", "cad(a=1,b=0.3)", block), ("x", "greedy", {"n": 1})])
    out = capsys.readouterr().out
    assert "cut off" in out and "0.30 (0.11-0.60)" in out and "cf-phrasing" in out
