"""`knowflow probe heads` and `probe head-project` end to end on a tiny local model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from helpers import SHARP, byte_bpe, save_model_folder
from knowflow.cli import app
from knowflow.store.readers import read_json, read_jsonl

runner = CliRunner()


@pytest.fixture(scope="module")
def model_dir(make_tiny_llama, tmp_path_factory):
    tok = byte_bpe()
    return save_model_folder(tmp_path_factory.mktemp("tiny-llama"),
                             make_tiny_llama(tok, layers=2, **SHARP), tok)


def test_probe_heads_writes_a_run(model_dir, tmp_path):
    out = tmp_path / "heads"
    result = runner.invoke(app, ["probe", "heads", "--model", str(model_dir), "--suite",
                                 "cf-capitals,cf-world", "--limit", "2", "--prompt-format",
                                 "plain", "--set", "n_bootstrap=50", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = read_json(out / "summary.json")
    assert summary["n_examples"] == 4 and summary["rank_by"] == "mean"
    for entry in summary["context_heads"] + summary["memory_heads"]:
        assert set(entry) == {"layer", "head", "effect", "ci"}
    assert len(read_jsonl(out / "records.jsonl")) == 4 * 2 * 4
    assert (out / "figures" / "heads.png").exists()
    assert "context heads" in result.output


def test_probe_head_project_and_bad_input(model_dir, tmp_path):
    data = tmp_path / "facts.jsonl"
    data.write_text(json.dumps({"prompt": "The capital of France is", "subject": "France"})
                    + "\n")
    out = tmp_path / "hp"
    result = runner.invoke(app, ["probe", "head-project", "--model", str(model_dir), "--data",
                                 str(data), "--all", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = read_json(out / "summary.json")
    assert len(summary["head_rate"]) == 2 and len(summary["attn_rate"]) == 2
    assert (out / "figures" / "head-project.png").exists()
    bad = runner.invoke(app, ["probe", "heads", "--model", str(model_dir), "--suite", "nope",
                              "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and not (tmp_path / "x").exists()
    bad = runner.invoke(app, ["probe", "heads", "--model", str(model_dir), "--ablation",
                              "zero", "--out", str(tmp_path / "y")])
    assert bad.exit_code == 2 and "--rank-by:" in bad.output
