"""Wall time and peak memory of `inversion-tiny` at its default size (all arms and seeds).

Target: under 10 minutes on a 2-core CPU, both cores used (`workers=2`), including
pretraining. By default pretraining runs from nothing in a temporary cache; `--warm` uses
$KNOWFLOW_CACHE (or ~/.cache/knowflow) so cached pretrained models are reused.
Prints figures only, never asserts on time.
Usage: python benchmarks/cost/bench_inversion_tiny.py [--warm] [key=value ...]   (as --set)
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time

import torch

from knowflow.experiments.runner import run_experiment


def main(args: list[str]) -> None:
    warm = "--warm" in args
    overrides = [a for a in args if a != "--warm"]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        if not warm:
            os.environ["KNOWFLOW_CACHE"] = os.path.join(tmp, "cache")
        start = time.perf_counter()
        result = run_experiment("inversion-tiny", overrides, runs_dir=os.path.join(tmp, "runs"))
        total = time.perf_counter() - start
    self_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    arms = [k for k in result.summary if k not in ("pretrain", "findings")]
    seeds = len(result.summary[arms[0]]["seeds"])
    pre = result.summary["pretrain"]
    pre_s = sum(p["seconds"] for p in pre.values())
    print(f"inversion-tiny, {len(arms)} arms x {seeds} seeds, overrides={overrides or 'none'}, "
          f"cache={'warm' if warm else 'cold'}, cpus={os.cpu_count()}")
    print(f"  wall time (pretraining, finetuning, figures, report): {total:.1f} s"
          "   (target < 600 s)")
    print(f"  of which experiment run: {result.seconds:.1f} s; pretraining (sum over seeds, "
          f"in parallel): {pre_s:.1f} s, steps {[p['steps'] for p in pre.values()]}")
    print(f"  peak RSS: main process {self_mb:.0f} MiB, largest worker {child_mb:.0f} MiB")
    for arm in arms:
        row = result.summary[arm]
        print(f"  {arm:10s} cf_acc start {row['cf_acc_start']:.3f} peak {row['cf_acc_peak']:.3f}"
              f" (step {row['cf_acc_peak_step']}) final {row['cf_acc_final']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
