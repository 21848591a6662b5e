"""The run writer (`knowflow.runs`): config.json first, the records, summary.json; a refused
run leaves the filesystem as it was; `Progress` is the one callback type."""

from __future__ import annotations

import json
import typing

import pytest

from knowflow.errors import DataError, KnowflowError
from knowflow.runs import CONFIG, ITEMS, RECORDS, SUMMARY, Progress, RunFolder, start_run


def _tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_start_run_writes_config_first_then_records_and_summary(tmp_path):
    run = start_run({"a": 1}, "eval", runs_root=tmp_path / "runs")
    assert run.path.parent == tmp_path / "runs" / "eval"
    assert [p.name for p in run.path.iterdir()] == [CONFIG]  # before any work
    run.write_records(ITEMS, [{"x": 1}, {"x": 2}])
    run.write_summary({"n": 2})
    assert json.loads((run.path / CONFIG).read_text()) == {"a": 1}
    assert [json.loads(line) for line in (run.path / ITEMS).read_text().splitlines()] == [
        {"x": 1}, {"x": 2}]
    assert json.loads((run.path / SUMMARY).read_text()) == {"n": 2}
    assert [p.name for p in run.written] == [CONFIG, ITEMS, SUMMARY]


def test_a_refused_new_run_leaves_nothing(tmp_path):
    before = _tree(tmp_path)
    run = start_run({"a": 1}, "probe-knockout", runs_root=tmp_path / "runs" / "deep")
    with pytest.raises(DataError), run.refusals():
        run.write_records(RECORDS, [{"x": 1}])
        raise DataError("items.jsonl", "bad input found late")
    assert _tree(tmp_path) == before  # the run folder and the folders made for it are gone


def test_a_refused_run_in_an_existing_out_folder_removes_only_its_files(tmp_path):
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    (out / "mine.txt").write_text("kept")
    (out / "figures" / "old.png").write_bytes(b"png")
    before = _tree(tmp_path)
    run = start_run({"a": 1}, "eval", out_dir=out)
    with pytest.raises(KeyboardInterrupt), run.refusals(interrupt=True):
        run.write_records(ITEMS, [{"x": 1}])
        raise KeyboardInterrupt
    assert _tree(tmp_path) == before
    assert (out / "mine.txt").read_text() == "kept"


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
