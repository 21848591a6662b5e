"""What staged outputs cost: each job run staged (the run folder written under a
hidden name, renamed into place when complete) and in place (the folder written where it
ends up, as before), in alternating rounds in one process, with the median wall time of each
and the ratio.

    python benchmarks/cost/bench_staging.py [--rounds 3] [--rows 860] [--model DIR|HUB_ID]
                                            [--experiment cpi-toy] [--set key=value ...]

Jobs: `knowflow run <experiment>` (default cpi-toy, `make demo`'s second job, at its
defaults unless --set) and `knowflow eval` of --rows made-up conflict items (default 860)
with --model (default: a tiny random Llama, so the model's own time is small and the
staging share is as large as it gets). "In place" patches the one staging seam
(`run_folder.stage_dir` makes the target itself, `run_folder.publish` renames nothing). Besides the
ratio, the time spent inside the staging steps themselves (making, sweeping, renaming,
removing the folder) is summed per staged run: the direct cost, free of machine noise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))


@contextmanager
def in_place():
    """Run folders written where they end up: the staging seam of `knowflow.store.run_folder`
    bypassed."""
    import knowflow.store.run_folder as runs
    from knowflow.store.lock import claim, release

    def stage_dir(target: Path) -> Path:
        target.mkdir(parents=True, exist_ok=True)
        claim(target)
        return target

    def publish(stage: Path, target: Path, replace: bool = True) -> Path:
        release(stage)
        return stage

    saved = runs.stage_dir, runs.publish
    runs.stage_dir, runs.publish = stage_dir, publish
    try:
        yield
    finally:
        runs.stage_dir, runs.publish = saved


@contextmanager
def timed_staging(spent: list[float]):
    """Add the seconds spent in the staging steps to `spent`."""
    import knowflow.store.run_folder as runs

    saved = runs.stage_dir, runs.publish, runs.remove

    def clock(fn):
        def wrapped(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - start)
        return wrapped

    runs.stage_dir, runs.publish, runs.remove = (clock(f) for f in saved)
    try:
        yield
    finally:
        runs.stage_dir, runs.publish, runs.remove = saved


def items_file(path: Path, n: int) -> Path:
    rows = [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the "
             f"capital of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_once(argv: list[str]) -> float:
    from typer.testing import CliRunner

    from knowflow.cli import app

    start = time.perf_counter()
    res = CliRunner().invoke(app, argv)
    seconds = time.perf_counter() - start
    if res.exit_code != 0:
        raise SystemExit(f"knowflow {' '.join(argv)}: {res.output}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=860)
    parser.add_argument("--model", default=None)
    parser.add_argument("--experiment", default="cpi-toy")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    import torch

    from helpers import byte_tokenizer, save_model_folder, tiny_llama

    work = Path(tempfile.mkdtemp(prefix="bench-staging-"))
    model = args.model
    if model is None:
        tok = byte_tokenizer()
        model = str(save_model_folder(work / "model", tiny_llama(tok), tok))
    items = items_file(work / "items.jsonl", args.rows)
    jobs = {
        f"run {args.experiment}": lambda out: [
            "run", args.experiment, "--runs-dir", str(out),
            *[a for s in args.sets for a in ("--set", s)]],
        f"eval {args.rows} rows": lambda out: [
            "eval", "--model", model, "--data", str(items), "--out", str(out / "ev"),
            "--scoring", "loglik", "--device", args.device],
    }
    print(f"torch threads {torch.get_num_threads()}; model {model}; rounds {args.rounds}, "
          "alternating (staged first in odd rounds)")
    print("job | in place median s | staged median s | staged / in place | "
          "staging steps s per run")
    for name, argv in jobs.items():
        times: dict[str, list[float]] = {"in place": [], "staged": []}
        spent: list[float] = []
        run_once(argv(work / "warm"))  # imports, caches: neither mode pays them
        for r in range(args.rounds):
            order = ("staged", "in place") if r % 2 == 0 else ("in place", "staged")
            for mode in order:
                out = work / f"{mode.replace(' ', '-')}-{r}"
                if mode == "staged":
                    with timed_staging(spent):
                        times[mode].append(run_once(argv(out)))
                else:
                    with in_place():
                        times[mode].append(run_once(argv(out)))
                shutil.rmtree(out, ignore_errors=True)
        base, staged = (statistics.median(times[m]) for m in ("in place", "staged"))
        print(f"{name} | {base:.2f} | {staged:.2f} | {staged / base:.3f} | "
              f"{sum(spent) / args.rounds:.4f}", flush=True)
        print(f"  rounds: in place {[round(t, 2) for t in times['in place']]}, staged "
              f"{[round(t, 2) for t in times['staged']]}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
