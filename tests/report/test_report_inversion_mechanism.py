"""experiments.inversion_tiny.mechanism_figures: accuracy with per-layer attention (left) and each
kind's
share-weighted gradient projection summed over layers (right), seed means."""

import pytest

from knowflow.experiments.inversion_tiny.mechanism_figures import mechanism_figure
from knowflow.store.files import atomic_write_json, atomic_write_jsonl

STEPS = (0, 10, 20)


def _record(seed: int, step: int) -> dict:
    t = step / 10 + seed
    return {"arm": "mixed", "seed": seed, "step": step, "cf_acc": 0.1 * t,
            "attn_context_layers": [0.2 + 0.01 * t, 0.3], "attn_subject_layers": [0.1, 0.05 * t],
            "grad_ctx_C": [0.01 * t, 0.02], "grad_ctx_C+S": [-0.03 * t, -0.01]}


@pytest.fixture
def run(tmp_path):
    atomic_write_json(tmp_path / "config.json",
                      {"mixture": {"c": 0.25, "cs": 0.75, "s": 0.0}})
    atomic_write_jsonl(tmp_path / "metrics.jsonl",
                       [_record(seed, step) for seed in (0, 1) for step in STEPS])
    return tmp_path


def test_left_panel_has_accuracy_and_two_lines_per_layer(run, drawn, png_shape):
    path = mechanism_figure(run)
    assert path == run / "figures" / "4_mechanism.png" and png_shape(path)[2] == 4
    left, right = drawn[0].axes
    labels = [line.get_label() for line in left.lines]
    assert labels == ["cf accuracy", "attention on context, L0", "attention on subject, L0",
                      "attention on context, L1", "attention on subject, L1"]
    # seed means: seed 0 and seed 1 differ by t + 1
    assert list(left.lines[0].get_ydata()) == pytest.approx([0.05, 0.15, 0.25])
    assert list(left.lines[4].get_ydata()) == pytest.approx([0.025, 0.075, 0.125])


def test_right_panel_weights_each_kind_by_its_share_and_sums_layers(run, drawn):
    mechanism_figure(run)
    right = drawn[0].axes[1]
    kinds = {line.get_label(): list(line.get_ydata()) for line in right.lines
             if not line.get_label().startswith("_")}
    assert set(kinds) == {"C (share 0.25)", "C+S (share 0.75)"}  # no grad_ctx_S recorded
    # C at step 0: seed mean of 0.01 * t over layers plus 0.02, times 0.25
    assert kinds["C (share 0.25)"] == pytest.approx([0.25 * (0.005 + 0.02 + 0.01 * s / 10)
                                                     for s in STEPS])
    assert kinds["C+S (share 0.75)"] == pytest.approx([0.75 * (-0.015 - 0.01 - 0.03 * s / 10)
                                                       for s in STEPS])
    assert right.get_yscale() == "symlog"


def test_an_arm_without_records_draws_nothing(run, drawn):
    assert mechanism_figure(run, arm="c_only") is None
    assert not drawn and not (run / "figures").exists()
