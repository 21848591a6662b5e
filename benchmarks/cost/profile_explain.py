"""Where knowflow's sentence attribution spends its CPU seconds: the ablation scoring of
`bench_explain.py`'s items (its `needle_setup` and `knowflow_weights`) under cProfile,
one thread, and the functions with the most time of their own.

    python benchmarks/cost/profile_explain.py --items 48 --first 22 --last 24 --ablations 32

The per-item CPU seconds are printed first without the profiler (cProfile adds to Python-heavy
parts), then the profile of the same calls.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--items", type=int, default=48, help="needle items, half of each suite")
    ap.add_argument("--first", type=int, default=22)
    ap.add_argument("--last", type=int, default=24)
    ap.add_argument("--ablations", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=25, help="functions listed")
    args = ap.parse_args()
    torch.set_num_threads(1)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
    from bench_explain import knowflow_weights, needle_setup
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.splitter import split_sentences

    model, tok, items, prompts, _, answers = needle_setup(args.model, args.items, args.seed)
    chosen = list(range(args.first, min(args.last, len(items))))
    cfg = ExplainConfig(ablations=args.ablations, holdout=0, seed=args.seed)

    def attribute_all() -> None:
        for i in chosen:
            it = items[i]
            knowflow_weights(model, tok, it, split_sentences(it.context),
                             prompts[i].answer_prefix + answers[i], cfg)

    attribute_all()                      # the scorer's one-time check of the model
    cpu = time.process_time()
    attribute_all()
    print(f"{len(chosen)} items, {args.ablations} ablations: "
          f"{(time.process_time() - cpu) / len(chosen):.2f} CPU s/item (no profiler)")
    prof = cProfile.Profile()
    prof.runcall(attribute_all)
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
