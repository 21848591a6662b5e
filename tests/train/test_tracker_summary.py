"""`RelianceTracker.summary` is the schema's curve summary of its records (no training: the
records are scripted)."""

from knowflow.data.suites import get_suite
from knowflow.evaluation.curves import named_curve
from knowflow.train.tracker import RelianceTracker, TrackerConfig

CF = [0.2, 0.6, 0.6, 0.3]  # a tied peak: the earlier step (4) wins


def _tracker(cf: list[float], attention: bool = True) -> RelianceTracker:
    tracker = RelianceTracker(None, TrackerConfig(every=4),
                              items={"cf-capitals": get_suite("cf-capitals", limit=2)})
    tracker.records = [{"step": 4 * i, "cf_acc": v, "param_acc": 1 - v,
                        **({"attn_context": 0.1 * (i + 1)} if attention else {})}
                       for i, v in enumerate(cf)]
    return tracker


def test_summary_is_the_schema_curve_of_cf_acc():
    tracker = _tracker(CF)
    s = tracker.summary()
    curve = named_curve("cf_acc", [0, 4, 8, 12], CF)
    assert {k: s[k] for k in curve} == curve
    assert s["cf_acc_peak_step"] == 4 == tracker.peak["step"]
    assert s["cf_acc_rise"] == 0.6 - 0.2 and s["cf_acc_fall"] == 0.6 - 0.3
    assert (s["param_acc_start"], s["param_acc_final"]) == (0.8, 0.7)
    assert (s["attn_context_start"], s["attn_context_final"]) == (0.1, 0.4)
    assert (s["final_step"], s["n_evaluations"]) == (12, 4)


def test_summary_without_attention_or_records():
    s = _tracker(CF, attention=False).summary()
    assert s["attn_context_start"] is None and s["attn_context_final"] is None
    assert _tracker([]).summary() == {}
