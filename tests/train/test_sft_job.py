"""train.sft_job.run_sft_job on a tiny random Llama (a few steps): the run folder it writes,
the summary it returns, the progress it reports, and resuming an interrupted job."""

import shutil

import pytest

from knowflow.data.instruction_rows import load_instructions
from knowflow.data.instructions import MixtureConfig, builtin_mixture
from knowflow.store.files import atomic_write_jsonl
from knowflow.store.readers import read_jsonl
from knowflow.train.sft import SFTConfig
from knowflow.train.sft_job import SFTJobConfig, run_sft_job
from knowflow.train.tracker import TrackerConfig


def _cfg(train: str) -> SFTJobConfig:
    return SFTJobConfig(
        model="given", mixture=MixtureConfig(size=16, seed=2),
        sft=SFTConfig(train=train, steps=3, batch_size=4, lr=1e-2, save_every=1,
                      save_limit=None, max_length=512),
        track=TrackerConfig(suites=("cf-capitals",), every=1, limit=2, batch_size=2))


def test_the_job_writes_its_folder_and_summarizes_the_curve(make_tiny_llama, tmp_path, tok):
    cfg = _cfg("lora")
    seen = []
    summary = run_sft_job(cfg, tmp_path, progress=lambda s, n: seen.append((s, n)),
                          model=make_tiny_llama(tok), tokenizer=tok)
    assert load_instructions(tmp_path / "data.jsonl") == builtin_mixture(cfg.mixture)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3] and seen == [(1, 3), (2, 3), (3, 3)]
    assert (tmp_path / "model" / "adapter_config.json").is_file()  # LoRA: the adapter only
    assert (tmp_path / "model" / "tokenizer_config.json").is_file()
    assert summary["steps"] == 3 and summary["n_examples"] == 16
    assert summary["n_dropped_too_long"] == 0
    assert 0 < summary["trainable_params"] < summary["total_params"]
    assert summary["cf_acc_start"] == records[0]["cf_acc"]
    assert summary["cf_acc_final"] == records[-1]["cf_acc"]
    assert summary["n_evaluations"] == 4
    assert summary["tracking_seconds"] == round(sum(r["eval_seconds"] for r in records), 1)


def test_an_interrupted_job_resumes_from_its_last_checkpoint(make_tiny_llama, tmp_path, tok):
    cfg = _cfg("full")
    done = run_sft_job(cfg, tmp_path, model=make_tiny_llama(tok), tokenizer=tok)
    before = read_jsonl(tmp_path / "metrics.jsonl")
    # what a kill after step 2 leaves: no step-3 checkpoint, no model, records up to step 2
    shutil.rmtree(tmp_path / "checkpoints" / "checkpoint-3")
    shutil.rmtree(tmp_path / "model")
    atomic_write_jsonl(tmp_path / "metrics.jsonl", before[:3])
    seen = []
    # another random model: only loading checkpoint-2 can give the same curve
    again = run_sft_job(cfg, tmp_path, progress=lambda s, n: seen.append(s),
                        model=make_tiny_llama(tok, seed=5), tokenizer=tok)
    after = read_jsonl(tmp_path / "metrics.jsonl")
    assert seen == [3]
    assert after[:3] == before[:3]  # kept, not re-evaluated (same eval_seconds)
    assert after[3]["cf_acc"] == before[3]["cf_acc"]
    assert after[3]["attn_context"] == pytest.approx(before[3]["attn_context"], abs=1e-6)
    assert (tmp_path / "model" / "config.json").is_file()
    assert again["steps"] == done["steps"] == 3
    assert again["cf_acc_peak"] == done["cf_acc_peak"]
