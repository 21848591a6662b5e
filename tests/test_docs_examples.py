"""The README's and docs' fast examples rerun to the outputs they show
(benchmarks/docs_examples.py --check: timings, timestamps and temporary paths masked; slow),
and the script's own parts: masking, excerpts, and tables and figures read from a run."""

import json

import pytest

from helpers import load_benchmark


@pytest.mark.slow  # loads SmolLM2 and runs its examples: minutes on two cores
def test_the_fast_examples_print_what_the_docs_show(capsys):
    docs_examples = load_benchmark("docs_examples")
    code = docs_examples.main(["--check"])
    assert code == 0, capsys.readouterr().out


def test_masking_hides_timings_and_timestamps_only():
    docs_examples = load_benchmark("docs_examples")
    assert docs_examples.mask("results: runs/eval/20261206-012611 (21.2 s: load 0.6 s)") == \
        "results: runs/eval/<timestamp> (<time>: load <time>)"
    assert docs_examples.mask("(40, 25)") == "(40, 25)"


def test_masking_hides_a_tables_seconds_column_and_clock_times():
    docs_examples = load_benchmark("docs_examples")
    table = ("finetuning ━━━━ 2/2 0:00:11\n"
             "┏━━━━━━━┳━━━━━━━━━┓\n┃ steps ┃ seconds ┃\n┡━━━━━━━╇━━━━━━━━━┩\n"
             "│ 2     │ 30      │\n└───────┴─────────┘\nsteps: 30")
    masked = docs_examples.mask(table)
    assert "│ 2     │ <time>  │" in masked and "2/2 <time>" in masked
    assert masked.endswith("steps: 30")  # only the table's timing column


def test_an_excerpt_keeps_the_commands_and_the_lines_it_names_with_gaps():
    docs_examples = load_benchmark("docs_examples")
    run = docs_examples.Pass({"fast"}, None, check=True)
    source = docs_examples.ROOT / "docs" / "not-a-page.md"   # held in memory, never written
    run.texts[source] = "\n".join(["<!-- docs-example: slow -->", "```", "$ knowflow run x",
                                   "┏━┓", "a: 1", "verdict: ok", "b: 2", "c_removed: 1", "```"])
    page = "\n".join(["<!-- docs-excerpt: docs/not-a-page.md keep=^┏|^verdict|_removed -->",
                      "```", "stale", "```", "after"])
    assert run.excerpts(source, page).split("\n") == [
        page.split("\n")[0], "```", "$ knowflow run x", "┏━┓", "...", "verdict: ok", "...",
        "c_removed: 1", "```", "after"]


def test_tables_and_figures_come_from_the_run_folder_the_block_names(tmp_path):
    docs_examples = load_benchmark("docs_examples")
    folder = tmp_path / "runs" / "x" / "20261206-000000"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "a.png").write_bytes(b"not the docs' figure")
    arm = {"seeds": [0, 1], "cf_acc_start_seeds": [0.0, 0.1], "cf_acc_peak_seeds": [0.7, 0.8],
           "cf_acc_peak_step_seeds": [20, 40], "cf_acc_final_seeds": [0.5, 0.4],
           "fall_seeds": [0.2, 0.4], "fall_ci95": [0.1, 0.5]}
    (folder / "summary.json").write_text(json.dumps(
        {"mixed": arm, "filtered": {**arm, "fall_seeds": [0.1, 0.2]},
         "findings": {"filtered_fall_removed": 0.5, "filtered_reduces_fall_every_seed": True,
                      "filtered_in_dist_minus_mixed": 0.004}}))
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "<!-- docs-example: slow -->", "```", "$ knowflow run x",
        "run directory: runs/x/20261206-000000  (1.0 s)", "```",
        "<!-- docs-figure: figures/a.png -> docs/img/inversion_tiny_cf.png -->",
        "<!-- docs-table: inversion-tiny-per-seed summary.json -->", "| old |", "|---|", "",
        "<!-- docs-table: inversion-tiny-mitigations summary.json -->", "| old |", ""]))
    run = docs_examples.Pass({"fast"}, tmp_path, check=True)   # the slow block ran in tmp_path
    text = run.regenerate(page)
    assert "| mixed | 1 | 0.100 | 0.800 | 40 | 0.400 | 0.400 |" in text
    assert "| mixed | 0.300 | [0.100, 0.500] | - | - | - |" in text
    assert "| filtered | 0.150 | [0.100, 0.500] | yes | 50% | +0.004 |" in text
    assert "| old |" not in text and "run directory: runs/x/20261206-000000" in text
    assert run.figures_differ == ["docs/img/inversion_tiny_cf.png"]  # compared, not copied
