"""inversion-tiny figures: per-seed lines under a bold mean per arm, the mean's peak marked,
robust to unknown and missing metric keys."""

import json

import matplotlib.pyplot as plt
import pytest

from knowflow.experiments.inversion_tiny.figures import (
    cf_figure,
    load_curves,
    mean_series,
    plot_inversion_tiny,
)
from knowflow.store.readers import read_jsonl


@pytest.fixture
def figure(inversion_run):
    fig = cf_figure(load_curves(inversion_run))
    yield fig
    plt.close(fig)


def _lines(fig) -> dict:
    return {line.get_gid(): line for line in fig.axes[0].lines if line.get_gid()}


def test_each_seed_is_a_thin_line_under_a_bold_mean_of_the_same_colour(figure):
    lines = _lines(figure)
    for arm in ("mixed", "c_only", "filtered", "augmented", "lora"):
        mean = lines[f"{arm}/mean"]
        seeds = [lines[f"{arm}/seed{s}"] for s in (0, 1, 2)]
        assert all(s.get_color() == mean.get_color() for s in seeds)
        assert all(s.get_linewidth() < mean.get_linewidth() / 2 for s in seeds)
        assert all(s.get_zorder() < mean.get_zorder() for s in seeds)
    colours = {lines[f"{arm}/mean"].get_color() for arm in ("mixed", "c_only", "lora")}
    assert len(colours) == 3


def test_an_arm_that_repeats_another_is_one_dashed_mean(figure):
    lines = _lines(figure)
    assert "qk_only/mean" in lines and "qk_only/peak" not in lines
    assert not any(gid.startswith("qk_only/seed") for gid in lines)
    assert lines["qk_only/mean"].get_linestyle() != "-"
    assert "mixed" in lines["qk_only/mean"].get_label()


def test_the_peak_of_the_mean_is_a_dot_with_its_step_and_value(inversion_run, figure):
    curves = load_curves(inversion_run)
    steps, mean = mean_series(curves["mixed"], "cf_acc")
    top = max(range(len(mean)), key=mean.__getitem__)
    dot = _lines(figure)["mixed/peak"]
    assert list(dot.get_xdata()) == [steps[top]] and list(dot.get_ydata()) == [mean[top]]
    assert dot.get_marker() == "o"
    labels = [t.get_text() for t in figure.axes[0].texts]
    assert f"peak {mean[top]:.2f} @ {steps[top]}" in labels
    assert len(labels) == 5  # one per drawn arm, none for the repeated qk_only


def test_the_mean_is_over_seeds_step_by_step(inversion_run):
    records = read_jsonl(inversion_run / "metrics.jsonl")
    at_100 = [r["cf_acc"] for r in records if r["arm"] == "c_only" and r["step"] == 100]
    steps, mean = mean_series(load_curves(inversion_run)["c_only"], "cf_acc")
    assert len(at_100) == 3
    assert mean[steps.index(100)] == pytest.approx(sum(at_100) / 3)


def test_the_png_changes_when_one_seed_changes(inversion_run):
    path = inversion_run / "figures" / "1_counterfactual_accuracy.png"
    before = path.read_bytes()
    records = read_jsonl(inversion_run / "metrics.jsonl")
    for r in records:
        if r["arm"] == "lora" and r["seed"] == 2 and r["step"] > 500:
            r["cf_acc"] = 0.1
    (inversion_run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    paths = plot_inversion_tiny(inversion_run)
    assert [p.name for p in paths] == ["1_counterfactual_accuracy.png", "2_attention.png",
                                       "3_accuracies.png", "4_mechanism.png"]
    assert path.read_bytes() != before


def test_unknown_keys_are_ignored_and_missing_ones_do_not_crash(inversion_run):
    records = read_jsonl(inversion_run / "metrics.jsonl")
    for i, r in enumerate(records):
        r["attn_heads"] = [[0.1, 0.2], [0.3, 0.4]]  # a key another engineer may add
        r["grad_proj"] = {"C": 0.1, "C+S": -0.2}
        if i % 3 == 0:
            for key in ("cs_acc", "attn_context_layers", "attn_subject_layers", "recall_acc"):
                r.pop(key)
        if r["arm"] == "lora":
            r.pop("cf_acc")
    (inversion_run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    names = [p.name for p in plot_inversion_tiny(inversion_run)]
    assert names == ["1_counterfactual_accuracy.png", "2_attention.png", "3_accuracies.png",
                     "4_mechanism.png"]
    fig = cf_figure(load_curves(inversion_run))
    assert not any(gid.startswith("lora/") for gid in _lines(fig))
    plt.close(fig)


def test_seeds_with_different_steps_average_what_each_step_has():
    seeds = {0: [{"step": 0, "cf_acc": 0.2}, {"step": 10, "cf_acc": 0.6}],
             1: [{"step": 0, "cf_acc": 0.4}, {"step": 20, "cf_acc": 0.8}]}
    assert mean_series(seeds, "cf_acc") == ([0, 10, 20], [pytest.approx(0.3), 0.6, 0.8])


def test_an_empty_run_draws_nothing(tmp_path):
    assert plot_inversion_tiny(tmp_path) == []
