"""inversion-tiny end to end on a tiny world: pretraining cache, finetuning modes, the run
contract, resume after an interruption, and bad input."""

import dataclasses

import pytest
import torch

from helpers import TINY_MODEL, TINY_WORLD
from knowflow.errors import ConfigError
from knowflow.experiments.inversion_tiny.experiment import ARMS, InversionTinyConfig
from knowflow.experiments.inversion_tiny.model import TinyModelConfig
from knowflow.experiments.inversion_tiny.pretrain import (
    PretrainConfig,
    load_pretrained,
    pretrained_path,
)
from knowflow.experiments.inversion_tiny.track import TinyEvaluator, training_rows
from knowflow.experiments.inversion_tiny.world import (
    Mixture,
    TinyWorldConfig,
    evaluation_sets,
    finetuning_set,
    make_world,
)
from knowflow.experiments.runner import build_config, run_experiment
from knowflow.store.readers import read_json, read_jsonl
from knowflow.train.callback import EvalCallback
from knowflow.train.sft import SFTConfig, train_model

WORLD = TinyWorldConfig(**TINY_WORLD)
MODEL = TinyModelConfig(**TINY_MODEL)
PRE = PretrainConfig(steps=5, eval_every=5, batch_size=4)
TINY = {"world.mem_train": 8, "world.mem_eval": 4, "world.unk_train": 8, "world.unk_eval": 4,
        "world.scratch": 6, "world.n_values": 6, "model.layers": 2, "model.heads": 2,
        "model.d_model": 16, "model.d_ff": 32, "pretrain.steps": 5,
        "pretrain.eval_every": 5, "pretrain.batch_size": 4, "mixture.size": 20,
        "sft.steps": 5, "track.every": 1, "sft.batch_size": 4, "sft.save_every": 2,
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
    assert model.config._attn_implementation == "sdpa"
    assert pretrained_path(WORLD, MODEL, PRE, seed=1) != path


def _setup(seed=0):
    world = make_world(WORLD, seed)
    model, tok, _ = load_pretrained(pretrained_path(WORLD, MODEL, PRE, seed))
    return world, model, tok, finetuning_set(world, Mixture(20, 0.3, 0.5, 0.2, 4), seed), \
        evaluation_sets(world, seed)


class _Crash(Exception):
    pass


class _CrashAt(EvalCallback):
    """Simulates a killed process: raises once step `at` has been recorded."""

    def __init__(self, at):
        super().__init__(lambda model: {}, every=1)
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise _Crash


def _finetune(out_dir, cfg, seed=0, extra=()):
    """Tiny-world finetuning through the one HF Trainer path, as inversion-tiny runs it."""
    world, model, tok, train, evals = _setup(seed)
    tracker = EvalCallback(TinyEvaluator(tok, train, evals, 8), every=1, out_dir=out_dir)
    result = train_model(model, tok, training_rows(tok, train), cfg, out_dir, [tracker, *extra],
                      resume=True)
    # the Trainer's logged loss is a running mean since its last log, which a resume restarts;
    # every measured quantity must match
    return result, [{k: v for k, v in r.items() if k not in ("eval_seconds", "train_loss")}
                    for r in tracker.records]


def test_training_rows_put_the_loss_on_the_answer_token_only():
    world, model, tok, train, evals = _setup()
    rows = training_rows(tok, train)
    for ex, row in zip(train, rows, strict=True):
        assert row["input_ids"][:-1] == tok.convert_tokens_to_ids(list(ex.tokens))
        assert row["labels"][:-1] == [-100] * len(ex.tokens)
        assert row["labels"][-1] == row["input_ids"][-1] == tok.convert_tokens_to_ids(ex.answer)


def test_trainer_loss_is_the_answer_token_cross_entropy():
    from knowflow.experiments.inversion_tiny.model import encode, per_example_loss

    world, model, tok, train, evals = _setup()
    rows = training_rows(tok, train[:4])
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in rows])
    labels = torch.tensor([r["labels"] + [-100] * (width - len(r["labels"])) for r in rows])
    mask = (torch.arange(width)[None] < torch.tensor([len(r["input_ids"]) for r in rows])[:, None])
    with torch.no_grad():
        hf = model(input_ids=ids, attention_mask=mask.long(), labels=labels).loss
    assert float(hf) == pytest.approx(float(per_example_loss(model, encode(tok, train[:4])).mean()),
                                      rel=1e-5)


def test_qk_only_changes_only_queries_and_keys(tmp_path):
    world, model, tok, train, evals = _setup()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_model(model, tok, training_rows(tok, train),
             SFTConfig(train="qk_only", steps=3, lr=1e-2, batch_size=4), tmp_path)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.endswith(("q_proj.weight", "k_proj.weight")) for k in changed)


