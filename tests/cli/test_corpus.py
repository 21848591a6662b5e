"""The bad-input corpus (tests/corpus/cases.py): every case exits with its code and message,
in one `error:` line, with no traceback, and leaves its folder exactly as it was."""

import contextlib
import shlex
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from corpus.cases import CASES
from corpus.cases_boundary import BOUNDARY_CASES, write_boundary_files
from corpus.files import write_inputs, write_runs
from corpus.valid import VALID, write_valid
from helpers import load_benchmark
from knowflow.cli import app

runner = CliRunner()
ALL_CASES = CASES + BOUNDARY_CASES
faults = load_benchmark("faults/fault_matrix")


def _snapshot(root: Path, folder_times: bool = True) -> dict[str, tuple]:
    """Every path under `root` with its kind, size and modification time (a folder's time
    left out without `folder_times`: a write that failed and was taken back still touched
    its folder)."""
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, None if p.is_dir() and
                                       not folder_times else p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_bad_input_is_one_clear_line(case, tmp_path, tiny_model_dir, monkeypatch):
    if case.cuda is False and torch.cuda.is_available():
        pytest.skip("the message is for a machine without CUDA")
    write_inputs(tmp_path)
    write_runs(tmp_path, str(tiny_model_dir))
    write_boundary_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    for name, value in case.env:
        monkeypatch.setenv(name, value)
    before = _snapshot(tmp_path, folder_times=not case.fault)
    args = [a.format(model=tiny_model_dir) for a in shlex.split(case.args)]
    with faults.inject(*case.fault) if case.fault else contextlib.nullcontext():
        result = runner.invoke(app, args)
    out = result.output
    assert result.exit_code == case.code, out
    assert "Traceback" not in out and not isinstance(result.exception, AssertionError), out
    assert case.fragment in out, out
    if not case.usage:
        lines = [line for line in out.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1 and lines[-1] == errors[0], out
    after = _snapshot(tmp_path, folder_times=not case.fault)
    for gone in case.removes:  # removed; its folder is there, only its time changed
        parent = str(Path(gone).parent)
        assert not (tmp_path / gone).exists() and (tmp_path / parent).is_dir(), gone
        before = {p: v for p, v in before.items() if p not in (gone, parent) and
                  not p.startswith(f"{gone}/")}
        after.pop(parent)
    assert after == before, "the refused command changed its folder"


@pytest.mark.parametrize("case", VALID, ids=[c.args for c in VALID])
def test_valid_input_runs(case, tmp_path, tiny_model_dir, monkeypatch):
    write_valid(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = [a.format(model=tiny_model_dir) for a in shlex.split(case.args)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and case.fragment in result.output, result.output
