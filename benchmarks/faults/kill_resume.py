"""Kill `knowflow sft` at random moments around its checkpoints, resume it, and compare with
the uninterrupted run: one row per kill.

    python benchmarks/faults/kill_resume.py [--kills 10] [--seed 0] [--steps 40] [--save-every 10]
                                            [--keep DIR]

A tiny random Llama (tests/helpers.py) finetuned for `--steps` steps, a checkpoint every
`--save-every`, the reliance tracker every `--save-every` steps on two cf-capitals items, one
thread. The uninterrupted run gives the reference: its final step, its metrics.jsonl records
and the moments (seconds after start) at which each checkpoint appeared. Each kill then starts
the same run and sends SIGKILL or SIGTERM (alternating) at a seeded random offset within
[-1.0, +1.5] s of a seeded random checkpoint: the moment is taken in the killed run itself (a
loaded machine shifts the start by tens of seconds): an offset after checkpoint N waits for N
to appear on disk; one before it waits for the checkpoint before N (or, for the first, the
step-0 tracker record) and then for the reference gap less the offset. It records the newest
checkpoint on disk, resumes with `knowflow sft --resume --runs-dir R`, and compares the final
step (summary.json) and the records (every field but the timings) with the reference. A run
killed before its first checkpoint keeps nothing to resume: SIGTERM removes its staged folder,
SIGKILL leaves it hidden and the resume removes it and says so; the table says which.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXE = str(Path(sys.executable).parent / "knowflow")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
TIMINGS = ("eval_seconds", "seconds", "tracking_seconds")


def _setup(root: Path) -> None:
    from helpers import byte_tokenizer, save_model_folder, tiny_llama

    tok = byte_tokenizer()
    save_model_folder(root / "model", tiny_llama(tok), tok)
    rows = [{"instruction": f"Question: Where does Vol{i} live?", "input": f"Vol{i} lives in "
             f"Kem{i}.", "output": f"Kem{i}"} for i in range(16)]
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _argv(steps: int, every: int, runs: Path) -> list[str]:
    return ["sft", "--model", "model", "--data", "rows.jsonl", "--steps", str(steps),
            "--batch-size", "4", "--set", f"sft.save_every={every}", "--track", "cf-capitals",
            "--track-limit", "2", "--track-every", str(every), "--threads", "1",
            "--runs-dir", str(runs)]


def _checkpoints(runs: Path) -> list[int]:
    """Steps of the complete checkpoints of the (one) run under `runs`, staged or not."""
    found = []
    for state in runs.glob("sft/*/checkpoints/checkpoint-*/trainer_state.json"):
        found.append(int(state.parent.name.rsplit("-", 1)[-1]))
    return sorted(found)


def _run_dir(runs: Path) -> Path | None:
    dirs = [p for p in (runs / "sft").glob("*") if p.is_dir()] if (runs / "sft").is_dir() \
        else []
    return max(dirs, key=lambda p: p.stat().st_mtime, default=None)


def _records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
            for line in path.read_text().splitlines() if line.strip()]


def _final_step(run: Path | None) -> int | None:
    if run is None or not (run / "summary.json").exists():
        return None
    return json.loads((run / "summary.json").read_text()).get("steps")


def _reference(root: Path, steps: int, every: int) -> tuple[int, list[dict], dict[int, float]]:
    runs = root / "ref"
    proc = subprocess.Popen([EXE, *_argv(steps, every, runs)], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    start, seen = time.monotonic(), {}
    while proc.poll() is None:
        for step in _checkpoints(runs):
            seen.setdefault(step, time.monotonic() - start)
        time.sleep(0.05)
    if proc.returncode != 0:
        sys.exit(f"the uninterrupted run failed: {proc.stderr.read()[-2000:]}")
    run = _run_dir(runs)
    return _final_step(run), _records(run), seen


def _appeared(runs: Path, step: int) -> bool:
    """Checkpoint `step` is on disk (step 0: the tracker's first record is)."""
    if step == 0:
        return any(runs.glob("sft/*/metrics.jsonl"))
    return step in _checkpoints(runs)


def _trial(root: Path, k: int, sig: int, near: int, offset: float, moments: dict[int, float],
           steps: int, every: int) -> dict:
    runs = root / f"kill{k}"
    proc = subprocess.Popen([EXE, *_argv(steps, every, runs)], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    anchor = near if offset >= 0 else near - every
    wait = offset if offset >= 0 else max(0.0, moments[near] - moments.get(anchor, moments[
        near] - 1.0) + offset)
    while proc.poll() is None and not _appeared(runs, anchor):
        time.sleep(0.01)
    time.sleep(wait)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(sig)
    code = proc.wait(timeout=300)
    on_disk = _checkpoints(runs)
    res = subprocess.run([EXE, "sft", "--resume", "--runs-dir", str(runs), "--threads", "1"],
                         cwd=root, capture_output=True, text=True, timeout=600)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    run = _run_dir(runs)
    return {"at": f"{offset:+.2f} s from {near}", "killed": killed,
            "signal": signal.Signals(sig).name, "code": code,
            "last_checkpoint": on_disk[-1] if on_disk else None, "resume_code": res.returncode,
            "resume_error": errors[-1] if errors else "", "final": _final_step(run),
            "records": _records(run) if run else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="kf-killresume-"))
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _setup(root)
    started = time.monotonic()
    ref_final, ref_records, moments = _reference(root, args.steps, args.save_every)
    print(f"uninterrupted: final step {ref_final}, {len(ref_records)} records, checkpoints at "
          + ", ".join(f"{s} ({t:.1f} s)" for s, t in sorted(moments.items())))
    rng = random.Random(args.seed)
    ckpts = sorted(moments)
    print("| # | signal | kill at | killed run's exit | last checkpoint on disk | resume "
          "exit | resumed final step | steps equal | records equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows, notes = [], []
    for k in range(args.kills):
        near = rng.choice(ckpts)
        offset = rng.uniform(-1.0, 1.5)
        sig = signal.SIGKILL if k % 2 == 0 else signal.SIGTERM
        t = _trial(root, k, sig, near, offset, moments, args.steps, args.save_every)
        nothing = t["last_checkpoint"] is None and t["resume_code"] == 2
        steps_equal = t["final"] == ref_final
        records_equal = t["records"] == ref_records
        if not nothing:
            rows.append((steps_equal, records_equal))
        note = "" if t["killed"] else " (ended before the kill)"
        equal = ("- (nothing kept to resume)", "-") if nothing else \
            ("yes" if steps_equal else "NO", "yes" if records_equal else "NO")
        print(f"| {k + 1} | {t['signal']} | {t['at']}{note} | {t['code']} | "
              f"{t['last_checkpoint']} | {t['resume_code']} | {t['final']} | {equal[0]} | "
              f"{equal[1]} |")
        if t["resume_error"]:
            notes.append(f"{k + 1}: the resume said: {t['resume_error'][:200]}")
    print("\n" + "\n".join(notes))
    print(f"\n{sum(s for s, _ in rows)}/{len(rows)} resumed runs reached the uninterrupted "
          f"run's step count, {sum(r for _, r in rows)}/{len(rows)} with equal records; "
          f"{args.kills - len(rows)} kill(s) left nothing to resume "
          f"({time.monotonic() - started:.0f} s in all)")
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