def test_tracker_records_every_evaluation_step(tmp_path):
    cfg = SFTConfig(train="lora", steps=2, batch_size=4, save_every=10)
    result, records = _finetune(tmp_path, cfg)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert result.trainable_params < result.total_params
    assert read_jsonl(tmp_path / "metrics.jsonl")[-1]["cf_acc"] == records[-1]["cf_acc"]


def test_resume_after_interruption_continues_the_same_curve(tmp_path):
    cfg = SFTConfig(train="qk_only", steps=6, save_every=2, batch_size=4, lr=1e-2)
    _, full = _finetune(tmp_path / "full", cfg)
    with pytest.raises(_Crash):  # killed after step 5; the last checkpoint is step 4
        _finetune(tmp_path / "cut", cfg, extra=[_CrashAt(5)])
    assert [r["step"] for r in read_jsonl(tmp_path / "cut" / "metrics.jsonl")] == \
        list(range(6))
    _, resumed = _finetune(tmp_path / "cut", cfg)  # a fresh process would start from here
    assert [r["step"] for r in resumed] == list(range(7))
    assert resumed == full


def test_default_arms_are_all_but_dynamic_curation():
    assert InversionTinyConfig().arms == tuple(a for a in ARMS if a != "dynamic")


def test_tiny_run_writes_every_record(tmp_path):
    # no loss threshold: this barely pretrained model answers nothing from memory
    result = run_experiment("inversion-tiny", {**TINY, "arms": ",".join(ARMS),
                                               "dynamic.threshold": "none"},
                            runs_dir=tmp_path / "runs")
    run_dir = result.out_dir
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.html"):
        assert (run_dir / name).is_file(), name
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert len(records) == len(ARMS) * 2 * 6  # arms x seeds x evaluations (step 0 included)
    for rec in records:
        assert set(rec) >= RECORD_KEYS
        assert len(rec["attn_context_layers"]) == len(rec["attn_subject_layers"]) == 2
        assert rec["attn_context"] == pytest.approx(sum(rec["attn_context_layers"]) / 2)
        assert 0 <= rec["attn_context"] <= 1
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
    # sft.train defaults to qk_only, so qk_only is mixed's job, read back rather than rerun
    assert summary["qk_only"] == summary["mixed"]
    assert not (run_dir / "checkpoints" / "qk_only-seed0.json").exists()
    assert summary["augmented"]["n_train_seeds"] == [25, 25]  # + 25% counterfactual
    # dynamic curation re-scored at step 0 only (dynamic.every 50 > 5 steps), 75% of 20 left out
    assert summary["dynamic"]["curation_rescorings_seeds"] == [1, 1]
    assert [sum(summary["dynamic"][f"n_dropped_{k}_seeds"][i] for k in ("C", "C+S", "S"))
            for i in (0, 1)] == [15, 15]
    # gradient projections only where asked (track.mechanism_arms: mixed)
    assert all(("grad_ctx_C+S" in r) == (r["arm"] in ("mixed", "qk_only")) for r in records)
    assert "inversion_shown" in summary["findings"]
    assert summary["findings"]["verdict"] and summary["findings"]["mechanism_verdict"]
    assert summary["mechanism"]["peak_step"] == summary["mixed"]["cf_acc_peak_step"]
    figures = sorted(p.name for p in (run_dir / "figures").glob("*.png"))
    assert figures == ["1_counterfactual_accuracy.png", "2_attention.png", "3_accuracies.png",
                       "4_mechanism.png"]
    # finished jobs leave no Trainer checkpoints, only their saved parts
    assert all(p.suffix == ".json" for p in (run_dir / "checkpoints").iterdir())


def test_resumed_run_gives_the_same_metrics(tmp_path):
    cfg = {**TINY, "arms": "mixed,c_only", "seeds": "0"}
    done = run_experiment("inversion-tiny", cfg, runs_dir=tmp_path)
    expected = (done.out_dir / "metrics.jsonl").read_text()
    (done.out_dir / "summary.json").unlink()
    (done.out_dir / "metrics.jsonl").unlink()
    saved = sorted((done.out_dir / "checkpoints").glob("*.json"))
    assert [p.name for p in saved] == ["c_only-seed0.json", "mixed-seed0.json"]
    saved[0].unlink()
    kept = saved[1].stat().st_mtime_ns
    resumed = run_experiment("inversion-tiny", runs_dir=tmp_path, resume=True)
    assert resumed.out_dir == done.out_dir
    assert saved[1].stat().st_mtime_ns == kept
    assert (done.out_dir / "metrics.jsonl").read_text() == expected


