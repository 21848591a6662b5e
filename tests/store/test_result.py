"""One result contract (knowflow/store/result.py): every public entry point returns a `Result` whose
`save(dir)` then `Result.load(dir)` gives back its records, summary and config (as JSON holds
them), as the class its command returns; `to_pandas()` has one row per record."""

from __future__ import annotations

import importlib.util
import json

import pytest

import knowflow
from knowflow.config import resolve_config
from knowflow.errors import ConfigError, DataError
from knowflow.evaluation.options import EvalConfig
from knowflow.store.result import Result

FACT = {"prompt": "The Eiffel Tower is located in the city of", "subject": "The Eiffel Tower",
        "answer": "Paris"}


def _json(value):
    return json.loads(json.dumps(value))


def _round_trip(result: Result, folder) -> Result:
    """`result` saved to `folder` and loaded back: the same records, summary and config."""
    assert isinstance(result, Result)
    saved = result.save(folder)
    assert saved == folder and result.out_dir == folder
    back = knowflow.Result.load(folder)
    assert type(back) is type(result) and back.command == result.command
    assert back.records == _json(result.records) and len(back.records) > 0
    assert back.summary == _json(result.summary)
    assert back.config == _json(result.config)
    if importlib.util.find_spec("pandas") is not None:  # optional: the data extra
        for res in (result, back):
            assert len(res.to_pandas()) == len(res.records)
    return back


def test_to_pandas_is_one_row_per_record():
    res = Result([{"id": "a", "x": {"y": 1}}, {"id": "b", "x": {"y": 2}}], {}, {}, "explain")
    frame = res.to_pandas()
    assert list(frame["id"]) == ["a", "b"] and list(frame["x_y"]) == [1, 2]


def test_evaluate_round_trips(tiny_lm, tok, tmp_path):
    model = tiny_lm
    res = knowflow.evaluate(model, "cf-capitals", tokenizer=tok, limit=2, max_new_tokens=2,
                            n_bootstrap=10)
    assert type(res).__name__ == "EvalResult" and len(res.records) == 2
    back = _round_trip(res, tmp_path / "eval")
    assert (tmp_path / "eval" / "report.html").exists()
    assert back.by_suite["cf-capitals"] == back.records


def test_probe_round_trips(tiny_lm, tok, tmp_path):
    model = tiny_lm
    res = knowflow.probe(model, [FACT], tokenizer=tok, kind="knockout", window=1,
                         known_only=False, source=("last",))
    assert res.command == "probe-knockout"
    _round_trip(res, tmp_path / "probe")
    assert (tmp_path / "probe" / "figures" / "knockout.png").exists()


def test_explain_round_trips(tiny_lm, tok, tmp_path):
    model = tiny_lm
    res = knowflow.explain(model, "cf-capitals", tokenizer=tok, limit=2, levels=("source",),
                           target="counterfactual", max_new_tokens=2)
    _round_trip(res, tmp_path / "explain")
    assert (tmp_path / "explain" / "report.html").exists()
    assert not (tmp_path / "explain" / ".knowflow.lock").exists()


def test_curate_and_augment_round_trip(tiny_lm, tok, rows, tmp_path):
    model = tiny_lm
    cur = knowflow.curate(model, rows, tokenizer=tok, drop=0.25, batch_size=4)
    back = _round_trip(cur, tmp_path / "cur")
    assert back.kept == cur.kept and back.cutoff == cur.cutoff is not None
    aug = knowflow.augment(rows, ratio=0.5, seed=3)
    assert aug.command == "augment"
    _round_trip(aug, tmp_path / "aug")
    # augment's records are rows curate takes
    assert knowflow.curate(model, aug.records, tokenizer=tok, batch_size=4).summary[
        "n_rows"] == len(aug.records)


def test_run_experiment_round_trips_as_a_copy_of_its_folder(tmp_path):
    tiny = {"world.n_answers": 12, "world.n_heldout_answers": 3, "world.n_test": 10,
            "mixture.n_c": 6, "mixture.n_cs": 10, "finetune.steps": 20, "workers": 1}
    res = knowflow.run_experiment("cpi-toy", tiny, runs_dir=tmp_path / "runs", parts="c_only")
    assert res.command == "cpi-toy" and res.out_dir.parent == tmp_path / "runs" / "cpi-toy"
    back = _round_trip(Result.load(res.out_dir), tmp_path / "copy")
    assert {p.name for p in (tmp_path / "copy").iterdir()} >= \
        {p.name for p in res.out_dir.iterdir()} - {".knowflow.lock"}
    assert back.config == res.config


@pytest.mark.slow
def test_finetune_is_the_sft_job_and_round_trips(tiny_model_dir, tmp_path):
    res = knowflow.finetune(str(tiny_model_dir), "builtin", runs_dir=tmp_path / "runs",
                            save_model=False, mixture={"size": 16},
                            sft={"steps": 2, "batch_size": 4, "train": "full",
                                 "prompt_format": "plain"},
                            track={"every": 2, "limit": 2, "prompt_format": "plain"})
    assert res.command == "sft" and res.config["model"] == str(tiny_model_dir)
    _round_trip(res, tmp_path / "copy")


def test_finetune_refuses_a_loaded_model(tiny_lm):
    with pytest.raises(ConfigError):
        knowflow.finetune(tiny_lm)


def test_load_refuses_a_folder_that_is_no_run(tmp_path):
    with pytest.raises(DataError):
        Result.load(tmp_path)


def test_resolve_config_is_the_one_way_a_config_is_made():
    assert resolve_config(EvalConfig) == EvalConfig()
    cfg = resolve_config(EvalConfig, EvalConfig(limit=3), ["seed=2"], {"max_new_tokens": 4})
    assert (cfg.limit, cfg.seed, cfg.max_new_tokens) == (3, 2, 4)
    with pytest.raises(ConfigError) as err:
        resolve_config(EvalConfig, None, {"nope": 1})
    assert err.value.field == "nope"
    with pytest.raises(ConfigError):
        resolve_config(EvalConfig, EvalConfig(limit=0))
    with pytest.raises(ConfigError):
        resolve_config(EvalConfig, object())


def test_save_draws_the_figures_without_the_api_imported(tiny_lm, tok, tmp_path):
    """`Result.save` finds its command's finisher by name: in a fresh interpreter that never
    imports `knowflow.api` (the library's own `evaluate`, then save), an eval Result saves
    with its figures and report page, and loads back as the class `evaluate` returns."""
    import subprocess
    import sys

    res = knowflow.evaluate(tiny_lm, "cf-capitals", tokenizer=tok, limit=2, max_new_tokens=2,
                            n_bootstrap=10)
    given = tmp_path / "result.json"
    given.write_text(json.dumps({"records": res.records, "summary": res.summary,
                                 "config": res.config}))
    script = (
        "import json, sys\n"
        "from knowflow.evaluation.run import EvalResult\n"
        "from knowflow.store.result import Result\n"
        "r = json.load(open(sys.argv[1]))\n"
        "before = 'knowflow.api' in sys.modules\n"
        "EvalResult(r['records'], r['summary'], r['config']).save(sys.argv[2])\n"
        "back = Result.load(sys.argv[2])\n"
        "print(before, 'knowflow.api' in sys.modules, type(back).__name__)\n")
    out = subprocess.run([sys.executable, "-c", script, str(given), str(tmp_path / "run")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "EvalResult"]
    assert (tmp_path / "run" / "report.html").is_file()
    assert list((tmp_path / "run" / "figures").glob("*.png"))
