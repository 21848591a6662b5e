"""Wall time and peak memory of `cpi-toy` (all five parts) at its default size.

Target: under 60 s for all five parts on a 2-core CPU. Prints figures only.
Usage: python benchmarks/cost/bench_cpi_toy.py [key=value ...]   (the same overrides as --set)
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time

import torch

from knowflow.experiments.runner import run_experiment


def main(overrides: list[str]) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = run_experiment("cpi-toy", overrides, runs_dir=tmp)
        total = time.perf_counter() - start
    self_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    steps = sum(arm["steps"] for part, value in result.summary.items() if part != "findings"
                for arm in (value.values() if part == "mitigations" else [value]))
    print(f"cpi-toy, all parts, overrides={overrides or 'none'}")
    print(f"  wall time (training, figures, report): {total:.1f} s   (target < 60 s)")
    print(f"  of which experiment run: {result.seconds:.1f} s; finetuning steps over all "
          f"arms: {steps}")
    print(f"  peak RSS: main process {self_mb:.0f} MiB, largest worker {child_mb:.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
