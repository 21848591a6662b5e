"""experiments.ocr_smollm2.figures: mean-rank curves per family with chance at (K - 1) / 2, the
results
table figure and its Markdown twin, all from the run's flat `<family>/<group>/<stat>` records."""

import pytest

from knowflow.experiments.ocr_smollm2.figures import plot_ocr_smollm2, table_markdown
from knowflow.store.files import atomic_write_json, atomic_write_jsonl

FAMILIES = {"city_language": 4, "sport_music": 6}  # shipped families: causal, not causal


def _record(step: int) -> dict:
    rec = {"step": step}
    for fam, k in [*FAMILIES.items(), ("all", 5)]:
        for group, base in (("test_impl", 2.0), ("train_impl", 1.0), ("test_fact", 0.5)):
            rec[f"{fam}/{group}/mean_rank"] = base - step / 10 + k / 100
            rec[f"{fam}/{group}/n_candidates"] = k
        rec[f"{fam}/test_impl/top1"] = step / 20
        rec[f"{fam}/test_impl/n"] = 8
    return rec


@pytest.fixture
def run(tmp_path):
    atomic_write_json(tmp_path / "config.json", {"model": "/models/tiny-llama",
                                                 "world": {"families_file": ""}})
    atomic_write_jsonl(tmp_path / "metrics.jsonl", [_record(s) for s in (0, 5, 10)])
    return tmp_path


def test_curves_per_family_with_chance_per_k(run, drawn, png_shape):
    paths = plot_ocr_smollm2(run)
    assert [p.name for p in paths] == ["1_mean_rank.png", "2_table.png"]
    assert all(len(png_shape(p)) == 3 for p in paths)
    curves = drawn[0].axes
    assert len(curves) == 3
    for ax, group in zip(curves, ("test_impl", "train_impl", "test_fact"), strict=True):
        lines = {line.get_label(): line for line in ax.lines}
        for fam in FAMILIES:
            assert list(lines[fam].get_xdata()) == [0, 5, 10]
            assert list(lines[fam].get_ydata()) == [_record(s)[f"{fam}/{group}/mean_rank"]
                                                   for s in (0, 5, 10)]
        assert list(lines["chance (K=4)"].get_ydata()) == [1.5, 1.5]
        assert list(lines["chance (K=6)"].get_ydata()) == [2.5, 2.5]
    assert "tiny-llama" in curves[0].get_title()


def test_the_table_figure_shows_before_and_after_per_family(run, drawn):
    plot_ocr_smollm2(run)
    table = drawn[1].axes[0].tables[0]
    cells = table.get_celld()
    heads = {cells[0, c].get_text().get_text(): c for c in range(11)}
    rows = {cells[r, -1].get_text().get_text(): r for r in range(1, 4)}
    assert set(rows) == {"city_language", "sport_music", "all"}

    def cell(row: str, head: str) -> str:
        return cells[rows[row], heads[head]].get_text().get_text()

    assert cell("city_language", "causal") == "yes" and cell("sport_music", "causal") == "no"
    assert cell("sport_music", "K") == "6" and cell("sport_music", "chance") == "2.50"
    assert cell("city_language", "before") == "2.04" and cell("city_language", "after") == "1.04"
    assert cell("all", "causal") == "-"  # the pooled row has no causal flag
    assert "10 steps" in drawn[1].axes[0].get_title()


def test_table_markdown_rows_and_formatting():
    text = table_markdown({"a": {"causal": True, "n_candidates": 4, "mean_rank_after": 1.2345},
                           "b": {"n_candidates": 6, "top1_after": None}})
    lines = text.splitlines()
    assert lines[0].startswith("| family | causal | n_candidates |") and len(lines) == 4
    assert lines[1] == "|---" * 12 + "|"
    assert lines[2].startswith("| a | yes | 4 | - | - | 1.23 |")
    assert lines[3] == "| b | - | 6 |" + " - |" * 9


def test_a_run_without_records_draws_nothing(tmp_path):
    assert plot_ocr_smollm2(tmp_path) == []
