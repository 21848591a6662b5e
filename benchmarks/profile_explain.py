"""Where knowflow's sentence attribution spends its CPU seconds: the ablation scoring of
`bench_explain.py`'s items (same model, needle items, prompt and greedy answer) under cProfile,
one thread, and the functions with the most time of their own.

    python benchmarks/profile_explain.py --items 48 --first 22 --last 24 --ablations 32

The per-item CPU seconds are printed first without the profiler (cProfile adds to Python-heavy
parts), then the profile of the same calls.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

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

    from knowflow.evaluate.generate import generate
    from knowflow.explain.attribution import ablation_masks, score_masks
    from knowflow.explain.config import ExplainConfig
    from knowflow.explain.prompts import encode, rendered
    from knowflow.explain.splitter import split_sentences
    from knowflow.explain.surrogate import fit_surrogate
    from knowflow.models.hf import load_model
    from knowflow.worlds.suites import get_suite

    model, tok = load_model(args.model, device="cpu", dtype="float32")
    half = args.items // 2
    items = get_suite("needle-cf", args.seed, half) + \
        get_suite("needle-agree", args.seed, args.items - half)
    chosen = list(range(args.first, min(args.last, len(items))))
    prompts = [rendered(items[i], tok, "chat") for i in chosen]
    answers = generate(model, tok, encode(tok, prompts), batch_size=8, max_new_tokens=16)
    cfg = ExplainConfig(n_ablations=args.ablations, n_holdout=0, seed=args.seed)

    def attribute_all() -> None:
        for i, prompt, answer in zip(chosen, prompts, answers, strict=True):
            it = items[i]
            sents = split_sentences(it.context)
            masks, _ = ablation_masks(len(sents), cfg, it.id + it.context)
            targets = score_masks(model, tok, it, sents, masks, prompt.answer_prefix + answer,
                                  cfg)
            fit_surrogate(masks, targets, cfg.cv_folds, cfg.seed)

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
