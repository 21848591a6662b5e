"""Every experiment's curve summary gives the hand-computed start / peak / peak step / final /
rise / fall of its records: inversion-smollm2 (per series), inversion-tiny (counterfactual
accuracy) and cpi-toy (M_C). Scripted records with a tied peak: the earliest step wins
everywhere."""

import pytest

from knowflow.evaluation.curves import curve_summary
from knowflow.experiments.cpi_toy.experiment import trajectory_summary
from knowflow.experiments.inversion_smollm2.experiment import curves
from knowflow.experiments.inversion_tiny.curves import run_curve_summary as tiny_summary

STEPS = [0, 10, 20, 30]
VALUES = [0.25, 0.75, 0.75, 0.5]  # peak at step 10 (tied with 20)
# by hand: start 0.25, peak 0.75 first reached at step 10, final 0.5; rise = 0.75 - 0.25,
# fall = 0.75 - 0.5
HAND = {"start": 0.25, "peak": 0.75, "peak_step": 10, "final": 0.5, "rise": 0.5, "fall": 0.25}


def test_the_shared_curve_summary_against_hand_values():
    assert curve_summary(STEPS, VALUES) == HAND
    assert curve_summary([5], [0.4]) == {"start": 0.4, "peak": 0.4, "peak_step": 5,
                                         "final": 0.4, "rise": 0.0, "fall": 0.0}


def test_smollm2_curves_per_series():
    records = [{"step": s, "cf_acc": v, "cf-quotes/cf_acc": 1 - v,
                "cf_acc_gen": v if s else None} for s, v in zip(STEPS, VALUES, strict=True)]
    out = curves(records)
    assert set(out) == {"cf_acc", "cf-quotes/cf_acc", "cf_acc_gen"}
    assert out["cf_acc"] == HAND
    # 1 - VALUES = 0.75, 0.25, 0.25, 0.5: peak 0.75 at the start, lowest 0.25 at step 10
    assert out["cf-quotes/cf_acc"] == {"start": 0.75, "peak": 0.75, "peak_step": 0,
                                       "final": 0.5, "rise": 0.0, "fall": 0.25}
    # step 0's value is missing: the curve starts at step 10 (0.75), which is also its peak
    assert out["cf_acc_gen"] == {"start": 0.75, "peak": 0.75, "peak_step": 10, "final": 0.5,
                                 "rise": 0.0, "fall": 0.25}


def test_tiny_summary_is_the_cf_acc_curve():
    records = [{"step": s, "cf_acc": v, "param_acc": 1 - v, "c_acc": 1.0, "cs_acc": 0.5,
                "recall_acc": 0.25, "attn_context_layers": [v, v / 2],
                "attn_subject_layers": [0.5, 0.25]}
               for s, v in zip(STEPS, VALUES, strict=True)]
    s = tiny_summary(records)
    assert {k: s[f"cf_acc_{k}"] for k in ("start", "peak", "peak_step", "final")} == \
        {k: HAND[k] for k in ("start", "peak", "peak_step", "final")}
    assert (s["cf_acc_rise"], s["cf_acc_fall"]) == (HAND["rise"], HAND["fall"])
    assert (s["param_acc_final"], s["attn_context_start"], s["attn_context_final"]) == \
        (0.5, (0.25 + 0.125) / 2, (0.5 + 0.25) / 2)
    assert s["attn_context_at_peak"] == (0.75 + 0.375) / 2  # the step-10 record


def test_cpi_toy_summary_is_the_mc_curve():
    records = [{"step": s, "mc": v, "cf_acc": v, "param_acc": 1 - v, "attn_context_test": v,
                "attn_subject_test": 1 - v, "proj_theta_S": 0.5, "proj_theta_C": 0.25 - v,
                "value_conf_C+S": v / 2} for s, v in zip(STEPS, VALUES, strict=True)]
    s = trajectory_summary(records)
    assert {k: s[f"mc_{k}"] for k in HAND} == HAND
    assert s["attn_context_at_mc_peak"] == 0.75 and s["steps"] == 30
    assert s["proj_theta_C_after_peak_negative_share"] == 1.0  # steps 20 and 30
    assert (s["value_conf_C+S_start"], s["value_conf_C+S_final"]) == (0.125, 0.25)


def _tiny_records(cf: list[float]) -> list[dict]:
    return [{"step": 10 * i, "cf_acc": v, "param_acc": 0.0, "c_acc": 1.0, "cs_acc": 1.0,
             "recall_acc": 1.0, "attn_context_layers": [0.5], "attn_subject_layers": [0.2]}
            for i, v in enumerate(cf)]


def test_inversion_tiny_arm_fall_is_the_mean_of_the_seeds_own_falls():
    from knowflow.experiments.inversion_tiny.curves import arm_summary

    # seed 0 peaks at step 10 (fall 0.8 - 0.2 = 0.6), seed 1 at step 30 (fall 0.8 - 0.6 = 0.2):
    # the arm's fall is 0.4; the seed-mean curve [0.1, 0.5, 0.45, 0.5, 0.4] falls only 0.1
    arm = arm_summary({0: _tiny_records([0.0, 0.8, 0.4, 0.2, 0.2]),
                       1: _tiny_records([0.2, 0.2, 0.5, 0.8, 0.6])}, {})
    assert arm["cf_acc_fall_seeds"] == pytest.approx([0.6, 0.2])
    assert arm["cf_acc_fall"] == pytest.approx(0.4)
    assert arm["cf_acc_rise"] == pytest.approx((0.8 + 0.6) / 2)
    assert arm["cf_acc_peak"] - arm["cf_acc_final"] == pytest.approx(arm["cf_acc_fall"])
    assert arm["cf_acc_peak_step"] == 30  # the median seed's (upper of two)
    assert arm["mean_curve_fall"] == pytest.approx(0.1)
