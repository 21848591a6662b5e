"""The tracker under torchrun (2 CPU processes, gloo): each process scores half the items, the
results are gathered, every process holds the same records, and metrics.jsonl has one record
per evaluation step (never duplicated)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import byte_tokenizer
from knowflow.data.suites import get_suite
from knowflow.store.readers import read_jsonl
from knowflow.train.tracker import RelianceTracker, TrackerConfig


@pytest.mark.slow
def test_tracker_under_torchrun(make_tiny_llama, tmp_path):
    script = Path(__file__).parents[1] / "ddp_sft_script.py"
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--nproc_per_node", "2", str(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 2, 4]
    ranks = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1)]
    assert [r["cf_acc"] for r in ranks[0]] == [r["cf_acc"] for r in ranks[1]]
    assert all(r["cf-capitals/n"] == 5 for r in records)
    # the gathered step-0 numbers equal one process scoring all five items
    tok = byte_tokenizer()
    single = RelianceTracker(tok, TrackerConfig(batch_size=2),
                             items={"cf-capitals": get_suite("cf-capitals", limit=5)})
    alone = single.measure(make_tiny_llama(tok))
    assert alone["cf_acc"] == records[0]["cf_acc"]
    assert alone["attn_context"] == pytest.approx(records[0]["attn_context"], abs=1e-5)
