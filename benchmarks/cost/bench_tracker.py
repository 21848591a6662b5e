"""RelianceTracker overhead on a LoRA `knowflow sft` run (SmolLM2-135M-Instruct, built-in
mixture, CPU, default tracker settings: every 20 steps, 32 held-out items per suite of
cf-capitals and cf-world, log-likelihood scoring, attention mass).

Two runs of the same length: without the tracker, and with it (the log-likelihood choice and
the attention mass read from one prompt pass). Then one evaluation of the tracker as it is
and as it was before (a second, attention-only pass over the prompts) on the same model, so
the "before" run is the measured no-tracker run plus as many two-pass evaluations; and one
evaluation at `track.dtype=float32`, for comparison with the default (`auto`: bfloat16 autocast
where the device multiplies bf16 natively, else float32), with both accuracies. Times are
CPU seconds of this process (on a shared machine wall time also counts other processes;
wall times are printed too). A run evaluates at step 0, every 20 steps and at the end: a
`--steps 20` run evaluates twice, a default 100-step run 6 times; the table gives both.
Never asserts on time.

    .venv/bin/python benchmarks/cost/bench_tracker.py [--steps 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import torch

from knowflow.data.instructions import MixtureConfig, heldout_items
from knowflow.lens.load import load_model
from knowflow.train.sft import SFTConfig
from knowflow.train.sft_job import SFTJobConfig, run_sft_job
from knowflow.train.tracker import RelianceTracker, TrackerConfig, evaluates_in_bf16


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


def one_evaluation(one_pass: bool, track: TrackerConfig) -> tuple[float, dict]:
    """(CPU seconds, record) of one tracker evaluation on the untrained model."""
    model, tok = load_model(device="cpu")
    tracker = RelianceTracker(tok, track, items=heldout_items(MixtureConfig(), track.suites,
                                                             track.limit))
    tracker.one_pass = one_pass
    tracker.measure(model)  # warm-up (first-call costs)
    start = time.process_time()
    record = tracker.measure(model)
    return time.process_time() - start, record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    track = TrackerConfig()
    base = SFTJobConfig(sft=SFTConfig(steps=args.steps, save_every=10_000), save_model=False,
                        track=track)
    print(f"LoRA sft, {args.steps} steps, batch {base.sft.batch_size}, {args.threads} thread(s); "
          f"tracker every {track.every} steps, {track.limit} items x {len(track.suites)} "
          f"suites, scoring {track.scoring}, attention {track.attention}, precision "
          f"{track.dtype} ({precision(track)} on this machine)", flush=True)
    CpuClock.wrap()
    bare_wall, bare, _, _, _ = one_run(dataclasses.replace(base, tracking=False))
    wall, cpu, t_wall, t_cpu, s = one_run(base)
    n_evals = s["n_evaluations"]
    (after, rec), (before, _) = one_evaluation(True, track), one_evaluation(False, track)
    full, rec32 = one_evaluation(True, dataclasses.replace(track, dtype="float32"))
    step = bare / args.steps
    print(f"\n{'run':34s} {'wall s':>8s} {'CPU s':>8s} {'tracking CPU s':>15s} "
          f"{'tracker share':>14s}")
    print(f"{'no tracker':34s} {bare_wall:8.1f} {bare:8.1f} {'-':>15s} {'-':>14s}")
    print(f"{'tracker, one pass (measured)':34s} {wall:8.1f} {cpu:8.1f} {t_cpu:15.1f} "
          f"{100 * t_cpu / cpu:13.1f}%")
    b_cpu = bare + n_evals * before
    print(f"{'tracker, two passes (before)':34s} {'':8s} {b_cpu:8.1f} {n_evals * before:15.1f} "
          f"{100 * n_evals * before / b_cpu:13.1f}%  (no-tracker run + {n_evals} x one "
          "two-pass evaluation)")
    n_items = sum(len(v) for v in heldout_items(MixtureConfig(), track.suites,
                                                track.limit).values())
    print(f"\none evaluation ({n_items} items): one pass {after:.1f} s CPU, two passes "
          f"{before:.1f} s CPU; one LoRA step (run CPU / steps) {step:.2f} s; cf acc "
          f"start/final {s['cf_acc_start']:.3f}/{s['cf_acc_final']:.3f}")
    print("tracker share of a default 100-step run (6 evaluations, from these measurements): "
          f"now {100 * 6 * after / (6 * after + 100 * step):.1f}%, before "
          f"{100 * 6 * before / (6 * before + 100 * step):.1f}%")
    print(f"float32 evaluation (track.dtype=float32): one evaluation {full:.1f} s CPU "
          f"(the default is {full / after:.2f}x faster), share of a default 100-step run "
          f"{100 * 6 * full / (6 * full + 100 * step):.1f}%; cf acc {rec['cf_acc']:.4f} "
          f"(default) vs {rec32['cf_acc']:.4f} (float32), attention mass "
          f"{rec['attn_context']:.4f} vs {rec32['attn_context']:.4f}")


def precision(track: TrackerConfig) -> str:
    low = evaluates_in_bf16(track.dtype, torch.device("cpu"))
    return "bfloat16 autocast" if low else "float32"


if __name__ == "__main__":
    main()
