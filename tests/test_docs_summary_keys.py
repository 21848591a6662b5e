"""The keys the docs list for a `summary.json` are the keys a real run writes: the evaluation
metrics table and the finetuning summary of docs/concepts.md, and the data-quality counts of
docs/commands/index.md, each read from the page and checked against a run of `knowflow eval`
or `knowflow sft` on a tiny random Llama. A key added to the docs but not to the code (or
dropped from the code) fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.store.readers import read_json

DOCS = Path(__file__).resolve().parents[1] / "docs"
runner = CliRunner()
NAME = re.compile(r"`([a-z][a-z0-9_]*)`")


def section(page: str, heading: str) -> str:
    """The text of `page` under `heading`, up to the next heading of any level."""
    text = (DOCS / page).read_text()
    start = text.index(heading) + len(heading)
    end = re.search(r"^#", text[start:], re.M)
    return text[start:start + end.start()] if end else text[start:]


def metric_rows() -> dict[str, tuple[list[str], str]]:
    """The evaluation metrics table: {first name: (every name in the first cell, the rest of
    the row)}, rows about one item or a nested block left out."""
    rows = {}
    for line in section("concepts.md", "## Evaluation metrics").splitlines():
        cells = line.split("|")
        if not line.startswith("| `") or "(per item" in cells[1] or "block" in cells[1]:
            continue
        names = NAME.findall(cells[1].split("(")[0])
        rows[names[0]] = (names, "|".join(cells[2:]))
    return rows


def expected_mode(row: str) -> set[str]:
    """The scoring modes whose summary holds a row's names, as its text says."""
    how = row.split("|")[1].strip()
    if how.startswith("generation"):
        return {"generate"}
    if "log-likelihood only" in how or "per token" in row:
        return {"loglik"}
    return {"generate", "loglik"}


def sft_summary_names() -> list[str]:
    """The names concepts.md lists for sft's summary, up to the ones only dynamic curation
    writes; `cf_acc_start` ... `cf_acc_fall` stands for the curve's six parts."""
    text = section("concepts.md", "## Reliance tracking during finetuning")
    listed = text[text.index("The summary (`summary.json`"):text.index("with dynamic curation")]
    parts = ("start", "peak", "peak_step", "final", "rise", "fall")
    return [n for n in NAME.findall(listed) if n != "summary"] + [f"cf_acc_{p}" for p in parts]


def quality_counts() -> list[str]:
    """The data-quality counts docs/commands/index.md says go into `summary.json`."""
    text = (DOCS / "commands" / "index.md").read_text()
    said = text[text.index("the count goes into"):].split("\n\n")[0]
    return [n for n in NAME.findall(said) if n.startswith("n_")]


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory) -> dict[str, dict]:
    """Summaries of real runs: eval on a file by log-likelihood (with the known filter) and by
    generation, eval on the graded suite, and a short sft."""
    root = tmp_path_factory.mktemp("keys")
    rows = [{"question": f"Where does Vol{i} live?", "context": f"Vol{i} lives in Kem{i}.",
             "counterfactual_answer": f"Kem{i}", "parametric_answer": f"Dor{i}" if i else "Kem0",
             "subject": f"Vol{i}"} for i in range(6)]  # item 0: its two answers coincide
    lines = [json.dumps(r) for r in rows]
    lines[1] = lines[1][:-1] + ', "subject": "Vol1"}'  # a key given twice
    (root / "items.jsonl").write_text("\n".join(lines) + "\n")
    train = [{"instruction": f"Where does Vol{i} live?", "input": f"Vol{i} lives in Kem{i}.",
              "output": f"Kem{i}", "kind": "C"} for i in range(8)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    model = str(tiny_model_dir)
    commands = {
        "loglik": ["eval", "--data", str(root / "items.jsonl"), "--scoring", "loglik",
                   "--known-filter"],
        "generate": ["eval", "--data", str(root / "items.jsonl"), "--scoring", "generate",
                     "--max-new-tokens", "4"],
        "graded": ["eval", "--suite", "cf-numeric", "--scoring", "both", "--limit", "6",
                   "--max-new-tokens", "4"],
        "sft": ["sft", "--data", str(root / "train.jsonl"), "--steps", "2", "--batch-size", "4",
                "--track", "cf-capitals", "--track-every", "1", "--track-limit", "2"]}
    summaries = {}
    for name, args in commands.items():
        out = root / name
        res = runner.invoke(app, [*args, "--model", model, "--out", str(out)],
                            catch_exceptions=False) if name != "sft" else runner.invoke(
            app, [*args, "--model", model, "--runs-dir", str(out)], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        folder = out if name != "sft" else next((out / "sft").iterdir())
        summaries[name] = read_json(folder / "summary.json")
    return summaries


def test_the_pages_list_what_this_test_reads():
    """The lists are found (a reworded page fails here, not silently as an empty list)."""
    assert {"cf_acc", "param_acc", "memorization_ratio", "n", "garbled_share",
            "outcome_context", "by_strength"} <= set(metric_rows())
    assert {"final_step", "n_dropped_too_long", "trainable_params"} <= set(sft_summary_names())
    assert quality_counts() == ["n_duplicate_keys", "n_skipped_same_answers",
                                "n_dropped_too_long"]


def test_every_documented_evaluation_metric_is_in_the_summary(runs):
    for first, (names, row) in metric_rows().items():
        for mode in expected_mode(row):
            summary = runs["graded"]["cf-numeric"][mode] if first == "by_strength" else \
                runs[mode]["items"][mode]
            missing = [n for n in names if n not in summary]
            assert not missing, f"{mode}: {missing} documented, not in {sorted(summary)}"


def test_every_summarized_metric_is_documented(runs):
    """The other way round: a key in the summary that concepts.md does not name."""
    documented = {n for names, _ in metric_rows().values() for n in names}
    for mode in ("loglik", "generate"):
        keys = {k.removesuffix("_ci") for k in runs[mode]["items"][mode]}
        extra = keys - documented - {"known", "known_by", *quality_counts()}
        assert not extra, f"{mode}: {sorted(extra)} in the summary, not in docs/concepts.md"


def test_the_data_quality_counts_are_in_the_summaries(runs):
    for name in quality_counts():
        if name == "n_dropped_too_long":
            assert runs["sft"][name] == 0
            continue
        for mode in ("loglik", "generate"):
            assert name in runs[mode]["items"][mode], (mode, name)
    assert runs["loglik"]["items"]["loglik"]["n_skipped_same_answers"] == 1
    assert runs["loglik"]["items"]["loglik"]["n_duplicate_keys"] == 1


def test_every_documented_sft_summary_key_is_in_the_summary(runs):
    missing = [n for n in sft_summary_names() if n not in runs["sft"]]
    assert not missing, f"{missing} documented, not in {sorted(runs['sft'])}"
