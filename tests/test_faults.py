"""Nothing half-written, ever: a few cells of `benchmarks/faults/fault_matrix.py`.

A fault (ENOSPC, an exception, SIGTERM) injected at one write through `knowflow.store.files`
leaves the target untouched (an earlier output of the same command kept byte for byte), or, for a
run that checkpoints, a run marked in progress that `--resume` completes to the records of
an uninterrupted run. The whole matrix: `python benchmarks/faults/fault_matrix.py`.
"""

from __future__ import annotations

import json

import pytest

from helpers import load_benchmark
from knowflow.store.files import atomic_write_text, file_group
from knowflow.store.staging import staged_dir

fm = load_benchmark("faults/fault_matrix")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    base = tmp_path_factory.mktemp("faults")
    return fm.Matrix(base / "inputs", fm.setup(base / "inputs")), base


@pytest.mark.parametrize("name,fault,at", [
    ("eval", "enospc", 3),      # items.jsonl of a rewrite of an earlier eval
    ("eval", "sigterm", -1),    # the last write: report.html
    ("curate", "exception", 2),  # the scores, after the kept rows
    ("augment", "enospc", 1),
    ("export", "sigterm", 2),
    ("report", "enospc", 1),
])
def test_a_fault_leaves_the_target_as_it_was(matrix, name, fault, at):
    m, base = matrix
    writes = m.ref(base, name)[1]
    assert m.cell(base, name, fault, at if at > 0 else writes) == "untouched", m.rows[-1]
    assert m.rows[-1][3] in (1, 2, 143)  # a one-line refusal, an internal error, SIGTERM


@pytest.mark.parametrize("name", ["run", pytest.param("sft", marks=pytest.mark.slow)])
def test_a_checkpointing_run_is_untouched_before_its_first_checkpoint_then_resumable(
        matrix, name):
    """`run cpi-toy` and `sft`: a fault before the first checkpoint leaves nothing; after
    it, a run marked in progress that `--resume` completes to the same records."""
    m, base = matrix
    writes = m.ref(base, name)[1]
    assert m.cell(base, name, "enospc", 1) == "untouched"  # config.json
    assert m.cell(base, name, "sigterm", writes) == "resumed-equal", m.rows[-1]
    assert m.cell(base, name, "exception", writes - 1) == "resumed-equal", m.rows[-1]


def test_the_judge_sees_a_partial_folder(matrix, tmp_path):
    """The check can fail: a folder written in place and left half-done is PARTIAL."""
    m, _ = matrix
    before = fm.snapshot(tmp_path)
    atomic_write_text(tmp_path / "out" / "config.json", "{}")
    outcome = m.judge(tmp_path, before, fm.COMMANDS["eval"], [])
    assert outcome.startswith("PARTIAL") and "out" in outcome


def test_staged_dir_publishes_whole_or_nothing_and_keeps_other_files(tmp_path):
    target = tmp_path / "tasks"
    with pytest.raises(OSError), staged_dir(target) as stage:
        atomic_write_text(stage / "a.yaml", "a")
        raise OSError(28, "No space left on device")
    assert list(tmp_path.iterdir()) == []  # no staging folder, no target
    with staged_dir(target) as stage:
        atomic_write_text(stage / "a.yaml", "a")
    (target / "mine.txt").write_text("kept")
    with staged_dir(target) as stage:  # into a folder that holds other files: file by file
        atomic_write_text(stage / "a.yaml", "b")
    assert {p.name: p.read_text() for p in target.iterdir()} == {"a.yaml": "b",
                                                                 "mine.txt": "kept"}
    assert [p.name for p in tmp_path.iterdir()] == ["tasks"]


