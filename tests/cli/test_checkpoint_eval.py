"""`knowflow eval --model` takes every checkpoint `knowflow sft` writes: the run folder, its
model/ and each checkpoints/checkpoint-N, LoRA (the default) included; the adapter is merged
into its base, which must score as the PEFT-wrapped model does."""

import json

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.lens.load import load_model
from knowflow.store.readers import read_json

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


def test_adapter_of_a_relative_base_loads_from_another_folder(tmp_path, tiny_model_dir,
                                                              monkeypatch):
    """A LoRA run trained with `--model base` (a relative folder) is evaluated from elsewhere:
    the adapter's recorded base is found beside the run, and loads as it did where it was
    trained."""
    import shutil

    work = tmp_path / "work"
    shutil.copytree(tiny_model_dir, work / "base")
    monkeypatch.chdir(work)
    rows = [{"instruction": f"Where does Vol{i} live?", "input": f"Vol{i} lives in Kem{i}.",
             "output": f"Kem{i}"} for i in range(4)]
    (work / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = runner.invoke(app, ["sft", "--model", "base", "--data", "train.jsonl", "--steps", "1",
                              "--batch-size", "4", "--no-track", "--lr", "0.05"])
    assert res.exit_code == 0, res.output
    (run,) = (work / "runs" / "sft").iterdir()
    ids = torch.tensor([[3, 5, 7, 11]])
    with torch.no_grad():
        here = load_model(str(run / "model"), device="cpu")[0](ids).logits
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    relative = work.relative_to(tmp_path) / "base"  # what a relative base records: not here
    assert not relative.exists()
    for target in (run, run / "model"):
        model, _ = load_model(str(target), device="cpu")
        with torch.no_grad():
            assert torch.allclose(model(ids).logits, here, atol=1e-5)
