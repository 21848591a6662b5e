"""The run writer (`knowflow.store.run_folder`): config.json first, the records, summary.json;
a refused run leaves the filesystem as it was; `Progress` is the one callback type."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from knowflow.errors import ConfigError, DataError, KnowflowError
from knowflow.store.files import atomic_write_text
from knowflow.store.identity import (
    CONFIG,
    IDENTITY,
    ITEMS,
    LOCK,
    RECORDS,
    SUMMARY,
    check_identity,
    is_finished,
)
from knowflow.store.outputs import check_out_files
from knowflow.store.run_folder import Progress, RunFolder, latest_unfinished, start_run


def _tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_start_run_writes_config_first_then_records_and_summary(tmp_path):
    run = start_run({"a": 1}, "eval", runs_dir=tmp_path / "runs")
    # staged: a hidden folder beside the target, renamed into place when complete
    assert run.path.parent == tmp_path / "runs" / "eval" and run.path.name.startswith(".")
    assert run.target.parent == run.path.parent and not run.target.exists()
    # before any work: the config, the run's identity, and its claim
    assert sorted(p.name for p in run.path.iterdir()) == [LOCK, CONFIG, IDENTITY]
    assert json.loads((run.path / IDENTITY).read_text()) == {
        "command": "eval", "config_sha256": hashlib.sha256(
            (run.path / CONFIG).read_bytes()).hexdigest()}
    run.write_records(ITEMS, [{"x": 1}, {"x": 2}])
    run.write_summary({"n": 2})
    assert [p.name for p in run.written] == [CONFIG, IDENTITY, ITEMS, SUMMARY]
    staging, final = run.path, run.target
    assert run.commit() == final == run.path
    assert not staging.exists() and sorted(p.name for p in final.iterdir()) == [
        CONFIG, ITEMS, IDENTITY, SUMMARY]  # no lock left
    assert json.loads((run.path / CONFIG).read_text()) == {"a": 1}
    assert [json.loads(line) for line in (run.path / ITEMS).read_text().splitlines()] == [
        {"x": 1}, {"x": 2}]
    assert json.loads((run.path / SUMMARY).read_text()) == {"n": 2}


def test_a_refused_new_run_leaves_nothing(tmp_path):
    before = _tree(tmp_path)
    with pytest.raises(DataError), start_run({"a": 1}, "probe-knockout",
                                             runs_dir=tmp_path / "runs" / "deep") as run:
        run.write_records(RECORDS, [{"x": 1}])
        raise DataError("items.jsonl", "bad input found late")
    assert _tree(tmp_path) == before  # the run folder and the folders made for it are gone


def test_a_failed_rerun_in_an_earlier_runs_folder_leaves_it_as_it_was(tmp_path):
    """An --out folder holding an earlier run of the same command stays intact until the
    new run is complete (a refusal, Ctrl-C or a bug leave it byte for byte), then the new
    run replaces it."""
    out = tmp_path / "out"
    with start_run({"a": 1}, "eval", out_dir=out) as first:
        first.write_records(ITEMS, [{"x": 0}])
        (first.path / "figures").mkdir()  # the run's own (run.json lists it)
        (first.path / "figures" / "old.png").write_bytes(b"png")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for exc in (KeyboardInterrupt(), DataError("x", "late"), OSError(28, "No space left")):
        with pytest.raises(type(exc)), start_run({"a": 2}, "eval", out_dir=out) as run:
            run.write_records(RECORDS, [{"x": 1}])
            raise exc
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
        assert _tree(tmp_path) == sorted([str(p.relative_to(tmp_path)) for p in before] + [
            "out", "out/figures"])
    with start_run({"a": 2}, "eval", out_dir=out) as run:
        run.write_records(RECORDS, [{"x": 1}])
    assert sorted(p.name for p in out.iterdir()) == [CONFIG, RECORDS, IDENTITY]
    assert json.loads((out / CONFIG).read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging or old folder left


@pytest.mark.parametrize("setup,message", [
    (lambda out: (out / "config.json").write_text('{"mine": 1}'), "holds no knowflow run"),
    (lambda out: (out / "notes.txt").write_text("mine"), "not empty and holds no knowflow run"),
    (lambda out: start_run({}, "cpi-toy", out_dir=out).commit(),
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
    run = start_run({}, "cpi-toy", runs_dir=tmp_path)
    run.commit()
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
    other = subprocess.run([sys.executable, "-c", "import sys; from knowflow.store.lock import "
                            "claim; claim(sys.argv[1])", str(run.path)], capture_output=True,
                           text=True)
    assert other.returncode == 1 and "another knowflow process" in other.stderr
    assert f"pid {os.getpid()}" in other.stderr
    run.commit()
    again = subprocess.run([sys.executable, "-c", "import sys; from knowflow.store.lock import "
                            "claim; claim(sys.argv[1])", str(run.path)])
    assert again.returncode == 0  # let go: the next process may write it


def test_resume_names_the_run_it_was_given_and_an_edited_config(tmp_path):
    run = start_run({"seed": 0}, "sft", runs_dir=tmp_path)
    run.commit()
    with pytest.raises(DataError, match="this is a `sft` run, not a `cpi-toy` run"):
        check_identity(run.path, "cpi-toy")
    check_identity(run.path, "sft")
    (run.path / CONFIG).write_text("{}")
    with pytest.raises(DataError, match="changed since the run started"):
        check_identity(run.path, "sft")


def test_a_resumable_run_is_kept_only_with_a_checkpoint_and_never_after_a_refusal(tmp_path):
    root = tmp_path / "runs"
    for exc in (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                DataError("x", "late"), RuntimeError("a bug"), KeyboardInterrupt()):
        with pytest.raises(type(exc)), start_run({}, "x", runs_dir=root,
                                                 resumable=True) as run:
            raise exc  # no checkpoint yet: nothing to resume
        assert not root.exists() and not run.kept
    for exc in (RuntimeError("a bug"), KeyboardInterrupt(), OSError(28, "No space left")):
        with pytest.raises(type(exc)), start_run({}, "x", runs_dir=root,
                                                 resumable=True) as run:
            atomic_write_text(run.path / "checkpoints" / "part.json", "{}")
            raise exc
        assert run.kept and run.path.parent == root / "x" and not run.path.name.startswith(".")
        assert json.loads((run.path / IDENTITY).read_text())["in_progress"] is True
        assert latest_unfinished(root, "x") == run.path
    with pytest.raises(DataError), start_run({}, "y", runs_dir=root, resumable=True) as run:
        atomic_write_text(run.path / "checkpoints" / "part.json", "{}")
        raise DataError("x", "bad input found late")  # a refusal: never kept
    assert not (root / "y").exists()


def test_resume_after_a_kill_before_the_first_checkpoint_removes_its_staging_folder(tmp_path):
    """SIGKILL before a run's first checkpoint leaves its hidden staging folder (nothing can
    clean up after SIGKILL): `--resume` finds no run, removes what the killed process left and
    says so (it held no checkpoint, so nothing is lost)."""
    code = ("import os, signal, sys; from knowflow.store.run_folder import start_run; "
            "start_run({'a': 1}, 'x', runs_dir=sys.argv[1], resumable=True); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    for _ in range(2):
        killed = subprocess.run([sys.executable, "-c", code, str(tmp_path / "runs")])
        assert killed.returncode == -9
    left = list((tmp_path / "runs" / "x").iterdir())  # the second start swept the first's
    assert len(left) == 1 and ".staging." in left[0].name
    with pytest.raises(ConfigError) as err:
        latest_unfinished(tmp_path / "runs", "x")
    message = str(err.value)
    assert message.startswith("--resume: no unfinished run of 'x'")
    assert left[0].name in message
    assert "found and removed: it held no checkpoint, so nothing was lost" in message
    assert list((tmp_path / "runs" / "x").iterdir()) == []


def test_a_resumed_run_is_never_removed_and_loses_its_mark_when_complete(tmp_path):
    with pytest.raises(KeyboardInterrupt), start_run({}, "x", runs_dir=tmp_path,
                                                     resumable=True) as run:
        atomic_write_text(run.path / "checkpoints" / "part.json", "{}")
        raise KeyboardInterrupt
    kept = run.path
    for exc in (KnowflowError("late"), KeyboardInterrupt()):
        with pytest.raises(type(exc)), RunFolder(kept).claim():  # a resumed run
            raise exc
        assert (kept / CONFIG).exists() and not is_finished(kept)
    with RunFolder(kept).claim() as resumed:
        resumed.write_summary({"n": 1})
    assert is_finished(kept) and "in_progress" not in json.loads((kept / IDENTITY).read_text())


def test_progress_is_done_total_then_an_optional_stage():
    hints = typing.get_type_hints(Progress.__call__)
    assert list(hints) == ["done", "total", "stage", "return"]
    assert (hints["done"], hints["total"], hints["stage"]) == (int, int, str)
