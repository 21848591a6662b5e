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


def test_a_card_shows_gradient_x_input_only_where_it_was_computed():
    from knowflow.report.explain import _card

    rec = {"id": "x", "question": "q", "answer": "a", "answer_no_context": "b",
           "logprob_context": -1.0, "logprob_no_context": -2.0, "verdict": "context",
           "verdict_numbers": {"context_contribution": 1.0, "context_supports": True,
                               "memory_agrees": False},
           "sentences": [{"text": "s", "attribution": 0.5}, {"text": "t", "attribution": 0.1}],
           "top_sentence": 0, "topk_drop": {"1": 0.3}, "lds": None}
    assert "gradient x input" not in _card(rec)
    asked = {**rec, "one_pass": {"one_pass_top": 1},
             "sentences": [{**s, "one_pass": w} for s, w in zip(rec["sentences"], (0.2, 0.7),
                                                                strict=True)]}
    card = _card(asked)
    assert "gradient x input&#x27;s top: 1" in card or "gradient x input's top: 1" in card
    assert "gradient x input 0.700" in card
