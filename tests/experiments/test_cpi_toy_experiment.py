"""cpi-toy end to end: the run contract, resume, determinism, and the default inversion."""

import json

import pytest

from knowflow.data.instructions import KINDS
from knowflow.errors import ConfigError
from knowflow.evaluation.curves import named_curve
from knowflow.experiments.cpi_toy.experiment import PARTS
from knowflow.experiments.runner import build_config, run_experiment
from knowflow.report.names import label
from knowflow.store.readers import read_json, read_jsonl

TINY = {
    "world.n_answers": 12, "world.n_heldout_answers": 3, "world.n_test": 10,
    "mixture.n_c": 6, "mixture.n_cs": 10, "part.with_s_points": 5, "part.aug_points": 4,
    "finetune.steps": 20, "workers": 1,
}
SUMMARY_KEYS = {"mc_start", "mc_peak", "mc_peak_step", "mc_final", "steps"}


def test_tiny_run_writes_the_whole_contract(tmp_path):
    result = run_experiment("cpi-toy", TINY, runs_dir=tmp_path)
    run_dir = result.out_dir
    assert run_dir.parent == tmp_path / "cpi-toy"
    for name in ("config.json", "metrics.jsonl", "summary.json", "report.html"):
        assert (run_dir / name).is_file(), name
    assert read_json(run_dir / "config.json")["finetune"]["steps"] == 20
    summary = read_json(run_dir / "summary.json")
    for part in ("inversion", "c_only", "with_s", "train_v"):
        assert set(summary[part]) >= SUMMARY_KEYS, part
        assert summary[part]["steps"] == 20
    assert set(summary["mitigations"]) == {"baseline", "all_weights", "augmented", "filtered",
                                           "dynamic"}
    for arm in summary["mitigations"].values():
        assert set(arm) >= SUMMARY_KEYS | {"indist_start", "indist_final"}
    # of the lowest round(0.75 * 16) = 12 no-context losses, those below ln 2: the 10 C+S
    # points (facts the model knows), none of the 6 made-up C points
    dyn = summary["mitigations"]["dynamic"]
    assert dyn["n_dropped_final"] == dyn["n_dropped_C+S_final"] == 10
    assert set(summary["findings"]) >= {"dynamic_fall_removed", "dynamic_indist_change",
                                        "dynamic_goal_met"}
    records = read_jsonl(run_dir / "metrics.jsonl")
    arms = {(r["part"], r["arm"]) for r in records}
    assert len(arms) == 9
    _check_schema_names(summary, records)
    assert len(records) == 9 * 21  # every step of every arm, step 0 included
    figures = sorted(p.name for p in (run_dir / "figures").glob("*.png"))
    assert figures == ["1_inversion.png", "2_c_only.png", "3_with_s.png", "4_train_v.png",
                       "5_mitigations.png"]
    html = (run_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5 and label("mc_peak") in html


def _check_schema_names(summary: dict, records: list[dict]) -> None:
    """Per-kind keys use the schema's kinds (C+S, CF), and M_C's summary is the schema's."""
    per_kind = ("loss_", "attn_context_", "attn_subject_", "attn_relation_", "value_conf_",
                "n_dropped_")
    keys = {k for r in records for k in r}
    for key in keys:
        for prefix in per_kind:
            if key.startswith(prefix):
                assert key[len(prefix):] in (*KINDS, "test"), key
    assert {"loss_C", "loss_C+S", "loss_S", "loss_CF", "attn_subject_C+S", "value_conf_C+S",
            "n_dropped_C+S"} <= keys
    inversion = [r for r in records if r["part"] == "inversion"]
    curve = named_curve("mc", [r["step"] for r in inversion], [r["mc"] for r in inversion])
    assert {k: summary["inversion"][k] for k in curve} == curve
    mit = summary["mitigations"]
    assert {"n_dropped_C+S", "indist_C+S_final"} <= set(mit["filtered"])
    assert {"value_conf_C+S_start", "n_dropped_C+S_final"} <= set(mit["dynamic"])
    assert "train_v_value_conf_C+S_gain" in summary["findings"]


def test_same_seed_same_numbers_and_workers_do_not_matter(tmp_path):
    cfg = {**TINY, "parts": "inversion,train_v"}
    one = run_experiment("cpi-toy", cfg, runs_dir=tmp_path / "a")
    two = run_experiment("cpi-toy", {**cfg, "workers": 2}, runs_dir=tmp_path / "b")
    other = run_experiment("cpi-toy", {**cfg, "seed": 1}, runs_dir=tmp_path / "c")
    first = (one.out_dir / "metrics.jsonl").read_text()
    assert first == (two.out_dir / "metrics.jsonl").read_text()
    assert first != (other.out_dir / "metrics.jsonl").read_text()


def test_resume_recomputes_only_what_is_missing(tmp_path):
    cfg = {**TINY, "parts": "inversion,c_only"}
    done = run_experiment("cpi-toy", cfg, runs_dir=tmp_path)
    expected = (done.out_dir / "metrics.jsonl").read_text()
    # simulate an interruption after the first arm: no summary, one checkpoint lost
    (done.out_dir / "summary.json").unlink()
    (done.out_dir / "metrics.jsonl").unlink()
    checkpoints = sorted((done.out_dir / "checkpoints").glob("*.json"))
    assert len(checkpoints) == 2
    checkpoints[0].unlink()
    kept = checkpoints[1].stat().st_mtime_ns
    resumed = run_experiment("cpi-toy", runs_dir=tmp_path, resume=True)
    assert resumed.out_dir == done.out_dir
    assert checkpoints[1].stat().st_mtime_ns == kept  # loaded, not recomputed
    assert (done.out_dir / "metrics.jsonl").read_text() == expected
    with pytest.raises(ConfigError, match="no unfinished run"):
        run_experiment("cpi-toy", runs_dir=tmp_path, resume=True)


@pytest.mark.parametrize("override, field", [
    ({"mixture.n_c": -1}, "mixture.n_c"),
    ({"world.delta_c": 1.0}, "world.delta_c"),
    ({"world.delta_m": 0}, "world.delta_m"),
    ({"mixture.n_c": 0, "mixture.n_cs": 0}, "mixture"),
    ({"finetune.stepz": 3}, "finetune.stepz"),
    ({"parts": "inversion,nope"}, "parts"),
    ({"finetune.steps": "many"}, "finetune.steps"),
])
def test_impossible_configs_are_rejected_naming_the_field(override, field):
    with pytest.raises(ConfigError) as info:
        build_config("cpi-toy", override)
    assert f"'{field}'" in str(info.value)


def test_default_config_shows_the_inversion_and_no_fall_without_c_plus_s(tmp_path):
    """The experiment's claims for parts (1) and (2) at the default size."""
    result = run_experiment("cpi-toy", {"parts": "inversion,c_only"}, runs_dir=tmp_path)
    inv, c_only = result.summary["inversion"], result.summary["c_only"]
    assert inv["mc_peak"] - inv["mc_final"] >= 0.10
    assert inv["mc_peak"] > inv["mc_start"]
    assert inv["mc_peak_step"] <= inv["steps"] / 4
    assert inv["attn_context_at_mc_peak"] > inv["attn_context_start"] + 0.2  # attention rises...
    assert inv["attn_context_at_mc_peak"] - inv["attn_context_final"] >= 0.05  # ...then falls
    assert inv["proj_theta_C_start"] > 0
    assert inv["proj_theta_C_after_peak_negative_share"] > 0.5
    assert inv["cf_acc_start"] < 0.5 < inv["cf_acc_at_mc_peak"]  # the argmax inverts too
    assert inv["cf_acc_final"] < 0.5
    assert c_only["mc_peak"] - c_only["mc_final"] <= 0.02
    assert c_only["cf_acc_final"] == 1.0
    assert [k for k in result.summary if k in PARTS] == ["inversion", "c_only"]  # as asked
    json.dumps(result.summary)  # summary is plain JSON
