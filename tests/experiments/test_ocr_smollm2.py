"""`ocr-smollm2` end to end on a tiny random model: a 3-step run through the SFT path writes
every record (step 0, each evaluation, the end), the summary, figures and report; bad configs
are one-line errors with exit code 2; --resume keeps the records it has."""

import json
import math
import shutil
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.config import config_to_dict, flatten
from knowflow.data.people import FAMILY_NAMES, generate
from knowflow.errors import ConfigError
from knowflow.experiments.ocr_smollm2.experiment import encode_texts, run, smoke_config
from knowflow.experiments.ocr_smollm2.figures import table_markdown
from knowflow.experiments.ocr_smollm2.rank_table import family_ranks
from knowflow.experiments.runner import build_config, run_experiment
from knowflow.store.files import atomic_write_json, atomic_write_jsonl
from knowflow.store.identity import CONFIG, METRICS
from knowflow.store.readers import read_jsonl


def test_three_step_run_writes_every_record(tmp_path):
    cfg = smoke_config()
    overrides = {k: v for k, v in flatten(config_to_dict(cfg)).items()}
    result = run_experiment("ocr-smollm2", overrides, runs_dir=tmp_path)
    run_dir = result.out_dir
    records = read_jsonl(run_dir / METRICS)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for rec in records:
        for fam in (*FAMILY_NAMES, "all"):
            for group in ("test_impl", "train_impl", "test_fact", "train_fact"):
                k = rec[f"{fam}/{group}/n_candidates"]
                assert k == 2
                for stat in ("mean_rank", "mean_rank_first_token"):
                    assert 0 <= rec[f"{fam}/{group}/{stat}"] <= k - 1
                assert 0 <= rec[f"{fam}/{group}/top1"] <= 1
    assert all("train_loss" in r for r in records[1:])
    # the counterfactual family also ranks the real-world implication
    assert 0 <= records[-1]["cf_city_language/test_impl/prior_mean_rank"] <= 1
    assert not any(k.startswith("city_language/") and "prior" in k for k in records[-1])
    summary = json.loads((run_dir / "summary.json").read_text())
    for fam in FAMILY_NAMES:
        row = summary[fam]
        assert row["n_candidates"] == 2
        for key in ("mean_rank_before", "mean_rank_after", "train_mean_rank_after"):
            assert 0 <= row[key] <= 1
        assert row["mean_rank_before"] == records[0][f"{fam}/test_impl/mean_rank"]
        assert row["mean_rank_after"] == records[-1][f"{fam}/test_impl/mean_rank"]
    assert summary["city_language"]["causal"] and not summary["sport_music"]["causal"]
    assert "prior_mean_rank_after" in summary["cf_city_language"]
    assert "prior_mean_rank_after" not in summary["city_language"]
    assert summary["steps"] == 3 and summary["train_tokens_per_s"] > 0
    assert sorted(p.name for p in (run_dir / "figures").glob("*.png")) == \
        ["1_mean_rank.png", "2_table.png"]
    assert (run_dir / "report.html").stat().st_size > 1000
    md = table_markdown(family_ranks(records)).splitlines()
    assert len(md) == 2 + len(FAMILY_NAMES) + 1 and md[-1].startswith("| all |")
    assert not (run_dir / "checkpoints").exists()  # removed once the run is done


def test_resume_continues_from_the_last_checkpoint(tmp_path):
    cfg = replace(smoke_config(), keep_checkpoints=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    atomic_write_json(run_dir / CONFIG, config_to_dict(cfg))
    run(cfg, run_dir)
    first = read_jsonl(run_dir / METRICS)
    # interrupted after the step-2 checkpoint, with a record past it that must be redone
    for ckpt in (run_dir / "checkpoints").glob("checkpoint-*"):
        if ckpt.name != "checkpoint-2":
            shutil.rmtree(ckpt)
    atomic_write_jsonl(run_dir / METRICS, [*first[:3], {**first[3], "stale": True}])
    summary = run(cfg, run_dir)
    again = read_jsonl(run_dir / METRICS)
    assert [r["step"] for r in again] == [0, 1, 2, 3] and "stale" not in again[3]
    assert again[:3] == first[:3]  # kept, not recomputed
    for key, value in first[3].items():  # the same seed gives the same numbers
        if "/" in key:
            assert again[3][key] == pytest.approx(value, abs=1e-6), key
    assert summary["steps"] == 3


@pytest.mark.parametrize("override, field", [
    ({"world.train_fraction": 1.0}, "world.train_fraction"),
    ({"world.people_per_family": 5}, "world.people_per_family"),
    ({"world.families": ""}, "world.families"),
    ({"world.pairs_per_family": 13}, "world.pairs_per_family"),
    ({"sft.lr": 0}, "sft.lr"),
    ({"eval_every": 0}, "eval_every"),
])
def test_bad_configs_name_the_field(override, field):
    with pytest.raises(ConfigError) as exc:
        build_config("ocr-smollm2", override)
    assert exc.value.field == field


@pytest.mark.parametrize("setting", ["world.train_fraction=0", "world.pairs_per_family=20",
                                     "world.families=", "world.people_per_family=3"])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, setting):
    res = CliRunner().invoke(app, ["run", "ocr-smollm2", "--set", setting,
                                   "--runs-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert not any(tmp_path.rglob("config.json"))  # nothing half-written


def test_long_sentences_are_a_config_error():
    from knowflow.experiments.ocr_smollm2.experiment import tiny_model

    cfg = smoke_config()
    data = generate(cfg.world)
    _, tokenizer = tiny_model(cfg, data)
    encoded = encode_texts(tokenizer, data.train_texts, 32)
    assert all(x["labels"] == x["input_ids"] for x in encoded)
    assert all(x["input_ids"][-1] == tokenizer.eos_token_id for x in encoded)
    assert not any(tokenizer.unk_token_id in x["input_ids"] for x in encoded)
    with pytest.raises(ConfigError, match="sft.max_length"):
        encode_texts(tokenizer, data.train_texts, 4)
    assert math.isfinite(len(encoded))
