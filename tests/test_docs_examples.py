"""The README's and docs' fast examples rerun to the outputs they show
(benchmarks/docs/docs_examples.py --check: timings, timestamps and temporary paths masked; slow),
and the script's own parts: masking, excerpts, and tables and figures read from a run."""

import json

import pytest

from helpers import load_benchmark


@pytest.mark.slow  # loads SmolLM2 and runs its examples: minutes on two cores
def test_the_fast_examples_print_what_the_docs_show(capsys):
    docs_examples = load_benchmark("docs/docs_examples")
    code = docs_examples.main(["--check"])
    assert code == 0, capsys.readouterr().out


def test_masking_hides_timings_and_timestamps_only():
    docs_examples = load_benchmark("docs/docs_examples")
    assert docs_examples.mask("results: runs/eval/20261206-012611 (21.2 s: load 0.6 s)") == \
        "results: runs/eval/<timestamp> (<time>: load <time>)"
    assert docs_examples.mask("(40, 25)") == "(40, 25)"
    assert docs_examples.mask("3/3 [00:00<00:00, 851.06 examples/s]") == "3/3 [<time>, <rate>]"


def test_masking_hides_a_tables_seconds_column_and_clock_times():
    docs_examples = load_benchmark("docs/docs_examples")
    table = ("finetuning ━━━━ 2/2 0:00:11\n"
             "┏━━━━━━━┳━━━━━━━━━┓\n┃ steps ┃ seconds ┃\n┡━━━━━━━╇━━━━━━━━━┩\n"
             "│ 2     │ 30      │\n└───────┴─────────┘\nsteps: 30")
    masked = docs_examples.mask(table)
    assert "│ 2     │ <time>  │" in masked and "2/2 <time>" in masked
    assert masked.endswith("steps: 30")  # only the table's timing column


def test_an_excerpt_keeps_the_commands_and_the_lines_it_names_with_gaps():
    docs_examples = load_benchmark("docs/docs_examples")
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
    docs_examples = load_benchmark("docs/docs_examples")
    folder = tmp_path / "runs" / "x" / "20261206-000000"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "a.png").write_bytes(b"not the docs' figure")
    arm = {"seeds": [0, 1], "cf_acc_start_seeds": [0.0, 0.1], "cf_acc_peak_seeds": [0.7, 0.8],
           "cf_acc_peak_step_seeds": [20, 40], "cf_acc_final_seeds": [0.5, 0.4],
           "cf_acc_fall_seeds": [0.2, 0.4], "cf_acc_fall_ci95": [0.1, 0.5]}
    (folder / "summary.json").write_text(json.dumps(
        {"mixed": arm, "filtered": {**arm, "cf_acc_fall_seeds": [0.1, 0.2]},
         "findings": {"filtered_fall_removed": 0.5, "filtered_reduces_fall_every_seed": True,
                      "filtered_indist_minus_mixed": 0.004}}))
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


def test_a_saved_file_is_written_before_the_example_that_reads_it(tmp_path):
    docs_examples = load_benchmark("docs/docs_examples")
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "<!-- docs-file: data/rows.txt -->", "```", "first row", "second row", "```", "",
        "<!-- docs-example: fast -->", "```", "$ wc -l < data/rows.txt", "stale", "```"]))
    text = docs_examples.Pass({"fast"}, None, check=True).regenerate(page)
    assert text.split("\n")[-3:] == ["$ wc -l < data/rows.txt", "2", "```"]


def test_a_saved_file_can_come_from_another_page(tmp_path):
    docs_examples = load_benchmark("docs/docs_examples")
    tutorial = tmp_path / "tutorial.md"
    tutorial.write_text("\n".join(["<!-- docs-file: make.sh -->", "```", "echo made", "```"]))
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        f"<!-- docs-file: make.sh < {tutorial} -->", "<!-- docs-example: fast -->", "```",
        "$ bash make.sh", "```"]))
    text = docs_examples.Pass({"fast"}, None, check=True).regenerate(page)
    assert "$ bash make.sh\nmade\n```" in text
    missing = tmp_path / "missing.md"
    missing.write_text(f"<!-- docs-file: other.sh < {tutorial} -->\n")
    with pytest.raises(docs_examples.ExampleFailed, match="other.sh"):
        docs_examples.Pass({"fast"}, None, check=True).regenerate(missing)


def test_a_failing_command_stops_the_script_unless_it_shows_its_exit_code(tmp_path):
    docs_examples = load_benchmark("docs/docs_examples")
    shown = docs_examples.run_shell(['$ ls no-such-file > /dev/null 2>&1; echo "exit $?"'],
                                    tmp_path)
    assert shown == ['$ ls no-such-file > /dev/null 2>&1; echo "exit $?"', "exit 2"]
    with pytest.raises(docs_examples.ExampleFailed, match=r"page.md:7: `ls no-such-file` exited 2"):
        docs_examples.run_shell(["$ ls no-such-file", "old output"], tmp_path, "page.md:7")
    with pytest.raises(docs_examples.ExampleFailed, match="Traceback"):
        docs_examples.run_shell(['$ python -c "1/0"; echo "exit $?"'], tmp_path)