def test_a_file_group_renames_all_its_files_or_none(tmp_path):
    (tmp_path / "kept.jsonl").write_text("old\n")
    with pytest.raises(RuntimeError), file_group():
        atomic_write_text(tmp_path / "kept.jsonl", "new\n")
        atomic_write_text(tmp_path / "kept.scores.jsonl", json.dumps({}) + "\n")
        raise RuntimeError("the figure failed")
    assert [p.name for p in tmp_path.iterdir()] == ["kept.jsonl"]
    assert (tmp_path / "kept.jsonl").read_text() == "old\n"
    with file_group():
        atomic_write_text(tmp_path / "kept.jsonl", "new\n")
        assert (tmp_path / "kept.jsonl").read_text() == "old\n"  # not before the end
    assert (tmp_path / "kept.jsonl").read_text() == "new\n"


def test_a_published_page_names_its_folder_not_the_staging_one(matrix):
    m, base = matrix
    out = m.ref(base, "eval")[0] / "out"
    page = (out / "report.html").read_text()
    assert f"<small>{out}</small>" in page and ".staging." not in page


def test_what_a_killed_process_left_is_swept_and_nothing_else(tmp_path):
    """A staging folder whose writer died (its lock file left, no live claim) and a folder
    moved aside for a replacement that never came are cleaned up by the next stage beside
    them; a live one, and hidden folders of the user's, are not."""
    from knowflow.store.identity import LOCK
    from knowflow.store.staging import publish, stage_dir

    dead = tmp_path / ".run.staging.abcd1234"
    dead.mkdir()
    (dead / LOCK).write_text("12345\n")  # SIGKILL: the claim died, the file stayed
    (dead / "config.json").write_text("{}")
    aside = tmp_path / ".out.old.abcd1234"
    (aside / "out").mkdir(parents=True)
    (aside / "out" / "summary.json").write_text("{}")  # killed mid-replacement
    mine = tmp_path / ".notes.old.abcd1234"
    mine.mkdir()
    (mine / "todo.txt").write_text("mine")  # the user's: not what a replacement leaves
    live = stage_dir(tmp_path / "other")
    stage_dir(tmp_path / "new")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert ".run.staging.abcd1234" not in names and ".out.old.abcd1234" not in names
    assert (tmp_path / "out" / "summary.json").exists()  # put back
    assert (mine / "todo.txt").read_text() == "mine" and live.is_dir()
    publish(live, tmp_path / "other")
    assert (tmp_path / "other").is_dir() and not live.exists()


def _full_disk(fd: int, data: bytes, path) -> None:
    import errno
    import os

    os.close(fd)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_write_takes_back_the_folders_made_for_it(tmp_path, monkeypatch):
    """A figure the full disk refused leaves no `figures/` behind (alone, or in a group)."""
    import knowflow.store.files as files

    (tmp_path / "kept").mkdir()
    monkeypatch.setattr(files, "fill", _full_disk)
    with pytest.raises(OSError) as err:
        files.atomic_write_bytes(tmp_path / "figures" / "deep" / "a.png", b"png")
    assert err.value.filename == str(tmp_path / "figures" / "deep" / "a.png")
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
    monkeypatch.undo()
    with pytest.raises(RuntimeError), file_group():
        atomic_write_text(tmp_path / "figures" / "a.png", "a")
        atomic_write_text(tmp_path / "figures" / "more" / "b.png", "b")
        atomic_write_text(tmp_path / "kept" / "c.png", "c")
        raise RuntimeError("the page failed")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept"]


def test_report_on_a_tracker_folder_with_a_full_disk_leaves_it_as_it_was(tmp_path):
    folder = tmp_path / "tracked"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"step": 10 * i, "cf_acc": cf, "n": 16}) + "\n"
        for i, cf in enumerate([0.3, 0.6, 0.35])))
    before = fm.snapshot(tmp_path)
    with fm.inject("enospc", 1):  # the figure
        res = fm.invoke(["report", str(folder)])
    assert res.exit_code == 2 and "no space left on the device" in res.output
    assert fm.snapshot(tmp_path) == before  # no figures/ folder left
