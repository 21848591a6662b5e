"""The registered `ocr-toy` experiment end to end at a tiny size, config validation, resume."""

import numpy as np
import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.errors import ConfigError
from knowflow.experiments.runner import build_config, run_experiment
from knowflow.store.readers import read_json, read_jsonl

TINY = {"world.n_subjects": 12, "world.n_families": 2, "world.n_answers": 2,
        "world.train_fraction": 0.34, "train.steps": 60, "train.lr": 1.0,
        "train.eval_every": 20, "seeds": "0,1", "workers": 1}
METRICS = ("train_fact_loss", "train_impl_loss", "test_impl_loss", "test_impl_acc",
           "nuclear_norm", "frobenius_norm", "test_margin")


def test_main_study_writes_every_file(tmp_path):
    result = run_experiment("ocr-toy", TINY, runs_dir=tmp_path)
    run_dir = result.out_dir
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.html",
                 "ov_blocks.npz", "figures/1_training.png", "figures/2_wov_blocks.png"):
        assert (run_dir / name).exists(), name
    summary = read_json(run_dir / "summary.json")
    for model in ("factorized", "merged"):
        for key in METRICS:
            assert isinstance(summary[model][key], float), (model, key)
        assert len(summary[model]["per_seed"]["test_impl_acc"]) == 2
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert {(r["part"], r["seed"]) for r in records} == {
        (p, s) for p in ("factorized", "merged") for s in (0, 1)}
    assert max(r["step"] for r in records) == 60
    with np.load(run_dir / "ov_blocks.npz") as npz:
        d = 12 + 2 * (2 + 2 * 2) + 1
        assert npz["factorized__subject_fact"].shape == (4, 12)
        assert npz["merged__fact_impl"].shape == (4, 4)
        assert d == read_json(run_dir / "summary.json")["merged"]["rank"]
    assert "findings" in summary and "matched_train_loss" in summary["findings"]


@pytest.mark.parametrize("study,figure,table", [
    ("rank_sweep", "3_rank_sweep.png", "rank_sweep"),
    ("families", "4_families.png", "families"),
    ("fraction_sweep", "5_fraction_sweep.png", "fraction_sweep"),
])
def test_other_studies(tmp_path, study, figure, table):
    overrides = {**TINY, "study": study, "seeds": "0", "train.steps": 20,
                 "sweep.ranks": "2,8", "sweep.fractions": "0.25,0.5"}
    if study == "rank_sweep":
        overrides["workers"] = 2  # three parts: the process-pool path
    result = run_experiment("ocr-toy", overrides, runs_dir=tmp_path)
    assert (result.out_dir / "figures" / figure).exists()
    summary = result.summary
    assert "factorized" in summary and "merged" in summary and table in summary
    if study == "rank_sweep":
        assert list(summary["rank_sweep"]) == ["r=2", "r=8", "r=25"]  # d = 25 is the default
    if study == "families":
        assert summary["families"]["city_language/factorized"]["causal"] is True
        assert summary["families"]["cf_city_language/merged"]["causal"] is False
        assert "factorized_spurious_test_impl_acc" in summary["findings"]
    if study == "fraction_sweep":
        # 0.25 shows the same 1 of 3 subjects per group as the default 0.34: run once
        assert list(summary["fraction_sweep"]) == [
            f"{f}/{m}" for f in ("0.34", "0.5") for m in ("factorized", "merged")]
        realized = [row["train_fraction_realized"] for row in summary["fraction_sweep"].values()]
        assert realized == pytest.approx([1 / 3, 1 / 3, 2 / 3, 2 / 3])


def test_resume_recomputes_only_the_missing_part(tmp_path):
    from knowflow.experiments.ocr_toy.experiment import run

    cfg = build_config("ocr-toy", TINY)
    first = run(cfg, tmp_path)
    (tmp_path / "checkpoints" / "merged.json").unlink()
    factorized_ckpt = (tmp_path / "checkpoints" / "factorized.json").read_bytes()
    second = run(cfg, tmp_path)
    assert (tmp_path / "checkpoints" / "factorized.json").read_bytes() == factorized_ckpt
    assert second == first  # the recomputed part gives the same numbers (same seeds)


@pytest.mark.parametrize("override,field", [
    ("world.train_fraction=0", "world.train_fraction"),
    ("world.train_fraction=1", "world.train_fraction"),
    ("world.train_fraction=1.5", "world.train_fraction"),
    ("model.rank=0", "model.rank"),
    ("model.rank=-2", "model.rank"),
    ("world.n_families=9", "world.n_subjects"),
    ("world.n_answers=12", "world.n_subjects"),
    ("sweep.fractions=0.2,1.0", "sweep.fractions"),
    ("train.lr=0", "train.lr"),
    ("world.seq_len=6", "world.n_noise"),
    # initial weights float32 cannot hold: refused by name, before torch.full overflows
    ("model.init_scale=1e300", "model.init_scale"),
    ("model.kq_init=1e300", "model.kq_init"),
    ("model.kq_init=-1e300", "model.kq_init"),
])
def test_impossible_configs_are_config_errors(override, field):
    key, value = override.split("=")
    overrides = {"world.n_subjects": 8, "world.n_families": 2, "world.n_answers": 2}
    overrides[key] = value
    with pytest.raises(ConfigError) as err:
        build_config("ocr-toy", overrides)
    assert err.value.field == field


def test_cli_bad_config_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(app, ["run", "ocr-toy", "--runs-dir", str(tmp_path),
                                      "--set", "world.train_fraction=1.2"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "world.train_fraction" in lines[0]
    assert not (tmp_path / "ocr-toy").exists()


def test_default_config_is_valid_and_128_dim():
    from knowflow.experiments.ocr_toy.experiment import vocab_dim

    cfg = build_config("ocr-toy")
    assert vocab_dim(cfg.world) == 128 and cfg.study == "main" and len(cfg.seeds) == 3


def test_norms_at_matched_loss_interpolate_between_evaluations():
    from knowflow.experiments.ocr_toy.experiment import matched_loss_norms

    def recs(part, losses, norms):
        return [{"part": part, "seed": 0, "step": 10 * i, "train_loss": loss,
                 "nuclear_norm": n, "frobenius_norm": n / 2}
                for i, (loss, n) in enumerate(zip(losses, norms, strict=True))]

    out = matched_loss_norms(recs("factorized", [1.0, 0.1, 0.001], [0.0, 10.0, 30.0])
                             + recs("merged", [1.0, 0.5, 0.01], [0.0, 5.0, 8.0]))
    assert out["matched_train_loss"] == 0.01  # the merged model's final loss
    assert out["merged_nuclear_norm_at_matched_loss"] == 8.0
    # log(0.01) is halfway between log(0.1) and log(0.001): halfway between 10 and 30
    assert out["factorized_nuclear_norm_at_matched_loss"] == pytest.approx(20.0)
    assert out["factorized_step_at_matched_loss"] == pytest.approx(15.0)
