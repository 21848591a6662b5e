"""RelianceTracker overhead on a LoRA `knowflow sft` run (SmolLM2-135M-Instruct, built-in
mixture, CPU): the same run, same length, without the tracker, with the tracker as it is
(default settings: every 20 steps, 32 held-out items per suite of cf-capitals and cf-world,
log-likelihood scoring, attention mass read from the same prompt pass), and with the tracker
as it was before (a second, attention-only pass over the prompts). Prints each run's wall
time and the tracker's share; never asserts on time.

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


def one_run(cfg: SFTJobConfig) -> tuple[float, float, dict]:
    """(wall seconds of the finetuning incl. tracking, tracking seconds, summary)."""
    model, tok = load_model(cfg.model, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        summary = run_sft_job(cfg, tmp, model=model, tokenizer=tok)
        seconds = time.perf_counter() - start
    return seconds, summary.get("tracking_seconds", 0.0), summary


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
    rows = []
    for name, cfg, one_pass in runs:
        RelianceTracker.one_pass = one_pass
        seconds, tracking, summary = one_run(cfg)
        rows.append((name, seconds, tracking, summary))
    RelianceTracker.one_pass = True
    bare = rows[0][1]
    print(f"\n{'run':22s} {'wall':>8s} {'tracking':>9s} {'vs no tracker':>14s} "
          f"{'tracker share':>14s}  cf acc start/final")
    for name, seconds, tracking, s in rows:
        share = tracking / seconds if seconds else 0.0
        accs = f"{s['cf_acc_start']:.3f}/{s['cf_acc_final']:.3f}" if "cf_acc_start" in s \
            else "-"
        print(f"{name:22s} {seconds:7.1f}s {tracking:8.1f}s {seconds / bare:13.2f}x "
              f"{100 * share:13.1f}%  {accs}")


if __name__ == "__main__":
    main()
