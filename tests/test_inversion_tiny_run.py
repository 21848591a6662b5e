"""inversion-tiny end to end on a tiny world: pretraining cache, finetuning modes, the run
contract, resume after an interruption, and bad input."""

import pytest
import torch

from knowflow.errors import ConfigError
from knowflow.experiments.inversion_tiny import ARMS, InversionTinyConfig
from knowflow.experiments.runner import build_config, run_experiment
from knowflow.io import read_json, read_jsonl
from knowflow.train.pretrain import (
    PretrainConfig,
    TinyModelConfig,
    load_pretrained,
    pretrained_path,
)
from knowflow.train.tiny_sft import TinySFTConfig, finetune
from knowflow.worlds.tiny_world import (
    Mixture,
    TinyWorldConfig,
    evaluation_sets,
    finetuning_set,
    make_world,
)

WORLD = TinyWorldConfig(n_relations=2, n_values=6, mem_train=8, mem_eval=4, unk_train=8,
                        unk_eval=4, scratch=6, context_facts=2)
MODEL = TinyModelConfig(layers=2, heads=2, d_model=16, d_ff=32)
PRE = PretrainConfig(max_steps=5, min_steps=1, eval_every=5, batch_size=4)
TINY = {"world.mem_train": 8, "world.mem_eval": 4, "world.unk_train": 8, "world.unk_eval": 4,
        "world.scratch": 6, "world.n_values": 6, "model.layers": 2, "model.heads": 2,
        "model.d_model": 16, "model.d_ff": 32, "pretrain.max_steps": 5, "pretrain.min_steps": 1,
        "pretrain.eval_every": 5, "pretrain.batch_size": 4, "mixture.n": 20,
        "sft.steps": 5, "sft.eval_every": 1, "sft.batch_size": 4, "sft.checkpoint_every": 1,
        "seeds": "0,1", "workers": 1}
RECORD_KEYS = {"step", "cf_acc", "param_acc", "cs_acc", "c_acc", "recall_acc", "attn_context",
               "attn_subject", "loss", "arm", "seed"}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / "cache"))


def test_pretrained_checkpoint_is_cached_atomically(tmp_path):
    path = pretrained_path(WORLD, MODEL, PRE, seed=0)
    assert path.parent.parent == tmp_path / "cache"
    stamp = (path / "pretrain.json").stat().st_mtime_ns
    assert pretrained_path(WORLD, MODEL, PRE, seed=0) == path
    assert (path / "pretrain.json").stat().st_mtime_ns == stamp  # loaded, not retrained
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp folder left
    model, tok, info = load_pretrained(path)
    assert model.config.num_hidden_layers == 2 and info["steps"] == 5
    assert model.config._attn_implementation == "eager"
    assert pretrained_path(WORLD, MODEL, PRE, seed=1) != path


def _setup(seed=0):
    torch.manual_seed(seed)  # LoRA adapters start random (the experiment seeds each job)
    world = make_world(WORLD, seed)
    model, tok, _ = load_pretrained(pretrained_path(WORLD, MODEL, PRE, seed))
    return world, model, tok, finetuning_set(world, Mixture(20, 0.3, 0.5, 0.2, 4), seed), \
        evaluation_sets(world, seed)


def test_qk_only_changes_only_queries_and_keys():
    world, model, tok, train, evals = _setup()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    finetune(model, tok, train, evals, TinySFTConfig(steps=3, eval_every=3, train="qk",
                                                     lr=1e-2, batch_size=4), seed=0)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.endswith(("q_proj.weight", "k_proj.weight")) for k in changed)


def test_lora_trains_adapters_only():
    world, model, tok, train, evals = _setup()
    records = finetune(model, tok, train, evals, TinySFTConfig(steps=2, eval_every=1,
                                                               train="lora", batch_size=4),
                       seed=0)
    assert [r["step"] for r in records] == [0, 1, 2]


def test_resume_after_interruption_continues_the_same_curve(tmp_path):
    cfg = TinySFTConfig(steps=6, eval_every=1, checkpoint_every=2, batch_size=4, lr=1e-2,
                        train="lora")
    world, model, tok, train, evals = _setup()
    full = finetune(model, tok, train, evals, cfg, seed=0)
    ckpt = tmp_path / "ft.pt"
    world, model, tok, train, evals = _setup()
    cut = finetune(model, tok, train, evals, cfg, seed=0, checkpoint=ckpt,
                   stop=lambda step: step == 5)  # interrupted; last checkpoint at step 4
    assert len(cut) == 6 and ckpt.exists()
    world, model, tok, train, evals = _setup()  # a fresh process would start from here
    resumed = finetune(model, tok, train, evals, cfg, seed=0, checkpoint=ckpt)
    assert [r["step"] for r in resumed] == list(range(7))
    assert resumed == full


