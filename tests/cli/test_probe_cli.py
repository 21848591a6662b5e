"""`knowflow probe ...` end to end on a tiny local model, and its one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from helpers import SHARP, byte_bpe, save_model_folder
from knowflow.cli import app
from knowflow.store.readers import read_json, read_jsonl

runner = CliRunner()
FACTS = [
    {"prompt": "The capital of France is", "subject": "France", "relation": "The capital of",
     "attributes": ["Paris", "French"]},
    {"prompt": "The Eiffel Tower is located in the city of", "subject": "The Eiffel Tower",
     "answer": "Paris"},
]


@pytest.fixture(scope="module")
def model_dir(make_tiny_llama, tmp_path_factory):
    tok = byte_bpe()
    return save_model_folder(tmp_path_factory.mktemp("tiny-llama"),
                             make_tiny_llama(tok, layers=4, **{**SHARP, "max_positions": 512}),
                             tok)  # a window the suites' prompts fit in


@pytest.fixture()
def data(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(f) + "\n" for f in FACTS))
    return path


def _run(*args):
    result = runner.invoke(app, ["probe", *map(str, args)])
    return result, result.output


def test_knockout_writes_a_run(model_dir, data, tmp_path):
    out = tmp_path / "run"
    result, output = _run("knockout", "--model", model_dir, "--data", data, "--all",
                          "--window", 2, "--out", out)
    assert result.exit_code == 0, output
    summary = read_json(out / "summary.json")
    assert set(summary) == {"subject", "non_subject", "last"}
    for row in summary.values():
        assert len(row["mean_rel_change"]) == 4
        assert row["most_negative_layer"] in range(4)
        assert row["n_examples"] == 2
    records = read_jsonl(out / "records.jsonl")
    assert len(records) == 2 * 3 * 4
    assert (out / "figures" / "knockout.png").stat().st_size > 1000
    assert (out / "report.html").exists()
    assert read_json(out / "config.json")["config"]["window"] == 2
    assert "most negative layer" in output


@pytest.mark.parametrize("kind,extra,figure", [
    ("sublayer", ["--window", 1, "--sublayer", "mlp"], "sublayer.png"),
    ("project", ["--top-k", 5], "projection.png")])
def test_other_probes_write_runs(model_dir, data, tmp_path, kind, extra, figure):
    out = tmp_path / kind
    result, output = _run(kind, "--model", model_dir, "--data", data, "--all", *extra,
                          "--out", out)
    assert result.exit_code == 0, output
    assert (out / "figures" / figure).exists()
    assert read_jsonl(out / "records.jsonl")


def test_attention_probe(model_dir, tmp_path):
    data = tmp_path / "ctx.jsonl"
    prompt = "Context: the capital of France is Lyon. Question: what is the capital of France?"
    data.write_text(json.dumps({"prompt": prompt,
                                "context": "the capital of France is Lyon."}) + "\n")
    out = tmp_path / "att"
    result, output = _run("attention", "--model", model_dir, "--data", data, "--out", out)
    assert result.exit_code == 0, output
    summary = read_json(out / "summary.json")
    assert len(summary["mean_mass"]) == 4 and len(summary["mean_mass"][0]) == 4
    assert all(0.0 <= v <= 1.0 for row in summary["mean_mass"] for v in row)


def _one_line_error(result, output, *needles):
    assert result.exit_code == 2, output
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in output, output


def test_subject_not_in_prompt(model_dir, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(FACTS[0]) + "\n" + json.dumps(
        {"prompt": "The capital of Italy is", "subject": "Spain"}) + "\n")
    result, output = _run("knockout", "--model", model_dir, "--data", data,
                          "--out", tmp_path / "x")
    _one_line_error(result, output, "line 2", "subject", "does not occur")
    assert not (tmp_path / "x").exists()


def test_window_larger_than_the_model(model_dir, data, tmp_path):
    result, output = _run("knockout", "--model", model_dir, "--data", data, "--window", 9,
                          "--out", tmp_path / "x")
    _one_line_error(result, output, "window", "larger than the model (4 layers)")
    assert not (tmp_path / "x").exists()


def test_unsupported_architecture(data, tmp_path):
    from transformers import MambaConfig, MambaForCausalLM

    path = tmp_path / "mamba"
    MambaForCausalLM(MambaConfig(vocab_size=len(byte_bpe()), hidden_size=16,
                                 num_hidden_layers=2, state_size=4)).save_pretrained(path)
    byte_bpe().save_pretrained(path)
    result, output = _run("knockout", "--model", path, "--data", data, "--out", tmp_path / "x")
    _one_line_error(result, output, "unsupported architecture MambaForCausalLM")


def test_unknown_override_and_source(model_dir, data, tmp_path):
    result, output = _run("knockout", "--model", model_dir, "--data", data,
                          "--set", "windoww=3")
    _one_line_error(result, output, "windoww")
    result, output = _run("knockout", "--model", model_dir, "--data", data, "--window", 2,
                          "--source", "verbs", "--out", tmp_path / "y")
    _one_line_error(result, output, "unknown source set 'verbs'")


def test_attention_probe_needs_a_context(model_dir, data):
    result, output = _run("attention", "--model", model_dir, "--data", data)
    _one_line_error(result, output, "no context")


def test_attention_probe_over_a_suite(model_dir, tmp_path):
    out = tmp_path / "suite"
    result, output = _run("attention", "--model", model_dir, "--suite", "cf-capitals",
                          "--limit", 3, "--out", out)
    assert result.exit_code == 0, output
    records = read_jsonl(out / "records.jsonl")
    assert len(records) == 3 and all(r["n_context_tokens"] > 0 for r in records)
    assert read_json(out / "config.json")["data"] == "suite:cf-capitals"


def test_recall_probe_over_a_suite(model_dir, tmp_path):
    args = ["knockout", "--model", model_dir, "--suite", "cf-capitals", "--limit", 2,
            "--window", 2]
    # a random tiny model knows no capital: probing only known facts leaves nothing
    result, output = _run(*args, "--out", tmp_path / "x")
    _one_line_error(result, output, "none of the 2 facts")
    assert not (tmp_path / "x").exists()
    result, output = _run(*args, "--all", "--out", tmp_path / "y")
    assert result.exit_code == 0, output
    summary = read_json(tmp_path / "y" / "summary.json")
    assert set(summary) >= {"subject", "non_subject", "last"}