@pytest.mark.parametrize("override, field", [
    ({"arms": "mixed,nope"}, "arms"),
    ({"mixture.c": 0.5}, "mixture"),
    ({"model.d_model": 30, "model.heads": 4}, "model.d_model"),
    ({"filter_fraction": 1.0}, "filter_fraction"),
    ({"dynamic.fraction": 0.0}, "dynamic.fraction"),
    ({"dynamic.threshold": -1.0}, "dynamic.threshold"),
    ({"dynamic.mode": "none"}, "dynamic.mode"),
    ({"curate_every": 5}, "curate_every': renamed to dynamic.every"),
    ({"mixture.c_reliability": 0.0}, "mixture.c_reliability"),
    ({"sft.train": "everything"}, "sft.train"),
    ({"sft.stepz": 3}, "sft.stepz"),
])
def test_bad_config_names_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        build_config("inversion-tiny", override)


def test_defaults_are_the_documented_study_and_validate_rejects_broken_variants():
    cfg = InversionTinyConfig()
    cfg.validate()
    # docs/experiments/inversion-tiny.md: six arms (dynamic is opt-in), 5 seeds each
    assert cfg.arms == ("mixed", "c_only", "filtered", "augmented", "qk_only", "lora")
    assert cfg.seeds == (0, 1, 2, 3, 4) and cfg.study == "arms"
    broken = [({"arms": ()}, "arms"), ({"arms": ("mixed", "nope")}, "arms"),
              ({"seeds": ()}, "seeds"),
              ({"model": dataclasses.replace(cfg.model, d_model=30, heads=4)}, "model.d_model"),
              ({"world": dataclasses.replace(cfg.world, scratch=0)}, "world.scratch"),
              ({"pretrain": dataclasses.replace(cfg.pretrain, lookup_facts=1)},
               "pretrain.lookup_facts")]
    for change, field in broken:
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            dataclasses.replace(cfg, **change).validate()


def test_phase_study_writes_every_cell(tmp_path):
    cfg = {**TINY, "study": "phase", "phase.cs_shares": "0,0.5", "phase.reliabilities": "0.5,0.9",
           "phase.seeds": "0,1", "phase.toy_steps": 5}
    result = run_experiment("inversion-tiny", cfg, runs_dir=tmp_path)
    phase = result.summary["phase"]
    for model in ("tiny", "toy"):
        cells = {(r["cs_share"], r["reliability"]) for r in phase[model]}
        assert cells == {(0.0, 0.5), (0.5, 0.5), (0.0, 0.9), (0.5, 0.9)}
        for row in phase[model]:
            metric = {"tiny": "cf_acc", "toy": "mc"}[model]
            assert row["metric"] == metric and len(row[f"{metric}_fall_seeds"]) == 2
            assert row[f"{metric}_fall"] == pytest.approx(sum(row[f"{metric}_fall_seeds"]) / 2)
            assert row["inverts"] == (row[f"{metric}_fall"] >= 0.1)
    records = read_jsonl(result.out_dir / "metrics.jsonl")
    tiny = [r for r in records if r["model"] == "tiny"]
    assert len(tiny) == 4 * 2 * 6  # cells x seeds x evaluations
    assert {(r["cs_share"], r["reliability"], r["seed"]) for r in tiny} == {
        (x, rel, s) for x in (0.0, 0.5) for rel in (0.5, 0.9) for s in (0, 1)}
    agree = phase["agreement"]
    assert agree["cells"] == 4 and agree["agree"] + len(agree["disagree"]) == 4
    assert result.summary["findings"]["verdict"].startswith("The tiny transformer and")
    assert [p.name for p in (result.out_dir / "figures").iterdir()] == ["1_phase_diagram.png"]


def test_two_cold_runs_write_identical_summaries_and_records(tmp_path, monkeypatch):
    cfg = {**TINY, "arms": "mixed,c_only", "seeds": "0"}
    runs = []
    for name in ("a", "b"):
        monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / name / "cache"))  # cold each time
        runs.append(run_experiment("inversion-tiny", cfg, runs_dir=tmp_path / name).out_dir)
    for file in ("summary.json", "metrics.jsonl"):
        assert (runs[0] / file).read_bytes() == (runs[1] / file).read_bytes(), file


def test_pretraining_runs_its_fixed_budget(tmp_path):
    """No threshold stop: the model trains exactly `steps` steps whatever its accuracy, and
    the budget is part of the cache key."""
    long = PretrainConfig(steps=7, eval_every=5, batch_size=4, recall_target=0.0,
                          lookup_target=0.0)  # targets met at once: a stop rule would stop
    info = load_pretrained(pretrained_path(WORLD, MODEL, long, seed=0))[2]
    assert info["steps"] == 7 and [h["step"] for h in info["history"]] == [5, 7]
    assert pretrained_path(WORLD, MODEL, long, 0) != pretrained_path(WORLD, MODEL, PRE, 0)
