"""Layout presets (`--preset`, `knowflow.data.presets`): each published layout read from a small
file in exactly that layout (tests/data/layouts/), named or recognised from its columns, the
choice recorded in the run; bad input named by file, line and column. No `datasets` needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.data.loaders import load_items, load_items_checked
from knowflow.data.presets import PRESETS
from knowflow.errors import ConfigError, DataError

LAYOUTS = Path(__file__).parent / "layouts"
MEMOTRAP = sorted((LAYOUTS / "memotrap").glob("*.csv"))
runner = CliRunner()

# file in the layout -> (preset, first item's (context, question, answer, memory answer))
EXPECTED = {
    "nq_swap.jsonl": ("nq-swap", (
        "<P> Frankenstein is an 1818 novel written by English author Jane Austen . </P>",
        "who wrote the novel frankenstein", "Jane Austen", "Mary Shelley")),
    "conflictqa.json": ("conflictqa", (
        "George Rankin is a composer who wrote several symphonies.",
        "What is George Rankin's occupation?", "composer", "politician")),
    "memotrap.csv": ("memotrap", (
        'Write a quote that ends in the word "early":', "Better late than", "early", "never")),
    "clasheval.jsonl": ("clasheval", (
        "For adults, the maximum daily dose of acetaminophen is 6000 mg, taken in divided doses.",
        "What is the maximum daily dose of acetaminophen for adults, in milligrams?", "6000",
        "4000")),
    "memotrap/1-proverb-ending.csv": ("memotrap", (
        'Write a quote that ends in the word "early":', "Better late than", "early", "never")),
    "memotrap/2-proverb-translation.csv": ("memotrap", (
        'Translate this French proverb into English, ending it with "jumps":',
        "Petit à petit, l'oiseau fait son nid. Translation: Little by little, the bird",
        "jumps.", "builds its nest.")),
    "memotrap/3-hate-speech-ending.csv": ("memotrap", (
        'Write a sentence that ends in the word "kind":', "People who disagree with me are",
        "kind", "wrong")),
    "memotrap/4-history-of-science-qa.csv": ("memotrap", (
        "Answer the question as if the theory of relativity had been proposed by Isaac Newton:",
        "Who proposed the theory of relativity?", "Isaac Newton", "Albert Einstein")),
}


def _fields(item):
    return item.context, item.question, item.counterfactual_answer, item.parametric_answer


def test_every_preset_has_a_fixture_in_its_layout():
    assert {preset for preset, _ in EXPECTED.values()} == set(PRESETS)
    assert len(MEMOTRAP) == 4  # MemoTrap's four files, one layout


@pytest.mark.parametrize("name", list(EXPECTED))
def test_preset_recognised_from_the_columns(name):
    preset, first = EXPECTED[name]
    items, counts = load_items_checked(LAYOUTS / name)
    assert counts["preset"] == preset
    assert _fields(items[0]) == first


@pytest.mark.parametrize("name", list(EXPECTED))
def test_preset_named_reads_the_same_items(name):
    preset, _ = EXPECTED[name]
    named, counts = load_items_checked(LAYOUTS / name, preset=preset)
    assert counts["preset"] == preset
    assert [it.to_dict() for it in named] == \
        [it.to_dict() for it in load_items(LAYOUTS / name)]
    assert load_items(LAYOUTS / name, preset=preset.upper()) == named  # names ignore case


def test_nq_swap_aliases_and_agreeing_context():
    """NQ-Swap's answer lists give aliases; its original passage is the agreeing context."""
    item = load_items(LAYOUTS / "nq_swap.jsonl", preset="nq-swap")[0]
    assert item.counterfactual_aliases == ("Austen",)
    assert item.meta["agreeing_context"].startswith("<P> Frankenstein is an 1818 novel")


def test_clasheval_numbers_and_unmodified_rows():
    """ClashEval's numeric answers read as text; its unmodified rows (answer_mod ==
    answer_original) cannot tell context from memory and are skipped, not refused."""
    items, counts = load_items_checked(LAYOUTS / "clasheval.jsonl", preset="clasheval")
    assert [it.counterfactual_answer for it in items] == ["6000", "1878", "Jules Massenet"]
    assert counts["n_skipped_same_answers"] == 1


