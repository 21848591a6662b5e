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
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [json.loads(line) for line in (LAYOUTS / "clasheval.jsonl").read_text().splitlines()]
    rows = [{**r, "answer_mod": float(r["answer_mod"]),  # a float column, as numbers come
             "answer_original": float(r["answer_original"])} for r in rows[:2]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "clash.parquet")
    items, counts = load_items_checked(tmp_path / "clash.parquet", preset="clasheval")
    assert counts["preset"] == "clasheval"
    assert _fields(items[0]) == EXPECTED["clasheval.jsonl"][1]
    assert _fields(items[1])[2:] == ("1878", "1858")


def _layout_rows(name: str) -> list[dict]:
    text = (LAYOUTS / name).read_text()
    return json.loads(text) if name.endswith(".json") else \
        [json.loads(line) for line in text.splitlines()]


# preset -> (fixture, the column left out, its role, the columns that recognise the layout)
MISSING = {
    "nq-swap": ("nq_swap.jsonl", "org_answer", "the memory answer", "sub_context, sub_answer"),
    "conflictqa": ("conflictqa.json", "counter_answer", "the context's answer", "counter_memory"),
    "clasheval": ("clasheval.jsonl", "answer_original", "the memory answer",
                  "context_mod, answer_mod"),
    "memotrap": ("memotrap.csv", "answer_index", "which answer the prompt asks for",
                 "prompt, classes"),
}


def _without(tmp_path, preset: str) -> tuple[Path, str]:
    """The preset's fixture with one required column left out; the columns it keeps."""
    name, column, _, _ = MISSING[preset]
    if name.endswith(".csv"):
        lines = (LAYOUTS / name).read_text().splitlines()
        keep = [c for c in lines[0].split(",") if c != column]
        path = tmp_path / "trap.csv"
        path.write_text("\n".join([",".join(keep), *(line.rsplit(",", 1)[0]
                                                     for line in lines[1:])]) + "\n")
        return path, ", ".join(keep)
    rows = [{k: v for k, v in r.items() if k != column} for r in _layout_rows(name)]
    path = tmp_path / f"{preset}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, ", ".join(rows[0])


@pytest.mark.parametrize("named", [False, True], ids=["recognised", "named"])
@pytest.mark.parametrize("preset", list(MISSING))
def test_missing_column_names_the_preset_and_the_column(tmp_path, preset, named):
    """A file in a preset's layout lacking one column: the error names the preset, the
    column (as the field) and what the preset reads from it, whether the preset was named
    or recognised from the columns that are there."""
    _, column, role, marks = MISSING[preset]
    path, kept = _without(tmp_path, preset)
    with pytest.raises(DataError) as err:
        load_items(path, preset=preset if named else None)
    how = "" if named else f" (recognised from {marks})"
    assert str(err.value) == (
        f"{path}, line 1: field '{column}': the {preset} preset{how} needs column {column} "
        f"({role}); columns found: {kept}; give the file in that layout, or map its columns "
        "with --fields")


@pytest.mark.parametrize("preset", ["nq-swap", "conflictqa", "clasheval"])
def test_a_record_lacking_a_preset_column_names_the_preset_and_the_line(tmp_path, preset):
    """JSON records each name their columns: the second record lacking one is named by line,
    not as a knowflow field ('memory_answer') the file never had."""
    name, column, role, _ = MISSING[preset]
    first, second = _layout_rows(name)[:2]
    second = {k: v for k, v in second.items() if k != column}
    path = tmp_path / "two.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    with pytest.raises(DataError) as err:
        load_items(path)
    assert str(err.value) == (
        f"{path}, line 2: field '{column}': the {preset} preset needs column {column} "
        f"({role}); the record has {', '.join(second)}; give the file in that layout, or map "
        "its columns with --fields")


def test_memotrap_json_record_lacking_classes(tmp_path):
    path = tmp_path / "trap.jsonl"
    row = {"prompt": 'Say "early": Better late than', "classes": [" early", " never"],
           "answer_index": 0}
    path.write_text(json.dumps(row) + "\n"
                    + json.dumps({"prompt": row["prompt"], "answer_index": 0}) + "\n")
    with pytest.raises(DataError, match=r"trap.jsonl, line 2: field 'classes': the memotrap "
                                        r"preset needs column classes \(the two answers\); "
                                        r"the record has prompt, answer_index"):
        load_items(path)


def test_columns_missing_in_several_presets_are_not_guessed(tmp_path):
    """One column of two layouts each: neither preset is named; the plain error lists the
    columns."""
    path = tmp_path / "mixed.csv"
    path.write_text("sub_context,context_mod,question\na,b,c\n")
    with pytest.raises(DataError, match="no usable column mapping; columns found: "
                                        "sub_context, context_mod, question"):
        load_items(path)


def test_fields_may_supply_the_column_a_preset_lacks(tmp_path):
    path, _ = _without(tmp_path, "nq-swap")
    items = load_items(path, {"memory_answer": "org_context"}, preset="nq-swap")
    assert items[0].parametric_answer.startswith("<P> Frankenstein")


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
    (["--preset", "memotrap"], "field 'prompt': the memotrap preset needs columns prompt "
                               "(the prompt), classes (the two answers), answer_index (which "
                               "answer the prompt asks for); columns found: question"),
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
