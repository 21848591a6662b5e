"""One run contract: `knowflow eval` and `knowflow probe` folders are written by the same
writer as experiments (`runs.start_run`, `experiments.runner.finish_run`): config.json, the
records file, summary.json, figures/ and report.html; a refused run leaves nothing; progress
is reported as `progress(done, total, stage)` everywhere."""

from __future__ import annotations

import importlib

import pytest
from typer.testing import CliRunner

import knowflow.experiments.runner as runner_mod
import knowflow.report.finish as finish_mod
import knowflow.store.run_folder as runs_mod
from knowflow.cli import app
from knowflow.errors import DataError
from knowflow.experiments.runner import finish_run
from knowflow.report.names import label
from knowflow.store.readers import read_json, read_jsonl

cli = CliRunner()


@pytest.fixture()
def spies(monkeypatch):
    """Which records files the shared writer wrote, and which folders `finish_run` finished
    (each run's folder once published: a run is finished staged, then renamed into place)."""
    seen = {"records": [], "finished": []}
    write_records, finish = runs_mod.RunFolder.write_records, runner_mod.finish_run

    def records_spy(self, name, records):
        seen["records"].append(name)
        return write_records(self, name, records)

    def finish_spy(run, *args, **kwargs):
        seen["finished"].append(run)
        return finish(run, *args, **kwargs)

    monkeypatch.setattr(runs_mod.RunFolder, "write_records", records_spy)
    monkeypatch.setattr(runner_mod, "finish_run", finish_spy)
    monkeypatch.setattr(finish_mod, "finish_run", finish_spy)  # eval and probe finishers
    return seen


def _paths(runs) -> list:
    return [getattr(run, "path", run) for run in runs]


