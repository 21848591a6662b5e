"""The run writer (`knowflow.runs`): config.json first, the records, summary.json; a refused
run leaves the filesystem as it was; `Progress` is the one callback type."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from knowflow.errors import DataError, KnowflowError
from knowflow.io import atomic_write_text
from knowflow.outputs import IDENTITY, LOCK, check_out_files
from knowflow.runs import (
    CONFIG,
    ITEMS,
    RECORDS,
    SUMMARY,
    Progress,
    RunFolder,
    check_identity,
    start_run,
)


def _tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_start_run_writes_config_first_then_records_and_summary(tmp_path):
    run = start_run({"a": 1}, "eval", runs_root=tmp_path / "runs")
    assert run.path.parent == tmp_path / "runs" / "eval"
    # before any work: the config, the run's identity, and its claim
    assert sorted(p.name for p in run.path.iterdir()) == [LOCK, CONFIG, IDENTITY]
    assert json.loads((run.path / IDENTITY).read_text()) == {
        "command": "eval", "config_sha256": hashlib.sha256(
            (run.path / CONFIG).read_bytes()).hexdigest()}
    run.write_records(ITEMS, [{"x": 1}, {"x": 2}])
    run.write_summary({"n": 2})
    assert json.loads((run.path / CONFIG).read_text()) == {"a": 1}
    assert [json.loads(line) for line in (run.path / ITEMS).read_text().splitlines()] == [
        {"x": 1}, {"x": 2}]
    assert json.loads((run.path / SUMMARY).read_text()) == {"n": 2}
    assert [p.name for p in run.written] == [CONFIG, IDENTITY, ITEMS, SUMMARY]
    run.close()
    assert not (run.path / LOCK).exists()


def test_a_refused_new_run_leaves_nothing(tmp_path):
    before = _tree(tmp_path)
    run = start_run({"a": 1}, "probe-knockout", runs_root=tmp_path / "runs" / "deep")
    with pytest.raises(DataError), run.refusals():
        run.write_records(RECORDS, [{"x": 1}])
        raise DataError("items.jsonl", "bad input found late")
    assert _tree(tmp_path) == before  # the run folder and the folders made for it are gone


def test_a_refused_rerun_in_an_earlier_runs_folder_removes_only_what_it_created(tmp_path):
    """A refusal or Ctrl-C deleted a config.json the run had written over: clean-up removes
    only the files the run created."""
    out = tmp_path / "out"
    first = start_run({"a": 1}, "eval", out_dir=out)
    first.write_records(ITEMS, [{"x": 0}])
    first.close()
    (out / "figures").mkdir()
    (out / "figures" / "old.png").write_bytes(b"png")
    (out / "notes.txt").write_text("kept")
    before = _tree(tmp_path)
    run = start_run({"a": 2}, "eval", out_dir=out)
    with pytest.raises(KeyboardInterrupt), run.refusals(interrupt=True):
        run.write_records(RECORDS, [{"x": 1}])
        raise KeyboardInterrupt
    assert _tree(tmp_path) == before  # records.jsonl (created) gone; the rest kept
    assert json.loads((out / CONFIG).read_text()) == {"a": 2}  # written over, never removed
    assert (out / "notes.txt").read_text() == "kept"


@pytest.mark.parametrize("setup,message", [
    (lambda out: (out / "config.json").write_text('{"mine": 1}'), "holds no knowflow run"),
    (lambda out: (out / "notes.txt").write_text("mine"), "not empty and holds no knowflow run"),
    (lambda out: start_run({}, "cpi-toy", out_dir=out).close(),
     "holds a run of `cpi-toy`, not of `eval`"),
])
def test_an_out_folder_of_the_users_or_another_commands_is_refused(tmp_path, setup, message):
    out = tmp_path / "out"
    out.mkdir()
    setup(out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(KnowflowError, match=message):
        start_run({"a": 1}, "eval", out_dir=out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_no_output_replaces_an_input_a_run_file_a_device_or_another_output(tmp_path):
    run = start_run({}, "cpi-toy", runs_root=tmp_path)
    run.close()
    data = tmp_path / "x.scores.jsonl"
    data.write_text("{}\n")
    out = tmp_path / "x.jsonl"
    cases = [
        ({"output": out, "scores": out.with_suffix(".scores.jsonl")}, "replace the input"),
        ({"output": tmp_path / "k.png", "histogram": tmp_path / "k.png"}, "written over"),
        ({"report": run.path / CONFIG}, "a file of the knowflow run"),
        ({"output": Path(os.devnull)}, "not a regular file"),
    ]
    for outputs, message in cases:
        with pytest.raises(KnowflowError, match=message):
            check_out_files(outputs, inputs=[data])
    check_out_files({"report": run.path / "report.html"})  # a run's own page: rewritten
    with pytest.raises(KnowflowError, match="not a regular file"):
        atomic_write_text(os.devnull, "x")  # the writer itself never replaces a device


def test_two_processes_cannot_write_one_run_folder(tmp_path):
    run = start_run({"a": 1}, "eval", out_dir=tmp_path / "out")
    other = subprocess.run([sys.executable, "-c", "import sys; from knowflow.outputs import "
                            "claim; claim(sys.argv[1])", str(run.path)], capture_output=True,
                           text=True)
    assert other.returncode == 1 and "another knowflow process" in other.stderr
    assert f"pid {os.getpid()}" in other.stderr
    run.close()
    again = subprocess.run([sys.executable, "-c", "import sys; from knowflow.outputs import "
                            "claim; claim(sys.argv[1])", str(run.path)])
    assert again.returncode == 0  # let go: the next process may write it


def test_resume_names_the_run_it_was_given_and_an_edited_config(tmp_path):
    run = start_run({"seed": 0}, "sft", runs_root=tmp_path)
    run.close()
    with pytest.raises(DataError, match="this is a `sft` run, not a `cpi-toy` run"):
        check_identity(run.path, "cpi-toy")
    check_identity(run.path, "sft")
    (run.path / CONFIG).write_text("{}")
    with pytest.raises(DataError, match="changed since the run started"):
        check_identity(run.path, "sft")


def test_out_of_memory_is_refused_but_a_bug_and_ctrl_c_keep_the_run(tmp_path):
    root = tmp_path / "runs"
    run = start_run({}, "x", runs_root=root)
    with pytest.raises(RuntimeError), run.refusals():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not root.exists()
    for exc in (RuntimeError("a bug"), KeyboardInterrupt()):
        run = start_run({}, "x", runs_root=root)
        with pytest.raises(type(exc)), run.refusals():  # no interrupt=True: resumable
            raise exc
        assert (run.path / CONFIG).exists()


def test_a_resumed_run_is_never_removed(tmp_path):
    (tmp_path / CONFIG).write_text("{}")
    run = RunFolder(tmp_path)  # existed=None: a resumed run
    with pytest.raises(KnowflowError), run.refusals(interrupt=True):
        raise KnowflowError("late")
    assert (tmp_path / CONFIG).exists()


def test_progress_is_done_total_then_an_optional_stage():
    hints = typing.get_type_hints(Progress.__call__)
    assert list(hints) == ["done", "total", "stage", "return"]
    assert (hints["done"], hints["total"], hints["stage"]) == (int, int, str)
