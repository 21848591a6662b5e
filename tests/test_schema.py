"""`knowflow.schema`: the one curve summary (start/peak/peak step/final/rise/fall, earliest
step on a tied peak) and its metric-prefixed form."""

import pytest

from knowflow.schema import KINDS, curve_summary, named_curve


def test_curve_summary_parts():
    s = curve_summary([0, 10, 20, 30], [0.2, 0.7, 0.5, 0.4])
    assert s == {"start": 0.2, "peak": 0.7, "peak_step": 10, "final": 0.4,
                 "rise": 0.7 - 0.2, "fall": 0.7 - 0.4}


def test_tied_peak_is_the_earliest_step():
    assert curve_summary([0, 5, 9, 12], [0.1, 0.6, 0.3, 0.6])["peak_step"] == 5
    flat = curve_summary([3, 4], [0.5, 0.5])
    assert flat["peak_step"] == 3 and flat["rise"] == flat["fall"] == 0


@pytest.mark.parametrize("steps, values", [([], []), ([0, 1], [0.5])])
def test_curve_needs_one_value_per_step(steps, values):
    with pytest.raises(ValueError, match="one value per step"):
        curve_summary(steps, values)


def test_named_curve_prefixes_every_part():
    steps, values = [0, 1, 2], [0.3, 0.9, 0.1]
    named = named_curve("cf_acc", steps, values)
    assert list(named) == ["cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                           "cf_acc_rise", "cf_acc_fall"]
    assert named == {f"cf_acc_{k}": v for k, v in curve_summary(steps, values).items()}


def test_kinds_are_the_papers_four():
    assert KINDS == ("C", "C+S", "S", "CF")
