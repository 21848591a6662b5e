"""experiments.ocr_toy.figures: seed bands (mean, min, max per step), the six training panels for
the
factorized and merged models with chance at log K, and the rank sweep's final values."""

import math

import pytest

from knowflow.experiments.ocr_toy.figures import plot_ocr_toy, seed_band
from knowflow.store.files import atomic_write_json, atomic_write_jsonl

KEYS = ("train_fact_loss", "train_impl_loss", "test_impl_loss", "test_impl_acc", "test_margin",
        "nuclear_norm", "frobenius_norm", "train_loss")


def _records(part: str, model: str, rank: int, scale: float) -> list[dict]:
    return [{"part": part, "model": model, "rank": rank, "seed": seed, "step": step,
             **{k: scale * (1 + seed + step / 10 + i) for i, k in enumerate(KEYS)}}
            for seed in (0, 1, 2) for step in (0, 10, 20)]


def _run(tmp_path, study: str, parts: list[tuple[str, str, int, float]]):
    atomic_write_json(tmp_path / "config.json", {"study": study, "world": {"n_answers": 4}})
    records = [r for part in parts for r in _records(*part)]
    atomic_write_jsonl(tmp_path / "metrics.jsonl", records)
    return records


def test_seed_band_is_mean_min_max_per_step():
    recs = [{"step": 5, "x": 2.0}, {"step": 0, "x": 3.0}, {"step": 0, "x": 8.0},
            {"step": 5, "x": None}, {"step": 0, "x": 1.0}]
    steps, mean, lo, hi = seed_band(recs, "x")
    assert steps.tolist() == [0, 5] and mean.tolist() == [4.0, 2.0]
    assert lo.tolist() == [1.0, 2.0] and hi.tolist() == [8.0, 2.0]


def test_main_study_draws_six_panels_of_seed_means(tmp_path, drawn, png_shape):
    _run(tmp_path, "main", [("factorized", "factorized", 8, 1.0), ("merged", "merged", 0, 2.0)])
    paths = plot_ocr_toy(tmp_path)
    assert [p.name for p in paths] == ["1_training.png"]
    assert png_shape(paths[0])[:2] == (2 * 352, 3 * 462)  # 2 rows x 3 panels, 4.2 x 3.2 in
    (fig,) = drawn
    assert len(fig.axes) == 6
    test_loss = fig.axes[2]
    lines = {line.get_label(): list(line.get_ydata()) for line in test_loss.lines}
    # test_impl_loss is KEYS[2]: scale * (1 + seed + step / 10 + 2), mean over seeds 0..2
    assert lines["factorized"] == pytest.approx([4.0, 5.0, 6.0])
    assert lines["merged"] == pytest.approx([8.0, 10.0, 12.0])
    assert lines["log K (chance)"] == pytest.approx([math.log(4)] * 2)
    assert len(test_loss.collections) == 2  # the min-max band of each model
    norms = fig.axes[5]
    assert [line.get_linestyle() for line in norms.lines] == ["-", "--", "-", "--"]


def test_rank_sweep_plots_final_values_against_rank(tmp_path, drawn):
    _run(tmp_path, "rank_sweep", [("rank2", "factorized", 2, 1.0), ("rank8", "factorized", 8, 0.5),
                                  ("merged", "merged", 0, 3.0)])
    paths = plot_ocr_toy(tmp_path)
    assert [p.name for p in paths] == ["1_training.png", "3_rank_sweep.png"]
    sweep = drawn[1].axes
    assert len(sweep) == 3
    rank_line = next(line for line in sweep[0].lines if line.get_label() == "factorized, rank r")
    assert list(rank_line.get_xdata()) == [2, 8]
    # train_loss is KEYS[7]: final step 20, seed mean 1 + 1 + 2 + 7 = 11, times the scale
    assert list(rank_line.get_ydata()) == pytest.approx([11.0, 5.5])
    merged = next(line for line in sweep[0].lines if line.get_label() == "merged W_OV")
    assert list(merged.get_ydata()) == pytest.approx([33.0, 33.0])
