"""RelianceTracker overhead on a LoRA `knowflow sft` run (SmolLM2-135M-Instruct, built-in
mixture, CPU): the same run, same length, without the tracker, with the tracker as it is
(default settings: every 20 steps, 32 held-out items per suite of cf-capitals and cf-world,
log-likelihood scoring, attention mass read from the same prompt pass), and with the tracker
as it was before (a second, attention-only pass over the prompts). Prints each run's wall
time and CPU time (this process's; on a shared machine wall time also counts other
people's jobs, CPU time does not) and the tracker's share of each; never asserts on time.

Every run evaluates at step 0, every 20 steps and at the end, so a 40-step run evaluates 3
times (a default 100-step run 6 times: a smaller share than printed here).

    .venv/bin/python benchmarks/bench_tracker.py [--steps 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import torch

from knowflow.models.hf import load_model
from knowflow.train.sft import SFTConfig
from knowflow.train.sft_job import SFTJobConfig, run_sft_job
from knowflow.train.tracker import RelianceTracker, TrackerConfig


class CpuClock:
    """Process CPU seconds spent inside RelianceTracker.measure."""

    seconds = 0.0

    @classmethod
    def wrap(cls):
        measure = RelianceTracker.measure

        def timed_measure(self, model):
            start = time.process_time()
            try:
                return measure(self, model)
            finally:
                cls.seconds += time.process_time() - start
        RelianceTracker.measure = timed_measure


def one_run(cfg: SFTJobConfig) -> tuple[float, float, float, float, dict]:
    """(wall s, CPU s of the finetuning incl. tracking, tracking wall s, tracking CPU s,
    summary)."""
    model, tok = load_model(cfg.model, device="cpu")
    CpuClock.seconds = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        start, cpu = time.perf_counter(), time.process_time()
        summary = run_sft_job(cfg, tmp, model=model, tokenizer=tok)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, summary.get("tracking_seconds", 0.0), CpuClock.seconds, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-before", action="store_true", help="skip the two-pass tracker run")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    track = TrackerConfig()
    base = SFTJobConfig(sft=SFTConfig(steps=args.steps, save_every=10_000), save_model=False,
                        track=track)
    print(f"LoRA sft, {args.steps} steps, batch {base.sft.batch_size}, {args.threads} thread(s); "
          f"tracker every {track.every} steps, {track.limit} items x {len(track.suites)} "
          f"suites, scoring {track.scoring}, attention {track.attention}")
    runs = [("no tracker", dataclasses.replace(base, tracking=False), True),
            ("tracker (one pass)", base, True)]
    if not args.skip_before:
        runs.append(("tracker (two passes)", base, False))
    CpuClock.wrap()
    rows = []
    for name, cfg, one_pass in runs:
        RelianceTracker.one_pass = one_pass
        rows.append((name, *one_run(cfg)))
        print(f"  {name}: done", flush=True)
    RelianceTracker.one_pass = True
    bare, bare_cpu = rows[0][1], rows[0][2]
    print(f"\n{'run':22s} {'wall':>8s} {'CPU':>8s} {'tracking wall/CPU':>18s} "
          f"{'CPU vs none':>12s} {'tracker share wall/CPU':>23s}  cf acc start/final")
    for name, wall, cpu, t_wall, t_cpu, s in rows:
        accs = f"{s['cf_acc_start']:.3f}/{s['cf_acc_final']:.3f}" if "cf_acc_start" in s \
            else "-"
        print(f"{name:22s} {wall:7.1f}s {cpu:7.1f}s {t_wall:8.1f}s/{t_cpu:7.1f}s "
              f"{cpu / bare_cpu:11.2f}x {100 * t_wall / wall:10.1f}% / {100 * t_cpu / cpu:5.1f}%"
              f"  {accs}")
    print(f"(no-tracker run: {bare:.1f} s wall, {bare_cpu:.1f} s CPU)")


if __name__ == "__main__":
    main()
