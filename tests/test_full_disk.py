"""A full disk anywhere a run writes: one clear refusal (OSError ENOSPC naming the path, exit
code 2 at the command line) and nothing half-made left: at a run's start, between a piece's
files, at its completion, in a Trainer checkpoint or a cache entry written by another library
(which says "no space" in its own words), and run files of the wrong kind refused before a
resume works."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from safetensors import SafetensorError

import knowflow.store.files as files
from knowflow.errors import DataError
from knowflow.store.checks import check_run_files
from knowflow.store.identity import IDENTITY
from knowflow.store.run_folder import PartStore, has_checkpoint, start_run
from knowflow.store.staging import staged_dir
from knowflow.train.sft import stage_checkpoints

FULL = "Error while serializing: I/O error: No space left on device (os error 28)"


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_at_a_runs_start_leaves_nothing_and_names_the_run(tmp_path, monkeypatch):
    """The claim's pid line is the run's first byte: a full disk there leaves neither the
    staging folder nor the runs folder made for it."""
    import knowflow.store.lock as lock

    with monkeypatch.context() as m, pytest.raises(OSError) as err:
        m.setattr(lock.os, "write", _no_space)
        start_run({"a": 1}, "x", runs_dir=tmp_path / "runs", resumable=True)
    assert err.value.errno == errno.ENOSPC
    assert Path(err.value.filename).parent == tmp_path / "runs" / "x"
    assert list(tmp_path.iterdir()) == []


def test_a_piece_without_its_record_is_no_checkpoint(tmp_path):
    """`ocr-toy` writes a part's weights, then its record: a full disk between the two leaves
    no checkpoint, so the staged run is removed, not kept as resumable."""
    assert not has_checkpoint(tmp_path)
    files.atomic_write_bytes(tmp_path / "checkpoints" / "part_ov.npz", b"weights")
    assert not has_checkpoint(tmp_path)
    PartStore(tmp_path).save("part", [], {})
    assert has_checkpoint(tmp_path)
    job = tmp_path / "job"
    (job / "checkpoints" / "a-seed0" / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    assert not has_checkpoint(job)
    (job / "checkpoints" / "a-seed0" / "checkpoints" / "checkpoint-2" /
     "trainer_state.json").write_text("{}")
    assert has_checkpoint(job)  # a job's Trainer checkpoint inside a piece's folder


def test_a_full_disk_at_a_runs_completion_says_the_run_is_kept(tmp_path, monkeypatch):
    """The last write (run.json losing its in-progress mark) fails: the published run stays,
    still in progress, and the error says so (for the message: `--resume` continues it)."""
    with pytest.raises(OSError) as err, start_run({}, "x", runs_dir=tmp_path,
                                                  resumable=True) as run:
        PartStore(run.path).save("part", [], {})  # published, in progress
        monkeypatch.setattr(files, "fill", lambda fd, data, path: (os.close(fd),
                                                                   _no_space()))
    kept = err.value.knowflow_kept
    assert kept is not None and kept.parent == tmp_path / "x" and kept.is_dir()
    assert json.loads((kept / IDENTITY).read_text())["in_progress"] is True


class _Trainer:
    """What `stage_checkpoints` uses of a Trainer, saving as `write` says."""

    class args:  # noqa: N801
        world_size, should_save, save_total_limit = 1, False, None

    class state:  # noqa: N801
        global_step, best_model_checkpoint = 2, None

    def __init__(self, out: Path, write):
        self.out, self.write = out, write

    def _get_output_dir(self, trial=None) -> str:
        return str(self.out)

    def _save_checkpoint(self, model, trial) -> None:
        folder = Path(self._get_output_dir()) / "checkpoint-2"
        folder.mkdir()
        (folder / "optimizer.pt").write_bytes(b"PK\x03\x04partial")
        self.write()


def _serializing():
    raise SafetensorError(FULL)


def _zip_writer():
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 10880 vs "
                       "10768")


@pytest.mark.parametrize("write,free", [(_serializing, 10**12), (_zip_writer, 0)])
def test_a_full_disk_in_a_trainer_checkpoint_is_enospc_naming_it(tmp_path, monkeypatch,
                                                                  write, free):
    """safetensors says "No space left on device (os error 28)" in a SafetensorError; torch's
    zip writer only "unexpected pos", with the disk left full: both are the full disk they
    are, naming the checkpoint, and no half-saved checkpoint is left."""
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, free))
    out = tmp_path / "run" / "checkpoints"
    out.mkdir(parents=True)
    trainer = _Trainer(out, write)
    stage_checkpoints(trainer)
    with pytest.raises(OSError) as err:
        trainer._save_checkpoint(None, None)
    assert err.value.errno == errno.ENOSPC
    assert err.value.filename == str(out / "checkpoint-2")
    assert list(out.iterdir()) == []


def test_another_writers_error_on_a_roomy_disk_is_its_own(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, 10**12))
    with pytest.raises(RuntimeError, match="unexpected pos"), staged_dir(tmp_path / "entry"):
        _zip_writer()
    assert list(tmp_path.iterdir()) == []


def test_a_cache_entry_on_a_full_disk_leaves_no_partial_entry(tmp_path):
    """A cache entry (`staged_dir(..., complete="config.json")`, as the model cache writes
    it) whose `save_pretrained` fills the disk: ENOSPC naming the entry; neither the entry, its
    staging folder nor the cache folders made for it remain."""
    target = tmp_path / "cache" / "models" / "m"
    with pytest.raises(OSError) as err, staged_dir(target, complete="config.json") as folder:
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"\0" * 64)
        _serializing()
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert isinstance(err.value.__cause__, SafetensorError)
    assert list(tmp_path.iterdir()) == []


def _run(root: Path) -> Path:
    run = root / "runs" / "cpi-toy" / "1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / IDENTITY).write_text(json.dumps({"command": "cpi-toy", "in_progress": True}))
    return run


@pytest.mark.parametrize("make,where,what", [
    (lambda run: (run / "checkpoints").rmdir() or (run / "checkpoints").write_text("x"),
     "checkpoints", "a file, not a folder"),
    (lambda run: (run / "summary.json").mkdir(), "summary.json", "a folder, not a file"),
    (lambda run: (run / "metrics.jsonl").mkdir(), "metrics.jsonl", "a folder, not a file"),
    (lambda run: (run / "checkpoints" / "checkpoint-2").write_text("x"),
     "checkpoints/checkpoint-2", "a file, not a checkpoint folder"),
    (lambda run: (run / "checkpoints" / "part.json").mkdir(), "checkpoints/part.json",
     "a folder, not a checkpoint file"),
])
def test_run_files_of_the_wrong_kind_are_refused_before_a_resume_works(tmp_path, make, where,
                                                                         what):
    """A folder where summary.json goes, a file where checkpoints/ goes: refused when the
    resume starts, naming it, not after the run has been recomputed and rewritten."""
    run = _run(tmp_path)
    make(run)
    with pytest.raises(DataError) as err:
        check_run_files(run, resume=True)
    assert str(err.value).startswith(f"{run / where}: {what}")
    assert f"--resume --run-dir {run}" in str(err.value)


def test_a_hub_dataset_cache_entry_on_a_full_disk_leaves_no_partial_entry(tmp_path,
                                                                         monkeypatch):
    """`lay_out_hub_dataset` (what a hub download leaves in the datasets cache): a full disk
    at its second file left the first in the cache, an entry `datasets` would read; now the
    entry is staged, and neither it nor the cache folders made for it remain."""
    pytest.importorskip("datasets")
    from knowflow.data.hub_cache import lay_out_hub_dataset

    rows = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(3)]
    real, count = files.fill, [0]

    def fill(fd: int, data: bytes, path: Path) -> None:
        count[0] += 1
        if count[0] == 2:
            os.close(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(fd, data, path)

    monkeypatch.setattr(files, "fill", fill)
    with pytest.raises(OSError) as err:
        lay_out_hub_dataset(tmp_path / "hf", "org/name", rows)
    assert err.value.errno == errno.ENOSPC and count[0] == 2
    assert not (tmp_path / "hf").exists()
    monkeypatch.setattr(files, "fill", real)
    entry = lay_out_hub_dataset(tmp_path / "hf", "org/name", rows)
    assert sorted(p.name for p in entry.iterdir()) == ["dataset_info.json", "name-test.arrow"]


def test_a_learned_estimator_on_a_full_disk_leaves_no_cache_folders(tmp_path, monkeypatch):
    """`explain fit`'s estimator ($KNOWFLOW_CACHE/models/<model>.explain-learned.json): a full
    disk at its write left the cache folders made for it (save_estimator made them itself)."""
    from knowflow.explanation.estimator import Estimator, save_estimator

    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(files, "fill", lambda fd, data, path: os.close(fd) or _no_space())
    with pytest.raises(OSError) as err:
        save_estimator(Estimator((0.5,), 1, 1), "org/m")
    assert err.value.errno == errno.ENOSPC and err.value.filename.endswith(
        "org--m.explain-learned.json")
    assert list(tmp_path.iterdir()) == []
