"""A write that fails for want of space names the file, the room left and what was kept
(a bare "file system: no space left on the device" would name nothing)."""

import errno
import os

import pytest

from knowflow.cli.errors import describe
from knowflow.store.files import atomic_write_json


def test_a_full_disk_names_the_file_and_the_free_space(tmp_path, monkeypatch):
    target = tmp_path / "run" / "summary.json"
    target.parent.mkdir()
    target.write_text('{"kept": true}\n')

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as caught:
        atomic_write_json(target, {"new": 1})
    message, code = describe(caught.value)
    assert code == 2
    assert message.startswith(f"{target}: no space left on the device (")
    assert "MiB free there; the file was not written" in message
    assert target.read_text() == '{"kept": true}\n'  # the old file is untouched
    assert [p.name for p in target.parent.iterdir()] == ["summary.json"]  # no temp left
