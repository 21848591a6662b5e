"""`knowflow sft`, `curate` and `augment` from the command line, on a tiny random Llama saved
as a model folder: the run contract, one-line errors with exit code 2, nothing half-written."""

import json
import pathlib

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.data.instruction_rows import load_instructions
from knowflow.store.readers import read_json, read_jsonl

runner = CliRunner()


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [{"instruction": f"Question: Where does Vol{i} live?", "input": f"Vol{i} lives in "
             f"Kem{i}.", "output": f"Kem{i}", "kind": "C+S" if i % 2 else "C",
             "relation": "lives_in"} for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sft_writes_a_run(tmp_path, model_dir, data_file):
    res = runner.invoke(app, ["sft", "--model", str(model_dir), "--data", str(data_file),
                              "--steps", "3", "--batch-size", "4", "--track", "cf-capitals",
                              "--track-every", "1", "--track-limit", "2", "--max-length", "512",
                              "--runs-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "sft").iterdir()
    for name in ("config.json", "metrics.jsonl", "summary.json", "data.jsonl", "report.html",
                 "figures/reliance.png", "model/adapter_config.json"):
        assert (run / name).exists(), name
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3]
    summary = read_json(run / "summary.json")
    assert summary["steps"] == 3 and summary["n_examples"] == 12
    assert read_json(run / "config.json")["sft"]["steps"] == 3
    again = runner.invoke(app, ["sft", "--resume", "--runs-dir", str(tmp_path)])
    assert again.exit_code == 2 and "no unfinished run" in again.output


@pytest.mark.parametrize("args,message", [
    (["--lora-targets", "q_proj,nope"], "unknown target module 'nope'"),
    (["--train", "half"], "half"),
    (["--steps", "0"], "steps"),
])
def test_sft_bad_options(tmp_path, model_dir, data_file, args, message):
    res = runner.invoke(app, ["sft", "--model", str(model_dir), "--data", str(data_file),
                              "--runs-dir", str(tmp_path), *args])
    assert res.exit_code == 2 and message in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*.json*"))


def test_sft_malformed_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction": "a", "output": "b"}\n{"instruction": "a", "input": "c"}\n')
    res = runner.invoke(app, ["sft", "--data", str(bad), "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 2
    assert "bad.jsonl, line 2: field 'output'" in res.output
    assert not (tmp_path / "runs").exists()


def test_curate_and_augment(tmp_path, model_dir, data_file):
    out = tmp_path / "curated.jsonl"
    res = runner.invoke(app, ["curate", "--model", str(model_dir), "--data", str(data_file),
                              "--out", str(out), "--drop", "0.25"])
    assert res.exit_code == 0, res.output
    assert len(load_instructions(out)) == 9
    scores = read_jsonl(tmp_path / "curated.scores.jsonl")
    assert sum(s["dropped"] for s in scores) == 3 and (tmp_path / "curated.png").exists()
    aug = tmp_path / "aug.jsonl"
    res = runner.invoke(app, ["augment", "--data", str(data_file), "--out", str(aug),
                              "--ratio", "0.5"])
    assert res.exit_code == 0, res.output
    rows = load_instructions(aug)
    added = [r for r in rows if r.extra.get("augmented")]
    assert len(rows) == 18 and len(added) == 6
    res = runner.invoke(app, ["augment", "--data", str(data_file), "--out", str(aug),
                              "--ratio", "-1"])
    assert res.exit_code == 2 and "ratio" in res.output


def test_sft_resume_after_an_interruption(tmp_path, model_dir, data_file):
    import shutil

    args = ["sft", "--model", str(model_dir), "--data", str(data_file), "--steps", "4",
            "--batch-size", "4", "--track", "cf-capitals", "--track-every", "1",
            "--track-limit", "2", "--max-length", "512", "--set", "sft.save_every=2",
            "--set", "sft.save_limit=null", "--runs-dir", str(tmp_path)]
    assert runner.invoke(app, args).exit_code == 0
    (run,) = (tmp_path / "sft").iterdir()
    before = read_jsonl(run / "metrics.jsonl")
    # what an interruption after step 3 leaves: no summary, no step-4 checkpoint, records to 3
    (run / "summary.json").unlink()
    shutil.rmtree(run / "checkpoints" / "checkpoint-4")
    shutil.rmtree(run / "model")
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in before[:4]))
    res = runner.invoke(app, ["sft", "--resume", "--runs-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    after = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in after] == [0, 1, 2, 3, 4]
    assert [r["cf_acc"] for r in after] == [r["cf_acc"] for r in before]
    assert [r["attn_context"] for r in after] == pytest.approx([r["attn_context"]
                                                                for r in before], abs=1e-6)
    assert read_json(run / "summary.json")["steps"] == 4


def test_sft_reads_its_data_file_once(tmp_path, model_dir, data_file, monkeypatch):
    """`knowflow sft --data F` reads F once: the config check, the duplicate-key warning, the
    job's rows and the summary's duplicate-key count share one reading."""
    data = tmp_path / "dup.jsonl"
    lines = data_file.read_text().splitlines()
    lines[3] = lines[3][:-1] + ', "output": "Kem3"}'  # line 4 gives "output" twice
    data.write_text("\n".join(lines) + "\n")
    reads = []
    real = pathlib.Path.read_bytes

    def counting(self):
        if self.resolve() == data.resolve():
            reads.append(self)
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", counting)
    res = runner.invoke(app, ["sft", "--model", str(model_dir), "--data", str(data), "--steps",
                              "1", "--batch-size", "4", "--no-track", "--max-length", "512",
                              "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert len(reads) == 1
    (run,) = (tmp_path / "runs" / "sft").iterdir()
    assert read_json(run / "summary.json")["n_duplicate_keys"] == 1
    assert len(read_jsonl(run / "data.jsonl")) == 12


# --- your own conflict file, the Trainer's loggers, why it stopped ----------------------

TRACK_FIELDS = "context=passage,question=q,answer=ctx_answer,memory_answer=true_answer"


@pytest.fixture(scope="module")
def base_gpt2_dir(tmp_path_factory):
    """A tiny random GPT-2 whose tokenizer has no chat template (a base model)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from helpers import byte_bpe, save_model_folder

    tok = byte_bpe()
    assert tok.chat_template is None
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4,
                                       n_positions=1024, bos_token_id=0, eos_token_id=1,
                                       pad_token_id=2))
    return save_model_folder(tmp_path_factory.mktemp("base-gpt2"), model, tok)


@pytest.fixture(scope="module")
def conflict_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("conflicts") / "my_conflicts.csv"
    rows = [("France", "Paris", "Lyon"), ("Italy", "Rome", "Milan"),
            ("Japan", "Tokyo", "Osaka"), ("Spain", "Madrid", "Seville")]
    path.write_text("passage,q,ctx_answer,true_answer\n" + "".join(
        f"The capital of {c} is {fake}.,What is the capital of {c}?,{fake},{true}\n"
        for c, true, fake in rows))
    return path


def test_sft_tracks_a_users_file_and_reports_to_tensorboard(tmp_path, base_gpt2_dir,
                                                            conflict_csv, data_file):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    res = runner.invoke(app, ["sft", "--model", str(base_gpt2_dir), "--data", str(data_file),
                              "--train", "full", "--prompt-format", "plain", "--steps", "4",
                              "--batch-size", "4", "--track", f"{conflict_csv},cf-capitals",
                              "--track-fields", TRACK_FIELDS, "--track-every", "2",
                              "--track-limit", "3", "--report-to", "tensorboard",
                              "--runs-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "sft").iterdir()
    records = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 2, 4]
    assert all(r["my_conflicts/n"] == 3 and r["cf-capitals/n"] == 3 and r["n"] == 6
               for r in records)
    config = read_json(run / "config.json")
    assert config["report_to"] == ["tensorboard"] and config["track"]["fields"] == TRACK_FIELDS
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/reliance/cf_acc")] == [
        (r["step"], pytest.approx(r["cf_acc"])) for r in records]
    assert [e.step for e in events.Scalars("train/reliance/my_conflicts/cf_acc")] == [0, 2, 4]
    assert events.Scalars("train/loss")
    # two runs overlaid on one page: the sft run and a copy of its tracker records
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text())
    page = tmp_path / "both.html"
    res = runner.invoke(app, ["report", str(run), str(other), "--out", str(page)])
    assert res.exit_code == 0, res.output
    assert 'id="overlay"' in page.read_text() and "tracker other" in page.read_text()


@pytest.mark.parametrize("args,message", [
    (["--report-to", "nope"], "--report-to: unknown logger 'nope'"),
    (["--report-to", "none,tensorboard"], "'none' goes alone"),
    (["--track", "no-such-suite"], "unknown suite 'no-such-suite' and no such file"),
    (["--track-fields", "context"], "--track-fields: 'context' is not FIELD=COLUMN"),
])
def test_sft_refuses_bad_tracking_and_loggers(tmp_path, model_dir, data_file, args, message):
    res = runner.invoke(app, ["sft", "--model", str(model_dir), "--data", str(data_file),
                              "--runs-dir", str(tmp_path / "runs"), *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_sft_refuses_a_malformed_tracked_file(tmp_path, model_dir, data_file):
    bad = tmp_path / "mine.jsonl"
    bad.write_text(json.dumps({"context": "c", "question": "q", "answer": "x",
                               "memory_answer": "b"}) + "\n{\"context\": \"c\", \"answer\": 1}\n")
    res = runner.invoke(app, ["sft", "--model", str(model_dir), "--data", str(data_file),
                              "--track", str(bad), "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 2 and "mine.jsonl, line 2: field" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_sft_says_when_and_why_it_stopped(tmp_path, monkeypatch):
    """The CLI prints the summary's `stopped_early` reason (the tracker's own test,
    tests/train/test_tracker_own_trainer.py, checks the rule and the sentence)."""
    from types import SimpleNamespace

    import knowflow.api

    why = ("stopped at step 40: counterfactual accuracy 0.31 fell 0.22 below its peak 0.53 "
           "(step 20); --stop-drop 0.2")
    summary = {"steps": 40, "train_loss": 1.0, "seconds": 1.0, "cf_acc_start": 0.4,
               "cf_acc_peak": 0.53, "cf_acc_peak_step": 20, "cf_acc_final": 0.31,
               "stopped_early": {"step": 40, "reason": why}}
    monkeypatch.setattr(knowflow.api, "finetune", lambda *a, **k: SimpleNamespace(
        summary=summary, out_dir=tmp_path, config={}))
    res = runner.invoke(app, ["sft", "--stop-drop", "0.2", "--runs-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert why in " ".join(res.output.split())
