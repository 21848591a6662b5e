"""Every experiment's curve summary is `schema.curve_summary` of its records: inversion-smollm2
(per series), inversion-tiny (counterfactual accuracy) and cpi-toy (M_C). Scripted records with
a tied peak: the earliest step wins everywhere."""

from knowflow.experiments.cpi_toy import trajectory_summary
from knowflow.experiments.inversion_smollm2 import curves
from knowflow.experiments.inversion_tiny import curve_summary as tiny_summary
from knowflow.schema import curve_summary, named_curve

STEPS = [0, 10, 20, 30]
VALUES = [0.25, 0.75, 0.75, 0.5]  # peak at step 10 (tied with 20)


def test_smollm2_curves_per_series():
    records = [{"step": s, "cf_acc": v, "cf-quotes/cf_acc": 1 - v,
                "cf_acc_gen": v if s else None} for s, v in zip(STEPS, VALUES, strict=True)]
    out = curves(records)
    assert set(out) == {"cf_acc", "cf-quotes/cf_acc", "cf_acc_gen"}
    assert out["cf_acc"] == curve_summary(STEPS, VALUES)
    assert out["cf_acc"]["peak_step"] == 10
    assert out["cf-quotes/cf_acc"] == curve_summary(STEPS, [1 - v for v in VALUES])
    assert out["cf_acc_gen"] == curve_summary(STEPS[1:], VALUES[1:])  # missing values skipped


def test_tiny_summary_is_the_cf_acc_curve():
    records = [{"step": s, "cf_acc": v, "param_acc": 1 - v, "c_acc": 1.0, "cs_acc": 0.5,
                "recall_acc": 0.25, "attn_context_layers": [v, v / 2],
                "attn_subject_layers": [0.5, 0.25]}
               for s, v in zip(STEPS, VALUES, strict=True)]
    s = tiny_summary(records)
    curve = curve_summary(STEPS, VALUES)
    assert {k: s[f"cf_acc_{k}"] for k in ("start", "peak", "peak_step", "final")} == \
        {k: curve[k] for k in ("start", "peak", "peak_step", "final")}
    assert (s["rise"], s["fall"]) == (curve["rise"], curve["fall"])
    assert s["attn_ctx_at_peak"] == (0.75 + 0.375) / 2  # the step-10 record


def test_cpi_toy_summary_is_the_mc_curve():
    records = [{"step": s, "mc": v, "cf_acc": v, "param_acc": 1 - v, "attn_context_test": v,
                "attn_subject_test": 1 - v, "proj_theta_S": 0.5, "proj_theta_C": 0.25 - v,
                "value_conf_C+S": v / 2} for s, v in zip(STEPS, VALUES, strict=True)]
    s = trajectory_summary(records)
    curve = named_curve("mc", STEPS, VALUES)
    assert {k: s[k] for k in curve} == curve
    assert s["attn_ctx_at_mc_peak"] == 0.75 and s["steps"] == 30
    assert s["proj_theta_C_after_peak_negative_share"] == 1.0  # steps 20 and 30
    assert (s["value_conf_C+S_start"], s["value_conf_C+S_final"]) == (0.125, 0.25)