def test_tiny_run_writes_every_record(tmp_path):
    result = run_experiment("inversion-tiny", TINY, runs_root=tmp_path / "runs")
    run_dir = result.run_dir
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.html"):
        assert (run_dir / name).is_file(), name
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert len(records) == len(ARMS) * 2 * 6  # arms x seeds x evaluations (step 0 included)
    for rec in records:
        assert set(rec) >= RECORD_KEYS
        assert len(rec["attn_context"]) == len(rec["attn_subject"]) == 2  # one per layer
        assert 0 <= sum(rec["attn_context"]) / 2 <= 1
    summary = read_json(run_dir / "summary.json")
    for arm in ARMS:
        row = summary[arm]
        cf_mean = [sum(r["cf_acc"] for r in records if r["arm"] == arm and r["step"] == s) / 2
                   for s in range(6)]
        assert row["cf_acc_start"] == pytest.approx(cf_mean[0])
        assert row["cf_acc_peak"] == pytest.approx(max(cf_mean))
        assert row["cf_acc_final"] == pytest.approx(cf_mean[-1])
        assert cf_mean[row["cf_acc_peak_step"]] == pytest.approx(max(cf_mean))
        assert row["seeds"] == [0, 1]
        for i, seed in enumerate((0, 1)):
            cf = [r["cf_acc"] for r in records if r["arm"] == arm and r["seed"] == seed]
            assert row["cf_acc_start_seeds"][i] == cf[0]
            assert row["cf_acc_peak_seeds"][i] == max(cf)
            assert cf[row["cf_acc_peak_step_seeds"][i]] == max(cf)
            assert row["cf_acc_final_seeds"][i] == cf[-1]
    assert summary["filtered"]["n_train_seeds"] == [15, 15]  # 25% of 20 dropped
    # sft.train defaults to qk, so qk_only is mixed's job, read back rather than rerun
    assert summary["qk_only"] == summary["mixed"]
    assert not (run_dir / "checkpoints" / "qk_only-seed0.json").exists()
    assert summary["augmented"]["n_train_seeds"] == [25, 25]  # + 25% counterfactual
    assert "inversion_shown" in summary["findings"]
    figures = sorted(p.name for p in (run_dir / "figures").glob("*.png"))
    assert figures == ["1_counterfactual_accuracy.png", "2_attention.png", "3_accuracies.png"]
    assert not list((run_dir / "checkpoints").glob("*.pt"))  # finished jobs leave none


def test_resumed_run_gives_the_same_metrics(tmp_path):
    cfg = {**TINY, "arms": "mixed,c_only", "seeds": "0"}
    done = run_experiment("inversion-tiny", cfg, runs_root=tmp_path)
    expected = (done.run_dir / "metrics.jsonl").read_text()
    (done.run_dir / "summary.json").unlink()
    (done.run_dir / "metrics.jsonl").unlink()
    saved = sorted((done.run_dir / "checkpoints").glob("*.json"))
    assert [p.name for p in saved] == ["c_only-seed0.json", "mixed-seed0.json"]
    saved[0].unlink()
    kept = saved[1].stat().st_mtime_ns
    resumed = run_experiment("inversion-tiny", runs_root=tmp_path, resume=True)
    assert resumed.run_dir == done.run_dir
    assert saved[1].stat().st_mtime_ns == kept
    assert (done.run_dir / "metrics.jsonl").read_text() == expected


@pytest.mark.parametrize("override, field", [
    ({"arms": "mixed,nope"}, "arms"),
    ({"mixture.share_c": 0.5}, "mixture"),
    ({"model.d_model": 30, "model.heads": 4}, "model.d_model"),
    ({"filter_fraction": 1.0}, "filter_fraction"),
    ({"sft.train": "everything"}, "sft.train"),
    ({"sft.stepz": 3}, "sft.stepz"),
])
def test_bad_config_names_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        build_config("inversion-tiny", override)


def test_defaults_validate():
    InversionTinyConfig().validate()
