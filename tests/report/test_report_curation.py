"""report.curation: one histogram per score, one bar series per kind holding all its examples,
the filter's cut-off drawn on the panel of the score it filters by."""

import pytest

from knowflow.report.curation import curation_figure

SCORES = [{"kind": kind, "loss_without_context": 0.5 + i / 10, "criticality": i / 20 - 0.3}
          for i, kind in enumerate(["C", "C+S", "S", "C+S", "C", "C+S", "C+S"])]


def _cutoff_lines(ax) -> list:
    return [line for line in ax.lines if line.get_label() == "drop below"]


@pytest.mark.parametrize(("by", "panel"), [("no_context_loss", 0), ("criticality", 1)])
def test_each_kind_is_one_series_and_the_cutoff_sits_on_the_filtered_score(tmp_path, drawn,
                                                                           png_shape, by, panel):
    out = curation_figure(SCORES, by, 0.8, tmp_path / "curation.png")
    assert png_shape(out)[:2] == (352, 924)  # two 4.2 x 3.2 in panels at 110 dpi
    (fig,) = drawn
    for ax in fig.axes:
        counts = {c.patches[0].get_label(): sum(p.get_height() for p in c.patches)
                  for c in ax.containers}
        assert counts == {"C": 2, "C+S": 4, "S": 1}
    assert [len(_cutoff_lines(ax)) for ax in fig.axes] == [int(panel == 0), int(panel == 1)]
    assert list(_cutoff_lines(fig.axes[panel])[0].get_xdata()) == [0.8, 0.8]


def test_without_kinds_or_cutoff_one_series_is_all_examples(tmp_path, drawn):
    scores = [{"loss_without_context": 1.0, "criticality": 0.2}] * 3
    curation_figure(scores, "criticality", None, tmp_path / "c.png")
    for ax in drawn[0].axes:
        assert [c.patches[0].get_label() for c in ax.containers] == ["all"]
        assert not _cutoff_lines(ax)
