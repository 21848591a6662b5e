"""inversion-tiny's findings: the every-seed criterion and the mechanism summary."""

import pytest

from knowflow.experiments.inversion_tiny.findings import (
    findings,
    mechanism_summary,
    mechanism_verdict,
)
from knowflow.experiments.inversion_tiny.world import Mixture


def _arm(rises, falls, c_acc=1.0, cs_acc=1.0):
    return {"cf_acc_rise": sum(rises) / len(rises), "cf_acc_fall": sum(falls) / len(falls),
            "cf_acc_rise_seeds": rises, "cf_acc_fall_seeds": falls, "c_acc_final": c_acc,
            "cs_acc_final": cs_acc}


def test_the_criterion_holds_only_when_every_seed_inverts():
    ok = {"mixed": _arm([0.6, 0.5], [0.3, 0.25]), "c_only": _arm([0.9, 0.9], [0.0, 0.01])}
    assert findings(ok)["inversion_shown"]
    assert findings(ok)["verdict"].startswith("Inversion shown")
    one_short = {**ok, "mixed": _arm([0.6, 0.5], [0.3, 0.15])}  # seed 1 falls too little
    out = findings(one_short)
    assert not out["inversion_shown"] and out["mixed_inverts_seeds"] == [True, False]
    assert "on 1 of 2 seeds" in out["verdict"]
    control_falls = {**ok, "c_only": _arm([0.9, 0.9], [0.0, 0.06])}
    assert not findings(control_falls)["inversion_shown"]


def test_mitigation_reduces_the_fall_on_every_seed_or_not():
    s = {"mixed": _arm([0.6, 0.5], [0.3, 0.25]), "filtered": _arm([0.6, 0.5], [0.1, 0.3]),
         "augmented": _arm([0.9, 0.9], [0.0, 0.0])}
    out = findings(s)
    assert out["filtered_reduces_fall_every_seed"] is False
    assert out["augmented_reduces_fall_every_seed"] is True
    assert out["augmented_cf_acc_fall_minus_mixed"] == pytest.approx(-0.275)


def test_dynamic_curation_goal_needs_the_fall_gone_and_in_distribution_kept():
    mixed = _arm([0.6, 0.5], [0.3, 0.2], c_acc=0.98, cs_acc=1.0)
    good = findings({"mixed": mixed, "dynamic": _arm([0.6, 0.5], [0.04, 0.0], 0.97, 0.99)})
    assert good["dynamic_fall_removed"] == pytest.approx(1 - 0.02 / 0.25)
    assert good["dynamic_indist_minus_mixed"] == pytest.approx(-0.01)
    assert good["dynamic_meets_goal"] is True
    weak = findings({"mixed": mixed, "dynamic": _arm([0.6, 0.5], [0.1, 0.0], 0.98, 1.0)})
    assert weak["dynamic_fall_removed"] == pytest.approx(0.8)  # exactly 80% counts
    assert weak["dynamic_meets_goal"] is True
    weaker = findings({"mixed": mixed, "dynamic": _arm([0.6, 0.5], [0.12, 0.0], 0.98, 1.0)})
    assert weaker["dynamic_meets_goal"] is False
    forgets = findings({"mixed": mixed, "dynamic": _arm([0.6, 0.5], [0.0, 0.0], 0.9, 1.0)})
    assert forgets["dynamic_meets_goal"] is False  # in-distribution 4 points down


def _curve(cf, ctx, subj, grad_cs, grad_c):
    return [{"step": 10 * i, "cf_acc": c, "attn_context_layers": [a, 0.3],
             "attn_subject_layers": [s, 0.2],
             "grad_ctx_C": [gc, 0.0], "grad_ctx_C+S": [gcs, 0.0], "grad_ctx_S": [0.0, 0.0]}
            for i, (c, a, s, gcs, gc) in enumerate(zip(cf, ctx, subj, grad_cs, grad_c,
                                                       strict=True))]


def test_mechanism_attention_leaving_the_context():
    curve = _curve(cf=[0.0, 0.8, 0.4, 0.2], ctx=[0.1, 0.5, 0.3, 0.2], subj=[0.6, 0.2, 0.4, 0.5],
                   grad_cs=[0.0, -1.0, -1.0, -1.0], grad_c=[5.0, 1.0, 0.5, 0.5])
    m = mechanism_summary(curve, Mixture(100, 0.1, 0.8, 0.1, 0), "qk_only")
    assert m["peak_step"] == 10 and m["L0_attn_context_at_peak"] == 0.5 \
        and m["L0_attn_context_final"] == 0.2
    assert m["L0_attn_context_corr_cf_acc"] > 0.9
    assert m["L1_attn_context_corr_cf_acc"] == 0.0  # a constant layer
    assert m["grad_C+S_after_peak"] == pytest.approx(-0.8)  # share-weighted
    assert m["grad_C_after_peak"] == pytest.approx(0.05)
    text = mechanism_verdict(m)
    assert text.startswith("The fall comes from attention leaving the context")
    assert "lowers context attention" in text and "values and MLPs" in text


def test_mechanism_elsewhere_when_attention_stays():
    curve = _curve(cf=[0.0, 0.8, 0.4, 0.2], ctx=[0.1, 0.5, 0.5, 0.5], subj=[0.6, 0.2, 0.2, 0.2],
                   grad_cs=[0.0, 0.0, 0.0, 0.0], grad_c=[1.0, 0.0, 0.0, 0.0])
    text = mechanism_verdict(mechanism_summary(curve, Mixture(100, 0.1, 0.8, 0.1, 0), "lora"))
    assert text.startswith("Context attention (head mean) does not explain the fall")
    assert "values and MLPs" not in text


def test_tracking_heads_are_found_per_seed():
    cf = [0.0, 0.8, 0.4, 0.2]
    # head L0H0 tracks accuracy and loses 0.4 after the peak; L0H1 moves the other way
    heads = [[[a, b]] for a, b in zip([0.1, 0.6, 0.4, 0.2], [0.5, 0.2, 0.4, 0.5], strict=True)]
    seed = [{**r, "attn_context_heads": h}
            for r, h in zip(_curve(cf=cf, ctx=[0.3] * 4, subj=[0.3] * 4, grad_cs=[0.0] * 4,
                                   grad_c=[0.0] * 4), heads, strict=True)]
    m = mechanism_summary(seed, Mixture(100, 0.1, 0.8, 0.1, 0), "qk_only", [seed, seed])
    assert m["best_head_seeds"] == ["L0H0", "L0H0"] and m["n_tracking_seeds"] == [1, 1]
    assert m["tracking_drop_seeds"] == [pytest.approx(0.4)] * 2
    assert mechanism_verdict(m).startswith("The fall comes from attention leaving the context "
                                           "in particular heads: in 2 of 2 seeds")
