"""Speed of the `ocr-smollm2` pieces on SmolLM2-135M-Instruct (CPU by default).

Evaluation: one ranking pass over the default world's evaluation items (every person's
implication with the first template, and its fact), as the experiment's callback runs it, with
the answers alone (one-token candidates: the prompt pass only) and with the rest of the
sentence (`eval_suffix`: a candidate pass on the KV cache too). Training: a few optimizer steps
through knowflow's SFT path (`train.sft.train_model`, the HF Trainer) on the default world's
sentences, as tokens/s of real (unpadded) tokens; the first step is timed apart (warm-up).
Prints figures, never asserts on time.

    .venv/bin/python benchmarks/cost/bench_ocr_smollm2.py [--threads 1] [--steps 6] [--train full]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from knowflow.data.people import generate
from knowflow.experiments.ocr_smollm2.experiment import OcrSmolConfig, RankEvaluator, encode_texts
from knowflow.lens.load import load_model
from knowflow.train.sft import StepTimer, train_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps to time")
    ap.add_argument("--train", default=None, help="full | lora | qk_only (default: config's)")
    ap.add_argument("--batch-size", type=int, default=None, help="(default: config's)")
    ap.add_argument("--eval-batch-size", type=int, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = OcrSmolConfig()
    sft = replace(cfg.sft, steps=args.steps, save_every=10_000,
                  **({"train": args.train} if args.train else {}),
                  **({"batch_size": args.batch_size} if args.batch_size else {}))
    eval_bs = args.eval_batch_size or cfg.eval_batch_size
    data = generate(cfg.world)
    model, tok = load_model(cfg.model, device="cpu", dtype=cfg.dtype)
    items = data.eval_items
    print(f"SmolLM2-135M-Instruct, torch threads={args.threads}; default world: "
          f"{len(data.people)} people, {len(data.train_texts)} training sentences, "
          f"{len(items)} evaluation items x {len(items[0].candidates)} candidates")

    for suffix in (False, True):
        evaluate = RankEvaluator(tok, items, eval_bs, with_suffix=suffix)
        start = time.perf_counter()
        rec = evaluate(model, 0)
        seconds = time.perf_counter() - start
        what = "answer + rest of sentence" if suffix else "answer only (default)"
        print(f"eval pass  {what:27s} {seconds:6.1f} s  ({len(items) / seconds:5.1f} items/s, "
              f"held-out mean rank {rec['all/test_impl/mean_rank']:.2f})")

    dataset = encode_texts(tok, data.train_texts, sft.max_length)
    mean_len = sum(len(x["input_ids"]) for x in dataset) / len(dataset)
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as tmp:
        train_model(model, tok, dataset, sft, Path(tmp), callbacks=[timer])
    rest = timer.times[1:] or timer.times
    per_step = sum(rest) / len(rest)
    tokens = sft.batch_size * sft.grad_accum * mean_len
    print(f"train      {sft.train:5s} batch {sft.batch_size:3d} x ~{mean_len:.1f} tokens: "
          f"first step {timer.times[0]:5.2f} s, then {per_step:5.2f} s/step = "
          f"{tokens / per_step:6.1f} tokens/s")
    print(f"a default run ({cfg.sft.steps} steps, evaluation every {cfg.eval_every}) needs about "
          f"{cfg.sft.steps * per_step / 60:.1f} min of training")


if __name__ == "__main__":
    main()
