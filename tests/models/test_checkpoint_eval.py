"""`knowflow eval --model` takes every checkpoint `knowflow sft` writes: the run folder, its
model/ and each checkpoints/checkpoint-N, LoRA (the default) included; the adapter is merged
into its base, which must score as the PEFT-wrapped model does."""

import json

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.io import read_json
from knowflow.models.hf import load_model

runner = CliRunner()


def test_eval_accepts_what_sft_wrote(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = [{"instruction": f"Question: Where does Vol{i} live?", "input": f"Vol{i} lives in "
             f"Kem{i}.", "output": f"Kem{i}"} for i in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the "
              f"capital of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"}
             for i in range(3)]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    res = runner.invoke(app, ["sft", "--model", str(tiny_model_dir), "--data", "train.jsonl",
                              "--steps", "2", "--batch-size", "4", "--no-track", "--lr", "0.05",
                              "--max-length", "512", "--set", "sft.save_every=1"])
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "runs" / "sft").iterdir()
    for i, model in enumerate([run, run / "model", run / "checkpoints" / "checkpoint-1"]):
        res = runner.invoke(app, ["eval", "--model", str(model), "--data", "items.jsonl",
                                  "--scoring", "loglik", "--no-known-filter", "--out", f"e{i}"])
        assert res.exit_code == 0, res.output
        assert read_json(tmp_path / f"e{i}" / "summary.json")["items"]["loglik"]["n"] == 3

    merged, tok = load_model(str(run / "checkpoints" / "checkpoint-2"), device="cpu")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    wrapped = PeftModel.from_pretrained(base, str(run / "checkpoints" / "checkpoint-2")).eval()
    ids = torch.tensor([tok("Vol3 lives in Kem3.")["input_ids"]])
    with torch.no_grad():
        want = wrapped(ids).logits
        assert torch.allclose(merged(ids).logits, want, atol=1e-4)
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()(ids).logits
        assert not torch.allclose(plain, want, atol=1e-4)  # the adapter changed something

    (run / "checkpoints" / "checkpoint-1" / "adapter_model.safetensors").unlink()
    res = runner.invoke(app, ["eval", "--model", str(run / "checkpoints" / "checkpoint-1"),
                              "--data", "items.jsonl", "--out", "e9"])
    assert res.exit_code == 2 and "without its weights" in res.output, res.output
    assert not (tmp_path / "e9").exists()
