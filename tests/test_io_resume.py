"""Atomic folders and files under a resume: what a killed run leaves is replaced, not an error."""

from knowflow.io import atomic_write_folder
from knowflow.runs import remove_stale_temps


def test_a_folder_left_by_an_earlier_attempt_is_replaced(tmp_path):
    """A LoRA model folder has no config.json (the marker): a resume that rewrites it must
    swap the old one out instead of failing on the non-empty target."""
    target = tmp_path / "model"
    target.mkdir()
    (target / "adapter_config.json").write_text('{"old": true}')
    atomic_write_folder(target, lambda d: (d / "adapter_config.json").write_text('{"new": 1}'),
                        marker="config.json")
    assert (target / "adapter_config.json").read_text() == '{"new": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_finished_folder_with_its_marker_is_kept(tmp_path):
    target = tmp_path / "cache"
    target.mkdir()
    (target / "config.json").write_text("theirs")
    atomic_write_folder(target, lambda d: (d / "config.json").write_text("mine"),
                        marker="config.json")
    assert (target / "config.json").read_text() == "theirs"


def test_stale_temps_of_a_killed_run_are_removed(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    (tmp_path / ".metrics.jsonl.abc.tmp").write_text("{")
    (tmp_path / ".model.x1y2").mkdir()
    (tmp_path / ".model.x1y2" / "adapter_config.json").write_text("{")
    remove_stale_temps(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
