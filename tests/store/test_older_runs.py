"""Run folders written before every quantity had one name (tests/data/runs-6e7d8bb: an eval,
a cpi-toy and an inversion-tiny run written by 6e7d8bb) still load, report and resume, their
old keys read under the current names (`store.keys`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import knowflow
from knowflow.cli import app
from knowflow.store.files import atomic_write_json
from knowflow.store.keys import current
from knowflow.store.readers import read_json

OLD = Path(__file__).resolve().parents[1] / "data" / "runs-6e7d8bb"
# spellings the current code never writes
GONE = ("counterfactual_accuracy", "parametric_accuracy", "attn_ctx", "in_dist", "fall_mean",
        "loglik_fall", "mixed_fall", "c_only_fall")
runner = CliRunner()


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(OLD / name, tmp_path / name))


def test_the_fixtures_hold_the_old_spellings():
    """The check below can fail: the folders really use the names since replaced."""
    old = set().union(*(_keys(read_json(OLD / n / "summary.json"))
                        for n in ("eval", "cpi-toy", "inversion-tiny")))
    assert {"counterfactual_accuracy", "attn_ctx_final", "fall", "mixed_fall",
            "inversion_fall", "c_only_fall"} <= old


@pytest.mark.parametrize("name", ["eval", "cpi-toy", "inversion-tiny"])
def test_an_older_run_loads_with_the_current_names(name):
    result = knowflow.Result.load(OLD / name)
    keys = _keys(result.summary) | _keys(result.records)
    assert not [k for k in keys if any(g in k for g in GONE)]
    assert result.summary == current(read_json(OLD / name / "summary.json"), result.command)


def test_the_values_keep_their_numbers_under_the_new_names():
    old = read_json(OLD / "inversion-tiny" / "summary.json")
    new = knowflow.Result.load(OLD / "inversion-tiny").summary
    assert new["mixed"]["cf_acc_fall"] == old["mixed"]["fall"]
    assert new["mixed"]["cf_acc_rise_seeds"] == old["mixed"]["rise_seeds"]
    assert new["mixed"]["attn_context_final"] == old["mixed"]["attn_ctx_final"]
    assert new["findings"]["mixed_cf_acc_fall"] == old["findings"]["mixed_fall"]
    assert new["findings"]["filtered_indist_minus_mixed"] == \
        old["findings"]["filtered_in_dist_minus_mixed"]
    toy = knowflow.Result.load(OLD / "cpi-toy").summary["findings"]
    old_toy = read_json(OLD / "cpi-toy" / "summary.json")["findings"]
    assert toy["inversion_mc_fall"] == old_toy["inversion_fall"]
    assert toy["c_only_mc_fall"] == old_toy["c_only_fall"]
    ev = knowflow.Result.load(OLD / "eval").summary["cf-capitals"]["loglik"]
    assert ev["cf_acc"] == read_json(OLD / "eval" / "summary.json")["cf-capitals"]["loglik"][
        "counterfactual_accuracy"]


@pytest.mark.parametrize("name", ["eval", "cpi-toy", "inversion-tiny"])
def test_an_older_run_reports(name, tmp_path):
    run = _copy(name, tmp_path)
    res = runner.invoke(app, ["report", str(run)])
    assert res.exit_code == 0, res.output
    page = (run / "report.html").read_text()  # (the fixtures keep no figures to embed)
    assert "counterfactual_accuracy" not in page and "attn_ctx" not in page
    assert "<h3>Summary" in page or "context's answer" in page


@pytest.mark.parametrize("name,piece", [("inversion-tiny", "filtered-seed1.json"),
                                        ("cpi-toy", "c60-cs140-s0-u0-a60-v0-f0.json")])
def test_an_older_run_resumes(name, piece, tmp_path):
    """A run killed before its last piece (its summary gone, one checkpoint missing, run.json
    marked in progress): --resume loads the older pieces under the current names, computes
    the missing one and finishes with the current names throughout."""
    run = _copy(name, tmp_path)
    old = read_json(run / "summary.json")
    (run / "summary.json").unlink()
    (run / "checkpoints" / piece).unlink()
    atomic_write_json(run / "run.json", {**read_json(run / "run.json"), "in_progress": True})
    res = runner.invoke(app, ["run", name, "--resume", "--run-dir", str(run)])
    assert res.exit_code == 0, res.output
    summary = read_json(run / "summary.json")
    assert not [k for k in _keys(summary) if any(g in k for g in GONE)]
    if name == "inversion-tiny":  # mixed's pieces were read back, not recomputed
        assert summary["mixed"]["cf_acc_fall_seeds"] == old["mixed"]["fall_seeds"]
        assert summary["findings"]["mixed_cf_acc_fall"] == old["findings"]["mixed_fall"]
    else:
        assert summary["inversion"]["mc_fall"] == old["inversion"]["mc_fall"]
        assert summary["findings"]["inversion_mc_fall"] == old["findings"]["inversion_fall"]