def test_an_excerpt_comes_from_the_first_example_whose_output_it_matches():
    docs_examples = load_benchmark("docs/docs_examples")
    run = docs_examples.Pass({"fast"}, None, check=True)
    source = docs_examples.ROOT / "docs" / "not-a-page.md"   # held in memory, never written
    run.texts[source] = "\n".join([
        "<!-- docs-example: fast -->", "```", "$ make model", "report: runs/model", "```",
        "<!-- docs-example: fast -->", "```", "$ knowflow report a b", "a: no inversion",
        "report: compare.html", "```"])
    page = "\n".join(["<!-- docs-excerpt: docs/not-a-page.md keep=^report: compare -->",
                      "```", "stale", "```"])
    assert run.excerpts(source, page).split("\n")[1:5] == [
        "```", "$ knowflow report a b", "...", "report: compare.html"]
    with pytest.raises(docs_examples.ExampleFailed, match="no example"):
        run.excerpts(source, page.replace("compare", "nowhere"))


def test_output_blocks_are_told_from_commands_files_and_python():
    docs_examples = load_benchmark("docs/docs_examples")
    text = "\n".join([
        "```", "$ knowflow eval \\", "    --limit 4", "```",          # a command alone
        "```python", "$ x = 1", "# 1", "```",                       # python: not shell output
        "<!-- docs-example: fast -->", "```", "$ knowflow list", "cpi-toy", "```",
        "```", "$ knowflow run x", "verdict: ok", "```",            # output, no marker
        "<!-- docs-record: 2026-12-04 28274c9, 2-core CPU -->", "```", "$ python b.py",
        "1.0 s", "```"])
    assert docs_examples.output_blocks(text) == [
        (10, "example", "fast"), (14, None, ""),
        (19, "record", "2026-12-04 28274c9, 2-core CPU")]


def test_findings_blocks_must_be_dated_records_and_other_blocks_examples(tmp_path, monkeypatch):
    docs_examples = load_benchmark("docs/docs_examples")
    monkeypatch.setattr(docs_examples, "ROOT", tmp_path)
    (tmp_path / "docs" / "findings").mkdir(parents=True)
    block = ["```", "$ python benchmarks/bench.py", "1.0 s", "```"]
    finding = tmp_path / "docs" / "findings" / "f.md"
    for marker, ok in (("<!-- docs-record: 2026-12-04 28274c9, shared 2-core CPU -->", True),
                       ("<!-- docs-record: on or before 2026-12-04 28274c9, 2 cores -->", True),
                       ("<!-- docs-record: last week -->", False),
                       ("<!-- docs-example: slow -->", False)):
        finding.write_text("\n".join([marker, *block]))
        assert (docs_examples.unmarked(finding) == []) is ok, marker
    page = tmp_path / "docs" / "page.md"
    page.write_text("\n".join(["<!-- docs-record: 2026-12-04 28274c9, 2 cores -->", *block]))
    assert docs_examples.unmarked(page) == [
        "docs/page.md:2: command output without a docs-example marker"]


def test_keep_leaves_each_pages_folder_in_place(tmp_path):
    docs_examples = load_benchmark("docs/docs_examples")
    page = tmp_path / "page.md"
    page.write_text("\n".join(["<!-- docs-example: fast -->", "```",
                               "$ mkdir -p runs/x && echo 1 > runs/x/summary.json", "```"]))
    docs_examples.Pass({"fast"}, None, check=True, keep=tmp_path / "kept").regenerate(page)
    assert (tmp_path / "kept" / "page" / "runs" / "x" / "summary.json").read_text() == "1\n"


def test_masking_hides_the_trainers_closing_timings_not_its_loss():
    docs_examples = load_benchmark("docs/docs_examples")
    line = "{'train_runtime': '67.12', 'train_steps_per_second': '0.894', 'train_loss': '9.316'}"
    assert docs_examples.mask(line) == "{<time>, <time>, 'train_loss': '9.316'}"


def test_a_notebook_cell_keeps_its_print_and_its_result_html():
    """benchmarks/docs/notebooks.py: what a cell prints is a stream, its last value a result
    with the object's own HTML beside its plain text, as a notebook front end keeps them."""
    notebooks = load_benchmark("docs/notebooks")

    class Shown:
        def __repr__(self):
            return "Shown()"

        def _repr_html_(self):
            return "<b>shown</b>"

    namespace = {"Shown": Shown}
    out = notebooks.run_cell("print('hi')\nx = 1.23456\nShown()", namespace, lambda v: v)
    assert out[0] == {"name": "stdout", "output_type": "stream", "text": ["hi\n"]}
    assert out[1]["data"] == {"text/plain": ["Shown()"], "text/html": ["<b>shown</b>"]}
    assert namespace["x"] == 1.23456
    assert notebooks.run_cell("y = 2", namespace, lambda v: v) == []
