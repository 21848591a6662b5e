"""`knowflow` as a real process: exit codes, what reaches stderr, and Ctrl-C (SIGINT) during a
run: exit 130, one line naming the run, and the run continues with --resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def knowflow(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw}
    return subprocess.run([str(Path(sys.executable).parent / "knowflow"), *args], cwd=cwd,
                          text=True, timeout=300, **streams)


def test_bad_input_exits_2_with_one_line_and_no_traceback(tmp_path):
    res = knowflow("eval", "--device", "bogus", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: device 'bogus': unknown device; use auto, cpu, cuda, cuda:N or mps"]
    assert not list(tmp_path.iterdir())


def test_verbose_adds_the_full_traceback(tmp_path):
    (tmp_path / "afile").write_text("a file where a folder should be\n")
    res = knowflow("-v", "eval", "--out", "afile", cwd=tmp_path)
    assert res.returncode == 2
    assert "Traceback (most recent call last)" in res.stderr
    assert res.stderr.strip().splitlines()[-1] == ("error: afile: the output folder is a file; "
                                                   "give a folder path")


def _interrupt_when(proc: subprocess.Popen, ready, timeout: float = 240) -> None:
    """Send SIGINT to `proc` once `ready()` holds (polling), as Ctrl-C would."""
    end = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the run never got going"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)


@pytest.mark.slow
def test_ctrl_c_exits_130_and_the_run_resumes(tmp_path):
    args = ["run", "cpi-toy", "--runs-dir", "runs", "--set", "workers=1", "--set",
            "parts=inversion,c_only", "--set", "finetune.steps=1500", "--set",
            "finetune.eval_every=50"]
    exe = str(Path(sys.executable).parent / "knowflow")
    proc = subprocess.Popen([exe, *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    # once the first part is checkpointed, so that the resume has something to keep
    _interrupt_when(proc, lambda: any(tmp_path.glob("runs/cpi-toy/*/checkpoints/*.json")))
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal arrived")
    (run,) = (tmp_path / "runs" / "cpi-toy").iterdir()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [
        f"error: runs/cpi-toy/{run.name}: interrupted; continue it with `knowflow run cpi-toy "
        f"--resume --run-dir runs/cpi-toy/{run.name}`"]
    assert not (run / "summary.json").exists()
    res = knowflow("run", "cpi-toy", "--resume", "--run-dir", f"runs/cpi-toy/{run.name}",
                   cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert {"inversion", "c_only"} <= set(summary)


def test_closed_stdout_runs_without_a_traceback(tmp_path):
    res = subprocess.run([str(Path(sys.executable).parent / "knowflow"), "list"], cwd=tmp_path,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         timeout=300, pass_fds=(), close_fds=True,
                         preexec_fn=lambda: os.close(1))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr


def test_a_deleted_working_folder_is_one_line_exit_2(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    code = ("import os, subprocess, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
            "r = subprocess.run([sys.argv[2], 'list'], capture_output=True, text=True); "
            "sys.stdout.write(str(r.returncode) + '\\n' + r.stderr)")
    res = subprocess.run([sys.executable, "-c", code, str(gone),
                          str(Path(sys.executable).parent / "knowflow")],
                         capture_output=True, text=True, timeout=300)
    rc, *err = res.stdout.splitlines()
    assert rc == "2" and "oneMKL" not in res.stdout
    assert " ".join(err).startswith("error: the working folder no longer exists")


def test_ascii_only_output_still_finishes_with_exit_0(tmp_path, tiny_model_dir):
    res = knowflow("explain", "--model", str(tiny_model_dir), "--context",
                   "The Eiffel Tower is in Rome. It is tall.", "--question", "Where is it?",
                   "--answer", "Rômé", "--out", "résumé", cwd=tmp_path,
                   env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert res.returncode == 0, res.stderr
    assert "r\\xe9sum\\xe9" in res.stdout
    assert (tmp_path / "résumé" / "summary.json").is_file()


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`knowflow list | head -1`: the pipe's reader gone before the table is written is exit
    141 (as SIGPIPE), nothing on stderr; it was exit 1, the code of an internal error."""
    read, write = os.pipe()
    os.close(read)
    try:
        res = knowflow("list", cwd=tmp_path, stdout=write)
    finally:
        os.close(write)
    assert res.returncode == 141 and res.stderr == "", res.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_full_device_for_the_output_is_one_line_naming_it(tmp_path):
    """`knowflow list > /dev/full`: one line naming standard output (not 'file system')."""
    with open("/dev/full", "w") as full:
        res = knowflow("list", cwd=tmp_path, stdout=full)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: standard output: no space left on the device; send the output elsewhere (a "
        "file on a disk with room, or a pipe)"]