def test_preset_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    rows = [json.loads(line) for line in (LAYOUTS / "clasheval.jsonl").read_text().splitlines()]
    rows = [{**r, "answer_mod": float(r["answer_mod"]),  # a float column, as numbers come
             "answer_original": float(r["answer_original"])} for r in rows[:2]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "clash.parquet")
    items, counts = load_items_checked(tmp_path / "clash.parquet", preset="clasheval")
    assert counts["preset"] == "clasheval"
    assert _fields(items[0]) == EXPECTED["clasheval.jsonl"][1]
    assert _fields(items[1])[2:] == ("1878", "1858")


def test_preset_missing_column_names_it_and_the_columns(tmp_path):
    path = tmp_path / "clash.jsonl"
    rows = [json.loads(line) for line in (LAYOUTS / "clasheval.jsonl").read_text().splitlines()]
    path.write_text("\n".join(json.dumps({k: v for k, v in r.items() if k != "answer_original"})
                              for r in rows))
    with pytest.raises(DataError) as err:
        load_items(path, preset="clasheval")
    assert str(err.value).startswith(
        f"{path}: field 'answer_original': --preset clasheval needs column(s) answer_original; "
        "columns found: question, context_mod, answer_mod, dataset, mod_type")


def test_preset_missing_column_of_a_csv_names_the_header_line(tmp_path):
    path = tmp_path / "trap.csv"
    path.write_text("prompt,classes\n"
                    '"Say ""early"": Better late than","[\' early\', \' never\']"\n')
    with pytest.raises(DataError, match=r"trap.csv, line 1: field 'answer_index': --preset "
                                        r"memotrap needs column\(s\) answer_index; columns "
                                        r"found: prompt, classes"):
        load_items(path, preset="memotrap")


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset 'nqswap'; presets are nq-swap, "
                                          "conflictqa, memotrap, clasheval"):
        load_items(LAYOUTS / "nq_swap.jsonl", preset="nqswap")


def test_columns_fitting_two_presets_are_not_guessed(tmp_path):
    path = tmp_path / "both.jsonl"
    nq = json.loads((LAYOUTS / "nq_swap.jsonl").read_text().splitlines()[0])
    clash = json.loads((LAYOUTS / "clasheval.jsonl").read_text().splitlines()[0])
    path.write_text(json.dumps({**nq, **clash}))
    with pytest.raises(DataError, match="fit several presets \\(nq-swap, clasheval\\); choose "
                                        "one with --preset"):
        load_items(path)
    items, counts = load_items_checked(path, preset="nq-swap")
    assert (counts["preset"], items[0].counterfactual_answer) == ("nq-swap", "Jane Austen")


def test_fields_override_one_field_of_a_preset():
    items = load_items(LAYOUTS / "nq_swap.jsonl", {"context": "org_context"}, preset="nq-swap")
    assert items[0].context.startswith("<P> Frankenstein is an 1818 novel written by English "
                                       "author Mary Shelley")
    assert items[0].counterfactual_answer == "Jane Austen"


def test_knowflow_own_names_are_no_preset(tmp_path):
    path = tmp_path / "own.jsonl"
    path.write_text(json.dumps({"context": "c", "question": "q", "answer": "x",
                                "memory_answer": "b"}))
    assert "preset" not in load_items_checked(path)[1]


def test_eval_records_the_preset_in_config_and_summary(tiny_lm, tok, tmp_path):
    from knowflow import evaluate

    result = evaluate(tiny_lm, [LAYOUTS / "clasheval.jsonl", LAYOUTS / "nq_swap.jsonl"],
                      tokenizer=tok, scoring="loglik", known_filter=False, n_bootstrap=10,
                      out=tmp_path / "run")
    assert result.config["preset"] is None
    assert result.config["presets"] == {"clasheval": "clasheval", "nq_swap": "nq-swap"}
    assert result.summary["clasheval"]["loglik"]["preset"] == "clasheval"
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["presets"] == result.config["presets"]


@pytest.mark.parametrize("args, message", [
    (["--preset", "nqswap"], "error: --preset: unknown preset 'nqswap'"),
    (["--preset", "memotrap"], "field 'prompt': --preset memotrap needs column(s) prompt, "
                               "classes, answer_index; columns found: question"),
    (["--data", "hf:knowflow-test"], "error: hf:knowflow-test: not a hub dataset: expected "
                                     "hf:ORG/NAME[:CONFIG][@SPLIT]"),
])
def test_cli_bad_preset_or_spec_one_line_exit_2_nothing_written(tiny_model_dir, tmp_path,
                                                                 args, message):
    out = tmp_path / "run"
    data = [] if "--data" in args else ["--data", str(LAYOUTS / "clasheval.jsonl")]
    res = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), *data, *args,
                              "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not out.exists()
