"""Prompts longer than the model's window (never silently probed, curated or trained on, nor
an IndexError deep inside): probe and curate refuse them naming the example or row before
anything is written; sft leaves longer rows out, as it does rows longer than max_length, with
max_length resolved to the window and recorded."""

import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from typer.testing import CliRunner

from helpers import byte_bpe, save_model_folder
from knowflow.cli import app
from knowflow.store.readers import read_json

runner = CliRunner()
WINDOW = 64


@pytest.fixture(scope="module")
def short_gpt2(tmp_path_factory):
    """A tiny random GPT-2 that reads 64 positions, its tokenizer without a chat template."""
    tok = byte_bpe()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4,
                                       n_positions=WINDOW, bos_token_id=0, eos_token_id=1))
    return save_model_folder(tmp_path_factory.mktemp("short-gpt2"), model, tok)


def _rows(path, n_long: int):
    rows = [{"instruction": f"Where does Vol{i} live?", "input": f"Vol{i} lives in Kem{i}.",
             "output": f"Kem{i}"} for i in range(6)]
    for i in range(n_long):
        rows[i]["input"] = "Vol lives far away in the city of Kem. " * 12
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_probe_refuses_a_prompt_past_the_window_before_writing(tmp_path, short_gpt2):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "The capital of France is " * 20 + "the city of",
                                "subject": "France", "answer": "Paris"}) + "\n")
    res = runner.invoke(app, ["probe", "knockout", "--model", str(short_gpt2), "--data",
                              str(data), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "longer than the model's window (64)" in res.output
    assert not (tmp_path / "out").exists()


def test_curate_refuses_a_row_past_the_window_naming_it(tmp_path, short_gpt2):
    data = _rows(tmp_path / "rows.jsonl", n_long=1)
    res = runner.invoke(app, ["curate", "--model", str(short_gpt2), "--data", str(data),
                              "--out", str(tmp_path / "kept.jsonl")])
    assert res.exit_code == 2, res.output
    assert "row 1:" in res.output and "longer than the model's window (64)" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]


def test_sft_leaves_rows_past_the_window_out(tmp_path, short_gpt2):
    data = _rows(tmp_path / "rows.jsonl", n_long=2)
    res = runner.invoke(app, ["sft", "--model", str(short_gpt2), "--data", str(data),
                              "--steps", "1", "--batch-size", "2", "--no-track",
                              "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "runs" / "sft").iterdir()
    summary = read_json(run / "summary.json")
    assert summary["max_length"] == WINDOW  # the job's 256, cut to what the model reads
    assert summary["n_dropped_too_long"] == 2 and summary["n_examples"] == 4