def _tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_finish_run_draws_then_summarizes_then_reports(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    order = []

    def figures(run_dir):
        order.append((run_dir / "summary.json").exists())
        path = run_dir / "figures" / "a.png"
        path.parent.mkdir()
        path.write_bytes(b"\x89PNG fake")
        return [path, None]

    drawn, report = finish_run(tmp_path, {"findings": {"verdict": "it holds"}}, figures,
                               title="t")
    assert order == [False]  # the figures come before summary.json marks the run finished
    assert drawn == [tmp_path / "figures" / "a.png"]
    assert read_json(tmp_path / "summary.json") == {"findings": {"verdict": "it holds"}}
    page = report.read_text()
    assert report == tmp_path / "report.html" and "it holds" in page and "a.png" in page


def test_eval_run_folder(tiny_model_dir, tmp_path, spies):
    out = tmp_path / "run"
    res = cli.invoke(app, ["eval", "--model", str(tiny_model_dir), "--suite", "cf-capitals",
                           "--limit", "3", "--max-new-tokens", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} == {"config.json", "run.json", "items.jsonl",
                                               "summary.json", "figures", "report.html"}
    assert spies["records"] == ["items.jsonl"] and _paths(spies["finished"]) == [out]
    assert len(read_jsonl(out / "items.jsonl")) == 3
    assert (out / "figures" / "context_vs_memory.png").stat().st_size > 1000
    page = (out / "report.html").read_text()
    assert "<b>eval</b>" in page and "cf-capitals" in page and "context_vs_memory" in page
    assert f"report: {out / 'report.html'}" in res.output


def test_probe_run_folder(tiny_model_dir, tmp_path, spies):
    root = tmp_path / "runs"
    res = cli.invoke(app, ["probe", "knockout", "--model", str(tiny_model_dir), "--limit", "2",
                           "--all", "--window", "1", "--runs-dir", str(root)])
    assert res.exit_code == 0, res.output
    (run,) = (root / "probe-knockout").iterdir()
    assert {p.name for p in run.iterdir()} == {"config.json", "run.json", "records.jsonl",
                                               "summary.json", "figures", "report.html"}
    assert spies["records"] == ["records.jsonl"] and _paths(spies["finished"]) == [run]
    assert read_json(run / "config.json")["probe"] == "knockout"
    assert (run / "figures" / "knockout.png").stat().st_size > 1000
    page = (run / "report.html").read_text()
    assert "<b>probe-knockout</b>" in page and label("most_negative_layer") in page


def test_a_probe_refused_after_its_folder_was_made_leaves_nothing(tiny_model_dir, tmp_path,
                                                                  spies):
    out = tmp_path / "out"
    out.mkdir()  # there before, empty (a folder of the user's files is refused earlier)
    before = _tree(tmp_path)
    for where in (["--runs-dir", str(tmp_path / "runs")], ["--out", str(out)]):
        res = cli.invoke(app, ["probe", "knockout", "--model", str(tiny_model_dir), "--limit",
                               "2", "--window", "99", *where])  # the model has 2 layers
        assert res.exit_code == 2 and "larger than the model" in res.output, res.output
        assert _tree(tmp_path) == before
    assert spies["finished"] == []


def test_an_eval_refused_after_its_folder_was_made_leaves_nothing(tiny_model_dir, tmp_path,
                                                                  monkeypatch):
    api = importlib.import_module("knowflow.evaluation.run")  # knowflow.evaluate: a function

    made = []
    start = api.start_run

    def late_refusal(*args, **kwargs):
        made.append(start(*args, **kwargs))
        return made[-1]

    def bad_item(*args, **kwargs):
        assert (made[-1].path / "config.json").exists()  # the folder exists by now
        raise DataError("items.jsonl", "an item the model cannot score")

    monkeypatch.chdir(tmp_path)  # the run goes to ./runs/eval/<timestamp>
    monkeypatch.setattr(api, "start_run", late_refusal)
    monkeypatch.setattr(api, "evaluate_items", bad_item)
    res = cli.invoke(app, ["eval", "--model", str(tiny_model_dir), "--suite", "cf-capitals",
                           "--limit", "2"], catch_exceptions=False)
    assert res.exit_code == 2 and "cannot score" in res.output, res.output
    assert made and not (tmp_path / "runs").exists()
    assert not made[0].path.exists() and not made[0].path.parent.exists()


def _recorder(calls: list):
    def progress(done: int, total: int, stage: str = "") -> None:
        assert isinstance(done, int) and isinstance(total, int) and isinstance(stage, str)
        assert 0 <= done <= total
        calls.append((done, total, stage))
    return progress


def test_evaluate_and_probe_report_progress_with_one_signature(tiny_model_dir):
    import knowflow
    from knowflow.lens.load import load_model
    from knowflow.probes.examples import builtin_facts

    model, tok = load_model(str(tiny_model_dir), device="cpu")
    calls: list = []
    knowflow.evaluate(model, "cf-capitals", tokenizer=tok, limit=3, max_new_tokens=2,
                      progress=_recorder(calls))
    stages = {stage for _, _, stage in calls}
    assert {"cf-capitals: generate", "cf-capitals: loglik"} <= stages
    assert (3, 3, "cf-capitals: generate") in calls
    calls.clear()
    knowflow.probe(model, builtin_facts()[:2], tokenizer=tok, kind="project", known_only=False,
                   progress=_recorder(calls))
    assert calls and calls[-1][:2] == (2, 2)


def test_the_cli_bar_takes_reports_with_and_without_a_stage():
    from rich.console import Console

    from knowflow.cli.progress import Bars

    console = Console(file=open("/dev/null", "w"), force_terminal=False)  # noqa: SIM115
    with Bars("finetuning", console=console) as bar:
        bar(1, 4)
        bar(2, 4)
        bar(1, 3, "cf-bio: loglik")
    tasks = {t.description: (t.completed, t.total) for t in bar.bars.tasks}
    assert tasks == {"finetuning": (2, 4), "cf-bio: loglik": (1, 3)}
    console.file.close()


def test_a_config_error_names_the_full_dotted_path(tmp_path):
    res = cli.invoke(app, ["run", "inversion-tiny", "--set", "sft.lr=-1", "--runs-dir",
                           str(tmp_path)])
    assert res.exit_code == 2 and "config field 'sft.lr'" in res.output, res.output
    res = cli.invoke(app, ["sft", "--set", "track.every=0", "--runs-dir", str(tmp_path)])
    assert res.exit_code == 2 and "config field 'track.every'" in res.output, res.output
    assert list(tmp_path.iterdir()) == []

