"""SFT throughput on SmolLM2-135M-Instruct (CPU by default): training tokens/s with LoRA,
QK-only and full finetuning on the built-in mixture, and the RelianceTracker's overhead as a
share of training time at its default evaluation interval. Never asserts on time.

    .venv/bin/python benchmarks/cost/bench_sft.py [--steps 5] [--batch-size 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from knowflow.data.instruction_rows import encode_all
from knowflow.data.instructions import MixtureConfig, builtin_mixture, heldout_items
from knowflow.lens.load import load_model
from knowflow.train.sft import SFTConfig, StepTimer, train_model
from knowflow.train.tracker import RelianceTracker, TrackerConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt-format", default="chat")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = builtin_mixture(MixtureConfig())
    _, tok = load_model()
    data, _ = encode_all(tok, rows, args.prompt_format, 256)
    step_time = {}
    print(f"SmolLM2-135M-Instruct, {args.threads} thread(s), batch {args.batch_size}, "
          f"{args.prompt_format} format, {args.steps} timed steps after 1 warm-up")
    for mode in ("lora", "qk_only", "full"):
        model, _ = load_model()
        clock = StepTimer()
        cfg = SFTConfig(train=mode, steps=args.steps + 1, batch_size=args.batch_size,
                        prompt_format=args.prompt_format, save_every=10_000)
        with tempfile.TemporaryDirectory() as tmp:
            train_model(model, tok, data, cfg, Path(tmp), [clock])
        # tokens of the timed steps (the Trainer draws batches in a seeded order; use the
        # mean example length, padding excluded)
        mean_len = sum(len(d["input_ids"]) for d in data) / len(data)
        per_step = sum(clock.times[1:]) / len(clock.times[1:])
        step_time[mode] = per_step
        print(f"{mode:8s} {per_step:6.2f} s/step  {args.batch_size * mean_len / per_step:7.1f} "
              "tokens/s")
    tcfg = TrackerConfig(prompt_format=args.prompt_format)
    model, _ = load_model()
    tracker = RelianceTracker(tok, tcfg, items=heldout_items(MixtureConfig(), tcfg.suites,
                                                             tcfg.limit))
    start = time.perf_counter()
    tracker.measure(model)
    evaluation = time.perf_counter() - start
    train = tcfg.every * step_time["lora"]
    print(f"tracker: one evaluation ({sum(len(v) for v in tracker.items.values())} items, "
          f"{tcfg.scoring}, attention) {evaluation:.1f} s; every {tcfg.every} LoRA steps "
          f"({train:.1f} s) that is {100 * evaluation / (evaluation + train):.1f}% of the "
          "run's time")


if __name__ == "__main__":
    main()
