"""The run contract under SIGKILL: a run killed at a random moment leaves only complete, valid
JSON/JSONL files, and `--resume` (or, for `eval`, which has no run state, running it again)
gives the same records as a run that was never interrupted.

Kill moments are drawn (seeded) between the moment the run folder appears and the reference
run's end, so they land while the work is under way. Slow: each kind starts six processes.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).parent / "knowflow")
KILLS = 5


def _items(n: int = 12) -> list[dict]:
    return [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the "
             f"capital of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"}
            for i in range(n)]


def _instructions(n: int = 16) -> list[dict]:
    return [{"instruction": f"Question: Where does Vol{i} live?", "input": f"Vol{i} lives in "
             f"Kem{i}.", "output": f"Kem{i}", "kind": "C+S" if i % 2 else "C"} for i in range(n)]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _kinds(model: Path, data: Path, items: Path) -> dict[str, dict]:
    """Per kind: the command, the folder whose appearance starts the clock, and the records."""
    return {
        "cpi-toy": dict(args=["run", "cpi-toy", "--runs-dir", "runs", "--set", "workers=1",
                              "--set", "parts=inversion,c_only,with_s", "--set",
                              "finetune.steps=1500", "--set", "finetune.eval_every=20",
                              "--set", "world.n_test=20"],
                        folder="runs/cpi-toy", records="metrics.jsonl",
                        resume=lambda run: ["run", "cpi-toy", "--resume", "--run-dir", run]),
        "sft": dict(args=["sft", "--model", str(model), "--data", str(data), "--steps", "12",
                          "--batch-size", "4", "--track", "cf-capitals", "--track-every", "2",
                          "--track-limit", "4", "--max-length", "512", "--set",
                          "sft.save_every=2", "--set", "sft.save_limit=null", "--runs-dir",
                          "runs"],
                    folder="runs/sft", records="metrics.jsonl",
                    # the Trainer's logged loss averages the steps since its last log *in this
                    # process*, so a record logged just after a resume averages fewer steps:
                    # reported beside the table, not part of the equality
                    ignore=("train_loss",),
                    resume=lambda run: ["sft", "--resume", "--run-dir", run]),
        "eval": dict(args=["eval", "--model", str(model), "--data", str(items), "--out", "out",
                           "--scoring", "both", "--batch-size", "2"],
                     folder="out", records="items.jsonl", resume=None, clock="launch"),
    }


def _run_dirs(root: Path, kind: dict) -> list[Path]:
    """The run folders (a killed run's hidden staging folder, or the link it leaves under
    that name once published, is none: the next run sweeps it)."""
    folder = root / kind["folder"]
    if kind["resume"] is None:
        return [folder] if folder.exists() else []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if folder.exists() else []


def _records(run: Path, name: str, ignore: tuple[str, ...] = ()) -> list[dict]:
    """The records with wall-clock fields left out and floats rounded (bitwise-equal runs
    differ in the last digits of attention means only)."""
    def clean(value):
        if isinstance(value, float):
            return round(value, 6)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()
                    if "seconds" not in k and k not in ignore}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return [clean(json.loads(line)) for line in (run / name).read_text().splitlines()
            if line.strip()]


def _assert_all_valid(root: Path) -> int:
    """Every JSON/JSONL result under `root` parses completely; returns how many there are.
    Atomic writes' temp files and folders (names starting with '.') are not results."""
    files = [p for p in root.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file()
             and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    for path in files:
        text = path.read_text()
        if path.suffix == ".json":
            json.loads(text)
        else:
            assert text == "" or text.endswith("\n"), f"{path}: a half-written last line"
            [json.loads(line) for line in text.splitlines() if line.strip()]
    return len(files)


def _go(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    res = subprocess.run([EXE, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def _started_at(proc: subprocess.Popen, ready: Path | None) -> float:
    """When the work starts: `ready` appears (None: now, at launch)."""
    while ready is not None and not ready.exists():
        if proc.poll() is not None:
            return time.monotonic()
        time.sleep(0.02)
    return time.monotonic()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cpi-toy", "sft", "eval"])
def test_sigkill_then_resume_gives_the_same_records(name, tmp_path, tiny_model_dir):
    data = _write(tmp_path / "train.jsonl", _instructions())
    items = _write(tmp_path / "items.jsonl", _items())
    kind = _kinds(tiny_model_dir, data, items)[name]
    ref_root = tmp_path / "reference"
    ref_root.mkdir()
    proc = subprocess.Popen([EXE, *kind["args"]], cwd=ref_root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    launch = kind.get("clock") == "launch"  # eval makes its folder only at the end
    begin = _started_at(proc, None if launch else ref_root / kind["folder"])
    assert proc.wait(timeout=600) == 0, proc.stderr.read()
    work = time.monotonic() - begin  # how long the run works once its folder exists
    (ref,) = _run_dirs(ref_root, kind)
    ignore = kind.get("ignore", ())
    expected = _records(ref, kind["records"], ignore)
    expected_all = _records(ref, kind["records"])
    rng = random.Random(f"kill-{name}")
    table = []
    for k in range(KILLS):
        after = rng.uniform(0.05, 0.75) * work
        for attempt in range(4):  # the kill must land while the run works, not after it
            root = tmp_path / f"kill-{k}-{attempt}"
            root.mkdir()
            proc = subprocess.Popen([EXE, *kind["args"]], cwd=root, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            _started_at(proc, None if launch else root / kind["folder"])
            time.sleep(after)
            if proc.poll() is None:
                break
            after /= 2  # this run was faster than the reference: try earlier
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL, \
            f"{name}: the run ended before the kill ({after:.2f} s), in 4 tries"
        n_files = _assert_all_valid(root)
        runs = _run_dirs(root, kind)
        finished_before = bool(runs) and (runs[0] / kind["records"]).exists() and \
            (kind["resume"] is None or (runs[0] / "summary.json").exists())
        if runs and kind["resume"] is not None and not finished_before:
            _go(kind["resume"](str(runs[0].relative_to(root))), root)
        elif not finished_before:  # nothing to resume (eval, or killed before the config)
            _go(kind["args"], root)
        (run,) = _run_dirs(root, kind)
        equal = _records(run, kind["records"], ignore) == expected
        aside = (f" ({', '.join(ignore)} equal too: "
                 f"{'yes' if _records(run, kind['records']) == expected_all else 'no'})"
                 if ignore else "")
        table.append(f"{name} | kill {after:.2f} s after "
                     f"{'launch' if launch else 'the run folder appeared'} "
                     f"({n_files} files left, all valid) | finished before kill: "
                     f"{finished_before}{aside} | records equal: {'yes' if equal else 'no'}")
        _assert_all_valid(root)
    print("\n" + "\n".join(table))
    assert all(line.endswith("yes") for line in table), "\n".join(table)


def _descendants(pid: int) -> set[int]:
    """The live processes below `pid` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists() and
            Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"}


SIGNAL_KINDS = ("cpi-toy", "sft", "eval", "probe")


def _signal_kinds(model: Path, data: Path, items: Path) -> dict[str, dict]:
    kinds = _kinds(model, data, items)
    kinds["cpi-toy"] = {**kinds["cpi-toy"], "args": [a if a != "workers=1" else "workers=2"
                                                     for a in kinds["cpi-toy"]["args"]]}
    kinds["probe"] = dict(args=["probe", "knockout", "--model", str(model), "--limit", "6",
                                "--all", "--window", "1", "--out", "out"],
                          folder="out", records="records.jsonl", resume=None, clock="launch")
    return kinds


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("name", SIGNAL_KINDS)
def test_sigint_and_sigterm_stop_cleanly_and_resume_to_the_same_records(name, tmp_path,
                                                                        tiny_model_dir):
    """SIGINT and SIGTERM at random moments: one line and exit 130/143 (or 0 if the run had
    finished), no traceback, no process left behind, stderr closed when the command exits;
    then --resume (or, for eval and probe, the same command again) gives the records of an
    uninterrupted run. Trials per signal: $KNOWFLOW_SIGNAL_TRIALS (default 2)."""
    trials = int(os.environ.get("KNOWFLOW_SIGNAL_TRIALS", "2"))
    data = _write(tmp_path / "train.jsonl", _instructions())
    items = _write(tmp_path / "items.jsonl", _items())
    kind = _signal_kinds(tiny_model_dir, data, items)[name]
    ref_root = tmp_path / "reference"
    ref_root.mkdir()
    begin = time.monotonic()
    _go(kind["args"], ref_root)
    work = time.monotonic() - begin
    (ref,) = _run_dirs(ref_root, kind)
    ignore = kind.get("ignore", ())
    expected = _records(ref, kind["records"], ignore)
    rng = random.Random(f"signal-{name}")
    table = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        for k in range(trials):
            root = tmp_path / f"{signum.name}-{k}"
            root.mkdir()
            after = rng.uniform(0.1, 0.8) * work
            proc = subprocess.Popen([EXE, *kind["args"]], cwd=root, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            time.sleep(after)
            below = _descendants(proc.pid)
            proc.send_signal(signum)
            try:  # EOF on stderr: no process holds it open any more
                _, err = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                err += "\n(stderr still open 120 s after the signal)"
            time.sleep(0.5)
            orphans = _alive(below | _descendants(proc.pid))
            for pid in orphans:
                os.kill(pid, signal.SIGKILL)
            lines = [line for line in err.splitlines() if line.strip()]
            errors = [line for line in lines if line.startswith("error:")]
            code = proc.returncode
            clean = "Traceback" not in err and (
                (code == 128 + signum and len(errors) == 1 and lines[-1] == errors[0])
                or code == 0)
            runs = _run_dirs(root, kind)
            finished = code == 0
            if not finished and runs and kind["resume"] is not None and \
                    (runs[0] / "config.json").exists():
                _go(kind["resume"](str(runs[0].relative_to(root))), root)
            elif not finished:
                _go(kind["args"], root)
            (run,) = _run_dirs(root, kind)
            equal = _records(run, kind["records"], ignore) == expected
            table.append(f"{name} | {signum.name} at {after:.1f} s | exit {code} | "
                         f"{'one line, no traceback' if clean else 'NOT CLEAN: ' + err[-300:]}"
                         f" | orphans {len(orphans)} | records equal: "
                         f"{'yes' if equal else 'no'}")
    print("\n" + "\n".join(table))
    assert all(" orphans 0 " in t and "NOT CLEAN" not in t and t.endswith("yes")
               for t in table), "\n".join(table)
