"""The explain report's small pieces: what it leaves out, and colours that match the figure."""

from __future__ import annotations

import matplotlib as mpl
from matplotlib.colors import to_hex

from knowflow.report.explain import LINE_COLORS, _measured, _svg_layers


def test_measured_drops_what_was_not_measured():
    summary = {"n_items": 1, "agreement": None, "confusion": {},
               "one_answer": {"n_checked": 0, "agreement": None, "confusion": {}},
               "sentences": {"lds": 0.86, "hit_rate": None, "topk_drop": {"1": 0.17}}}
    assert _measured(summary) == {"n_items": 1, "one_answer": {"n_checked": 0},
                                  "sentences": {"lds": 0.86, "topk_drop": {"1": 0.17}}}


def test_inline_plot_uses_the_figures_colours():
    cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    assert [to_hex(c) for c in cycle[:2]] == list(LINE_COLORS)
    svg = _svg_layers({"layers": [{"context": 0.1, "top_sentence": -0.2},
                                  {"context": 0.3, "top_sentence": 0.0}]})
    # whole context is drawn first in the first colour, as layers_figure plots it first
    assert svg.index(LINE_COLORS[0]) < svg.index(LINE_COLORS[1])
    assert "<title>whole context</title>" in svg.split(LINE_COLORS[1])[0]
