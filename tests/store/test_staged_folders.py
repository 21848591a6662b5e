"""Atomic folders and files under a resume: what a killed run leaves is replaced, not an error."""

import os
import tempfile
from pathlib import Path

from knowflow.store.checks import remove_stale_temps
from knowflow.store.staging import staged_dir


def test_a_folder_left_by_an_earlier_attempt_is_replaced(tmp_path):
    """A LoRA model folder has no config.json (the marker): a resume that rewrites it must
    swap the old one out instead of failing on the non-empty target."""
    target = tmp_path / "model"
    target.mkdir()
    (target / "adapter_config.json").write_text('{"old": true}')
    with staged_dir(target, complete="config.json") as stage:
        (stage / "adapter_config.json").write_text('{"new": 1}')
    assert (target / "adapter_config.json").read_text() == '{"new": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_finished_folder_with_its_marker_is_kept(tmp_path):
    target = tmp_path / "cache"
    target.mkdir()
    (target / "config.json").write_text("theirs")
    with staged_dir(target, complete="config.json") as stage:
        (stage / "config.json").write_text("mine")
    assert (target / "config.json").read_text() == "theirs"


def test_stale_temps_of_a_killed_run_are_removed(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    fd, tmp = tempfile.mkstemp(prefix=".metrics.jsonl.", suffix=".tmp", dir=tmp_path)
    os.close(fd)  # what atomic_write_bytes leaves when killed
    (tmp_path / "checkpoints").mkdir()
    fd, inner = tempfile.mkstemp(prefix=".a.json.", suffix=".tmp", dir=tmp_path / "checkpoints")
    os.close(fd)
    half = Path(tempfile.mkdtemp(prefix=".model.", dir=tmp_path))  # a temp folder's name
    (half / "adapter_config.json").write_text("{")
    old = Path(tempfile.mkdtemp(prefix=".model.old.", dir=tmp_path))
    remove_stale_temps(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "metrics.jsonl"]
    assert not list((tmp_path / "checkpoints").iterdir())
    assert not old.exists() and not Path(tmp).exists() and not Path(inner).exists()


def test_a_resume_keeps_the_users_hidden_folders(tmp_path):
    """`run --resume --run-dir RUN` deleted every dot-folder in RUN (.git, notebooks')."""
    for rel in (".git/objects/ab/.keep.abcdefgh.tmp", ".git/HEAD", ".ipynb_checkpoints/x.ipynb",
                ".cache.abcdefgh/keep"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("mine")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    remove_stale_temps(tmp_path)
    after = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    # only `.cache.abcdefgh` has the name of an atomic write's temp folder
    assert after == [p for p in before if not p.startswith(".cache.abcdefgh")]
