"""`knowflow eval` under torchrun (2 CPU processes, gloo, through accelerate's PartialState):
each process scores its share of the items, rank 0 gathers them and writes the one run
folder, and the records equal a single process's."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import SHARP, byte_bpe, save_model_folder


@pytest.mark.slow
def test_eval_under_torchrun_equals_one_process(make_tiny_llama, tmp_path):
    tok = byte_bpe()
    model = save_model_folder(tmp_path / "model",
                              make_tiny_llama(tok, layers=2, **{**SHARP, "max_positions": 512}),
                              tok)
    bin_dir = Path(sys.executable).parent
    args = ["eval", "--model", str(model), "--suite", "cf-capitals,cf-world", "--limit", "5",
            "--scoring", "both", "--no-known-filter", "--device", "cpu", "--threads", "1"]
    two = subprocess.run([str(bin_dir / "torchrun"), "--nproc_per_node", "2",
                          str(bin_dir / "knowflow"), *args, "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("results: ") == 1, two.stdout   # rank 0 reports, rank 1 does not
    one = subprocess.run([str(bin_dir / "knowflow"), *args, "--out", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]

    def records(name: str) -> list[dict]:
        lines = (tmp_path / name / "items.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    alone, shared = records("one"), records("two")
    assert [r["id"] for r in shared] == [r["id"] for r in alone]       # every item, in order
    assert len(alone) == 10
    for a, b in zip(alone, shared, strict=True):
        assert b["generate_output"] == a["generate_output"]
        assert b["loglik_choice"] == a["loglik_choice"]
        for side in ("counterfactual", "parametric"):
            assert b[f"loglik_{side}_logprob"] == pytest.approx(
                a[f"loglik_{side}_logprob"], abs=1e-4)
    # one run folder, written once (rank 0): the summary's counts cover both processes' items
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert set(summary) == {"cf-capitals", "cf-world"}
    assert not list(tmp_path.glob("two*/rank*"))
