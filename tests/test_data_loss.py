"""A user's own files are never taken for a knowflow run or written over (data
loss): a folder is a run only by the `run.json` marker knowflow writes, never by its parent's
name or a config.json that looks like one; the Python API's `.save()` and `.write()` go through
the same output check as the CLI, inputs included."""

import json

import pytest
from typer.testing import CliRunner

import knowflow
from knowflow.cli import app
from knowflow.errors import KnowflowError
from knowflow.store.identity import run_command
from knowflow.store.outputs import check_out_dir

runner = CliRunner()
ROWS = [{"instruction": "Where is the Eiffel Tower?", "input": "The Eiffel Tower is in Paris.",
         "output": "Paris"},
        {"instruction": "Who wrote Hamlet?", "input": "Hamlet was written by Shakespeare.",
         "output": "Shakespeare"}]


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _user_folder(root, parent):
    """`root/parent/mine` holding the user's own config.json and summary.json (no run.json),
    shaped like what the command in `parent` writes."""
    mine = root / parent / "mine"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text(json.dumps({"scoring": "both", "suites": ["x"],
                                                  "probe": "knockout"}))
    (mine / "summary.json").write_text(json.dumps({"my": "notes"}))
    return mine


@pytest.mark.parametrize("parent", ["eval", "probe-knockout", "explain", "cpi-toy"])
def test_a_folder_is_a_run_only_by_its_marker(tmp_path, parent):
    mine = _user_folder(tmp_path, parent)
    assert run_command(mine) is None
    with pytest.raises(KnowflowError, match="holds no knowflow run"):
        check_out_dir(mine, parent)
    (mine / "run.json").write_text(json.dumps({"command": parent, "config_sha256": "x"}))
    assert run_command(mine) == parent
    check_out_dir(mine, parent)  # a run of the same command may be written again


def test_eval_out_into_a_users_folder_named_eval_is_refused_untouched(tmp_path, tiny_model_dir):
    mine = _user_folder(tmp_path, "eval")
    before = _snapshot(mine)
    result = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--suite",
                                 "cf-capitals", "--limit", "2", "--out", str(mine)])
    assert result.exit_code == 2, result.output
    assert "holds no knowflow run" in result.output
    assert _snapshot(mine) == before


def test_api_save_never_replaces_the_users_files(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    data = folder / "augmented.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    before = _snapshot(folder)
    res = knowflow.augment(str(data), ratio=1.0)
    assert res.summary["n_rows"] == 2
    with pytest.raises(KnowflowError):
        res.save(folder)
    assert _snapshot(folder) == before
    saved = res.save(tmp_path / "new")  # a new folder is fine, and is a run by its marker
    assert run_command(saved) == "augment"


def test_api_save_refuses_a_run_folder_holding_the_input(tmp_path):
    res = knowflow.augment("builtin", ratio=0.5)
    run = res.save(tmp_path / "aug")
    data = run / "augmented.jsonl"
    again = knowflow.augment(str(data), ratio=0.5)
    before = data.read_bytes()
    with pytest.raises(KnowflowError, match="an input is inside the output folder"):
        again.save(run)
    assert data.read_bytes() == before


def test_curate_write_never_replaces_its_input(tmp_path, tiny_model_dir):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    before = data.read_bytes()
    res = knowflow.curate(str(tiny_model_dir), str(data), drop=0.5)
    with pytest.raises(KnowflowError, match="would replace the input"):
        res.write(data)
    assert data.read_bytes() == before
    kept, scores, _ = res.write(tmp_path / "kept.jsonl")
    assert kept.exists() and len(scores.read_text().splitlines()) == 2


def test_a_run_over_an_earlier_run_holding_the_users_file_is_refused(tmp_path, tiny_model_dir):
    """A new run replaces the whole folder of an earlier run of the same command, so a file
    the user put inside that earlier run would go with it: refused before the model loads,
    the earlier run and the user's file untouched. The earlier run's own files (run.json's
    `files`) are replaced as before."""
    out = tmp_path / "ev"
    args = ["eval", "--model", str(tiny_model_dir), "--suite", "cf-capitals", "--limit", "2",
            "--scoring", "loglik", "--threads", "1", "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    listed = json.loads((out / "run.json").read_text())["files"]
    assert set(listed) == {p.name for p in out.iterdir() if p.name != ".knowflow.lock"}
    assert runner.invoke(app, args).exit_code == 0  # its own files only: replaced
    (out / "notes-inside.txt").write_text("mine")

    def tree():
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
                if p.is_file()}

    before = tree()
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "notes-inside.txt" in result.output and "did not write" in result.output
    assert tree() == before
