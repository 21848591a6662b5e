"""report.probes: knockout curves in percent per source set, the projection rates per
sublayer, and the (layer, head) attention-mass heatmap with its per-layer head mean."""

import pytest

from knowflow.report.probes import attention_mass_figure, knockout_figure, projection_figure


def _curves(ax) -> dict[str, list]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.lines if not line.get_label().startswith("_")}


def test_knockout_is_one_percent_curve_per_source_skipping_missing_layers(tmp_path, drawn,
                                                                         png_shape):
    summary = {"subject": {"mean_rel_change": [-0.5, None, -0.1]},
               "relation": {"mean_rel_change": [0.0, 0.25, 0.0]}, "n_examples": 4,
               "note": {"other": 1}}
    path = knockout_figure(summary, tmp_path / "k.png")
    assert png_shape(path)[:2] == (418, 660)  # 6.0 x 3.8 in at 110 dpi
    assert _curves(drawn[0].axes[0]) == {"subject": ([0, 2], [-50.0, -10.0]),
                                         "relation": ([0, 1, 2], [0.0, 25.0, 0.0])}


def test_projection_draws_both_rates_per_sublayer(tmp_path, drawn):
    summary = {"extraction_rate": {"attn": [0.1, 0.2], "mlp": [0.3, 0.4]},
               "attributes_rate": {"resid": [0.5, 0.6]}}
    projection_figure(summary, tmp_path / "p.png")
    left, right = drawn[0].axes
    assert _curves(left) == {"attn": ([0, 1], [0.1, 0.2]), "mlp": ([0, 1], [0.3, 0.4])}
    assert _curves(right) == {"resid": ([0, 1], [0.5, 0.6])}


def test_attention_mass_heatmap_is_heads_by_layers_with_the_head_mean(tmp_path, drawn):
    grid = [[0.1, 0.3, 0.5], [0.9, 0.7, 0.8]]  # 2 layers x 3 heads
    attention_mass_figure(grid, tmp_path / "a.png")
    heat = next(ax for ax in drawn[0].axes if ax.images)
    assert heat.images[0].get_array().tolist() == [[0.1, 0.9], [0.3, 0.7], [0.5, 0.8]]
    mean = _curves(drawn[0].axes[1])["mean over heads"]
    assert mean[0] == [0, 1] and mean[1] == pytest.approx([0.3, 0.8])
