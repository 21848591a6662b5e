"""inversion-tiny-heads end to end on a tiny world, and its pieces against references: the
tracking heads against a hand correlation, the peak's weights against the tracker's record,
steering with no heads against the unsteered model."""

import numpy as np
import pytest
import torch

from knowflow.evaluation.steer_heads import HeadSteering
from knowflow.experiments.inversion_tiny.heads import (
    InversionTinyHeadsConfig,
    accuracy,
    finetune_mixed,
    tracking_heads,
)
from knowflow.experiments.inversion_tiny.model import answer_logits, encode
from knowflow.experiments.runner import build_config, run_experiment
from knowflow.store.readers import read_jsonl

TINY = {"tiny.world.mem_train": 8, "tiny.world.mem_eval": 4, "tiny.world.unk_train": 8,
        "tiny.world.unk_eval": 4, "tiny.world.scratch": 6, "tiny.world.n_values": 6,
        "tiny.model.layers": 2, "tiny.model.heads": 2, "tiny.model.d_model": 16,
        "tiny.model.d_ff": 32, "tiny.pretrain.steps": 5, "tiny.pretrain.eval_every": 5,
        "tiny.pretrain.batch_size": 4, "tiny.mixture.size": 20, "tiny.sft.steps": 6,
        "tiny.track.every": 2, "tiny.sft.batch_size": 4, "tiny.sft.save_every": 3,
        "seeds": "0", "ks": "1,2", "gammas": "2", "n_bootstrap": 50}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / "cache"))


def test_tracking_heads_by_hand():
    cf = [0.1, 0.5, 0.9, 0.4]
    up = [0.2, 0.6, 1.0, 0.5]                   # tracks cf exactly
    down = [1.0, 0.6, 0.2, 0.7]
    records = [{"cf_acc": c, "attn_context_heads": [[u, d], [0.3, 0.3]]}
               for c, u, d in zip(cf, up, down, strict=True)]
    assert tracking_heads(records, 0.5) == [(0, 0)]
    assert np.corrcoef(down, cf)[0, 1] < 0


def test_snapshots_are_the_recorded_models(tmp_path):
    cfg = build_config("inversion-tiny-heads", TINY)
    model, tok, records, states, evals = finetune_mixed(cfg.tiny, 0, tmp_path / "job")
    assert len(states) == len(records) and [r["step"] for r in records] == [0, 2, 4, 6]
    first = type(model)(model.config).eval()
    first.load_state_dict(states[1])
    batch = encode(tok, evals["cf"])
    with torch.no_grad():
        pred = answer_logits(first, batch)[0].argmax(-1)
    acc = float((pred == batch["answer"]).float().mean())
    assert acc == pytest.approx(records[1]["cf_acc"])
    assert accuracy(model, tok, evals["cf"], HeadSteering()) == accuracy(model, tok, evals["cf"])
    assert accuracy(model, tok, evals["cf"]) == pytest.approx(records[-1]["cf_acc"])


def test_run_writes_per_seed_records(tmp_path):
    res = run_experiment("inversion-tiny-heads", TINY, runs_dir=tmp_path / "runs")
    (seed,) = read_jsonl(res.out_dir / "metrics.jsonl")
    assert seed["seed"] == 0 and seed["overlap"] <= len(seed["context_heads"])
    st = seed["steering"]
    assert st["n_calibration"] + st["n_held_out"] == 8
    assert len(st["heads"]) in (0, 1, 2)
    assert res.summary["mean_overlap"] == seed["overlap"]
    assert (res.out_dir / "figures" / "tiny_heads.png").exists()
    assert not (res.out_dir / "job-seed0").exists()
    assert isinstance(build_config("inversion-tiny-heads", {}), InversionTinyHeadsConfig)
