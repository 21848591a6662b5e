"""report.tradeoff: one point per method at (robustness, sensitivity) with its intervals, one
panel per scoring mode that has both numbers, the CAD alpha sweep joined in alpha order."""

import pytest

from knowflow.report.tradeoff import tradeoff_figure


def _row(sens: float, rob: float, ci: float = 0.05) -> dict:
    return {"sensitivity": sens, "robustness": rob, "sensitivity_ci": [sens - ci, sens + ci],
            "robustness_ci": [rob - 2 * ci, rob + ci]}


SUMMARY = {
    "greedy": {"all": {"generate": _row(0.3, 0.9), "loglik": _row(0.4, 0.8)}},
    "cad(a=2.0)": {"all": {"generate": _row(0.8, 0.3)}},
    "cad(a=0.5)": {"all": {"generate": _row(0.5, 0.7)}},
    "cad(a=1.0)": {"all": {"generate": _row(0.6, 0.5)}},
    "no_irrelevant": {"all": {"generate": {"sensitivity": 0.9, "robustness": None}}},
}


def _points(ax) -> dict[str, tuple]:
    out = {}
    for container in ax.containers:
        data_line, _, (xbar, ybar) = container
        out[container.get_label()] = (list(data_line.get_xdata()), list(data_line.get_ydata()),
                                      xbar.get_segments()[0][:, 0].tolist(),
                                      ybar.get_segments()[0][:, 1].tolist())
    return out


def test_one_panel_per_mode_one_point_per_method_with_its_intervals(tmp_path, drawn, png_shape):
    path = tradeoff_figure(SUMMARY, tmp_path / "t.png", title="x")
    assert png_shape(path)[:2] == (462, 2 * 550)  # 5.0 x 4.2 in panels at 110 dpi
    generate, loglik = drawn[0].axes
    assert generate.get_title() == "generate scoring, all"
    points = _points(generate)
    assert set(points) == {"greedy", "cad(a=0.5)", "cad(a=1.0)", "cad(a=2.0)"}  # both numbers
    x, y, xerr, yerr = points["greedy"]
    assert (x, y) == ([0.9], [0.3])
    assert xerr == pytest.approx([0.8, 0.95]) and yerr == pytest.approx([0.25, 0.35])
    assert set(_points(loglik)) == {"greedy"}
    sweep = [line for line in generate.lines if line.get_linestyle() == "-"]
    assert len(sweep) == 1
    assert list(sweep[0].get_ydata()) == [0.5, 0.6, 0.8]  # alpha 0.5, 1.0, 2.0
    assert {t.get_text() for t in generate.texts} == set(points)


def test_no_method_with_both_numbers_draws_nothing(tmp_path):
    only = {"no_irrelevant": SUMMARY["no_irrelevant"]}
    assert tradeoff_figure(only, tmp_path / "t.png") is None
    assert not (tmp_path / "t.png").exists()
    assert tradeoff_figure(SUMMARY, tmp_path / "t.png", suite="nq-swap") is None
