"""Benchmark: the whole of `ocr-toy` experiment (1) at its default size.

128-token vocabulary, 2,000 full-batch GD steps, 3 seeds x 2 models (factorized, merged).
One torch thread; each model's three seeds train together as one set of batched matrix
products, and the two models run one after the other in this process (a spawned worker would
spend ~3 s importing torch and knowflow, more than it saves). Prints wall time and steps per
second; never asserts on time.

    .venv/bin/python benchmarks/cost/bench_ocr_toy.py [--workers N]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2,
                        help="processes for sweeps; the two-part main study runs in-process")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from knowflow.experiments.runner import build_config, run_experiment

    cfg = build_config("ocr-toy", {"workers": args.workers})
    n_runs = 2 * len(cfg.seeds)
    steps = cfg.train.steps
    print(f"ocr-toy main: d=128, {steps} steps, {len(cfg.seeds)} seeds x 2 models "
          f"= {n_runs} runs; workers={args.workers}; cpus={os.cpu_count()}; "
          f"torch {torch.__version__}")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = run_experiment("ocr-toy", {"workers": args.workers}, runs_dir=tmp)
        wall = time.perf_counter() - start
    train_s = result.seconds
    cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF,
                                                               resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime"))
    print(f"wall time (training, figures, report): {wall:6.2f} s")
    print(f"training (run(), processes included):  {train_s:6.2f} s")
    print(f"CPU time, all processes:               {cpu:6.2f} s "
          f"(1-min load average before: {load_before:.1f}, after: {os.getloadavg()[0]:.1f}; "
          "other work on the machine stretches wall time)")
    print(f"throughput: {n_runs * steps / train_s:8.0f} run-steps/s "
          f"({steps / train_s:.0f} steps/s for all {n_runs} runs together)")
    for model in ("factorized", "merged"):
        s = result.summary[model]
        print(f"  {model:10s} train_loss={s['train_loss']:.4f} "
              f"test_impl_loss={s['test_impl_loss']:.4f} test_impl_acc={s['test_impl_acc']:.3f}")


if __name__ == "__main__":
    main()
