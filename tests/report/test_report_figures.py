"""report.figures: the panel grid, the PNG writer (110 dpi, atomic) and `series`."""

import matplotlib.pyplot as plt

from knowflow.report.figures import save, series, subplots


def test_subplots_is_a_grid_of_the_asked_size_and_save_writes_its_pixels(tmp_path, png_shape):
    fig, axes = subplots(3, nrows=2, width=2.0, height=1.0)
    assert axes.shape == (2, 3) and len(fig.axes) == 6
    assert tuple(fig.get_size_inches()) == (6.0, 2.0)
    assert all(ax.xaxis.get_gridlines()[0].get_visible() for ax in axes.flat)
    out = save(fig, tmp_path / "deep" / "f.png")  # parent folders made
    assert out == tmp_path / "deep" / "f.png"
    assert png_shape(out) == (220, 660, 4)  # 110 dpi
    assert [p.name for p in out.parent.iterdir()] == ["f.png"]  # no temporary file left
    assert not plt.fignum_exists(fig.number)  # closed after writing


def test_series_keeps_the_steps_that_have_the_key_zeros_included():
    records = [{"step": 0, "acc": 0.0}, {"step": 5, "acc": None}, {"step": 10},
               {"step": 15, "acc": 0.5, "other": 1}]
    assert series(records, "acc") == ([0, 15], [0.0, 0.5])
    assert series(records, "missing") == ([], [])
