"""Do the two ways of finding known facts agree? `knowflow eval --scoring loglik` marks an item
known when, without the context, the memorized answer is the likelier of the two answers
(`--known-filter`, which is off by default there; one scoring pass, no decoding); `--known-by
generate` (the default under generation scoring) when the greedy answer without the context
mentions the memorized answer.

For each built-in suite this runs both on the same items (the question alone, SmolLM2-135M-
Instruct, CPU) and prints how often they agree, the 2x2 table, and examples of each kind of
disagreement (the greedy output and both no-context log-probabilities). Prints; asserts nothing.

    .venv/bin/python benchmarks/studies/check_known_flags.py [--limit 40] [--threads 1]
        [--format chat]
"""

from __future__ import annotations

import argparse

import torch

from knowflow.evaluation.run import evaluate
from knowflow.lens.load import load_model

SUITES = ("cf-capitals", "cf-world", "cf-bio", "cf-quotes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--format", default="chat")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
    common = dict(tokenizer=tok, limit=args.limit, prompt_format=args.format, use_context=False,
                  n_bootstrap=10, known_filter=True)  # on under --scoring loglik only if asked
    # with --no-context the scores/outputs already are the no-context pass: known comes from them
    by_loglik = evaluate(model, list(SUITES), scoring="loglik", **common).by_suite
    by_generate = evaluate(model, list(SUITES), scoring="generate",
                           max_new_tokens=args.max_new_tokens, **common).by_suite
    print(f"SmolLM2-135M-Instruct, {args.format} prompts without the context, {args.limit} "
          "items per suite")
    print(f"{'suite':12s} {'n':>4s} {'agree':>7s}  both  loglik only  generate only  neither")
    total = agree = 0
    examples = []
    for suite in SUITES:
        table = {(a, b): 0 for a in (True, False) for b in (True, False)}
        for rl, rg in zip(by_loglik[suite], by_generate[suite], strict=True):
            assert rl["id"] == rg["id"]
            kl, kg = rl["known"], rg["known"]
            table[kl, kg] += 1
            if kl != kg and sum(e[0] == suite and e[1] == kl for e in examples) < 2:
                examples.append((suite, kl, rl["parametric_answer"],
                                 rl["counterfactual_answer"], rg["generate"]["output"],
                                 rl["loglik"]["parametric_logprob"],
                                 rl["loglik"]["counterfactual_logprob"]))
        n = len(by_loglik[suite])
        same = table[True, True] + table[False, False]
        total, agree = total + n, agree + same
        print(f"{suite:12s} {n:4d} {same / n:7.2f}  {table[True, True]:4d}  "
              f"{table[True, False]:11d}  {table[False, True]:13d}  {table[False, False]:7d}")
    print(f"{'all':12s} {total:4d} {agree / total:7.2f}")
    print("\ndisagreements (suite, known by loglik?, memorized, context's answer, greedy "
          "output, log p(memorized), log p(context's)):")
    for suite, kl, par, cf, out, lp_par, lp_cf in examples:
        print(f"  {suite:11s} loglik={str(kl):5s} {par!r} vs {cf!r}: {out!r} "
              f"({lp_par:.2f} vs {lp_cf:.2f})")


if __name__ == "__main__":
    main()
