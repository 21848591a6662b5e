"""experiments.phase_figure: the fall of each (C+S share, reliability) cell as a heatmap per
model, its
value written in the cell, inverting cells outlined; `with_phase` picks it for phase studies."""

import pytest
from matplotlib.patches import Rectangle

from knowflow.experiments.phase_figure import plot_phase, with_phase
from knowflow.store.files import atomic_write_json


def _rows(scale: float) -> list[dict]:
    return [{"cs_share": x, "reliability": rel, "fall_mean": scale * (x + rel),
             "inverts": scale * (x + rel) >= 1.0}
            for x in (0.0, 0.5) for rel in (0.6, 0.9, 1.0)]


@pytest.fixture
def run(tmp_path):
    atomic_write_json(tmp_path / "config.json", {"study": "phase"})
    atomic_write_json(tmp_path / "phase.json", {"toy": _rows(1.0), "tiny": _rows(0.5),
                                                "agreement": {"cells": 6}})
    return tmp_path


def test_one_heatmap_per_model_with_every_cell(run, drawn, png_shape):
    (path,) = plot_phase(run)
    assert path.name == "1_phase_diagram.png" and png_shape(path)[2] == 4
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.images]  # the colorbars are axes too
    assert [ax.get_title() for ax in panels] == ["one-layer theory (fall of M_C)",
                                                 "tiny transformer (fall of cf accuracy)"]
    for ax, scale in zip(panels, (1.0, 0.5), strict=True):
        grid = ax.images[0].get_array()
        assert grid.shape == (3, 2)  # reliabilities down, shares across
        assert grid[2, 1] == pytest.approx(scale * 1.5) and grid[0, 0] == pytest.approx(
            scale * 0.6)
        texts = sorted(t.get_text() for t in ax.texts)
        assert texts == sorted(f"{scale * (x + rel):.2f}" for x in (0.0, 0.5)
                               for rel in (0.6, 0.9, 1.0))
        outlined = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert len(outlined) == sum(r["inverts"] for r in _rows(scale))
    assert len([p for p in panels[1].patches if isinstance(p, Rectangle)]) == 0


def test_with_phase_draws_the_diagram_only_for_phase_studies(run):
    def other(run_dir):
        return ["other"]

    draw = with_phase(other)
    assert [p.name for p in draw(run)] == ["1_phase_diagram.png"]
    for config in ({"study": "main"}, {}):  # a config without a study is not a phase study
        atomic_write_json(run / "config.json", config)
        assert draw(run) == ["other"]


def test_no_phase_file_or_no_rows_draws_nothing(tmp_path):
    assert plot_phase(tmp_path) == []
    atomic_write_json(tmp_path / "phase.json", {"toy": [], "tiny": []})
    assert plot_phase(tmp_path) == []
