"""`knowflow sft`, `curate` and `augment` from the command line, on a tiny random Llama saved
as a model folder: the run contract, one-line errors with exit code 2, nothing half-written."""

import json
import pathlib

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.data.instruction_rows import load_instructions
from knowflow.io import read_json, read_jsonl

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
