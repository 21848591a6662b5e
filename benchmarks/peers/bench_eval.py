"""Throughput of knowledge-conflict scoring on SmolLM2-135M-Instruct (CPU by default).

Generation: batched greedy decoding (length-sorted batches, shared prompt prefix, finished
rows dropped early) against a loop that decodes one item at a time. Log-likelihood: batched
scoring (each prompt run once, candidates on its KV cache) against one item at a time, and
against a naive loop with one full forward pass per candidate. Same items, same run; prints
items/s and speedups, and whether the outputs agree. Then how cost grows: batched
log-likelihood and generation at 1x, 2x and 4x distinct items. Never
asserts on time.

    .venv/bin/python benchmarks/peers/bench_eval.py [--items 32] [--threads 1] [--batch-size 16]
                                                    [--skip-growth]
"""

from __future__ import annotations

import argparse
import time

import torch

from knowflow.data.prompts import PromptConfig, render
from knowflow.data.suites import get_suite
from knowflow.evaluation.generate import generate
from knowflow.evaluation.loglik import score_naive
from knowflow.lens.load import load_model
from knowflow.lens.prompt_batches import encode_prompts
from knowflow.lens.scorer import score_continuations


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


SUITES = ("cf-capitals", "cf-world", "cf-bio", "cf-quotes")


def chat_items(tok, per_suite: int, take: int | None = None):
    """(items, prompts, seqs): `per_suite` sampled items of each built-in suite (the first
    `take` of them, if given, so smaller sets nest in larger ones), chat prompts, token ids."""
    items = [i for s in SUITES for i in get_suite(s, seed=0, limit=per_suite)[:take]]
    prompts = [render(i, tok, PromptConfig("chat")) for i in items]
    seqs = encode_prompts(tok, [p.text for p in prompts], [p.add_special_tokens for p in prompts])
    return items, prompts, seqs


def answers(prompts, items) -> list[list[str]]:
    """Each item's two candidate continuations: counterfactual, parametric."""
    return [[p.answer_prefix + i.counterfactual_answer, p.answer_prefix + i.parametric_answer]
            for p, i in zip(prompts, items, strict=True)]


def setup(doc: str, extra=None):
    """(args, model, tokenizer, items, prompts, seqs): SmolLM2 on CPU and `--items` chat
    prompts split over the four built-in suites (bench_generate.py shares this)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--items", type=int, default=32, help="items (split over the 4 suites)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    if extra:
        extra(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model("smollm2-135m-instruct", device="cpu")
    return (args, model, tok, *chat_items(tok, max(1, args.items // 4)))


def main() -> None:
    def flags(ap):
        ap.add_argument("--skip-growth", action="store_true", help="skip the 1x/2x/4x table")
        ap.add_argument("--growth-only", action="store_true", help="only the 1x/2x/4x table")

    args, model, tok, items, prompts, seqs = setup(__doc__, flags)
    conts = answers(prompts, items)
    if args.growth_only:
        growth(model, tok, args)
        return
    n = len(items)
    print(f"SmolLM2-135M-Instruct, {n} items (chat prompts, mean {sum(map(len, seqs)) / n:.0f} "
          f"tokens), torch threads={args.threads}, batch size={args.batch_size}")

    batched, t_b = timed(lambda: generate(model, tok, seqs, batch_size=args.batch_size,
                                          max_new_tokens=args.max_new_tokens))
    single, t_s = timed(lambda: [generate(model, tok, [s], batch_size=1, share_prefix=False,
                                          max_new_tokens=args.max_new_tokens)[0] for s in seqs])
    print(f"generate  batched      {n / t_b:6.2f} items/s  ({t_b:6.1f} s)")
    print(f"generate  one-by-one   {n / t_s:6.2f} items/s  ({t_s:6.1f} s)")
    print(f"generate  speedup      {t_s / t_b:6.2f}x   outputs identical: {batched == single}")
    # the floor: prompt prefill alone (one new token), which batching cannot shrink on a CPU
    _, t_pb = timed(lambda: generate(model, tok, seqs, batch_size=args.batch_size,
                                     max_new_tokens=1))
    _, t_ps = timed(lambda: [generate(model, tok, [s], batch_size=1, share_prefix=False,
                                      max_new_tokens=1) for s in seqs])
    print(f"prefill   batched {t_pb:6.1f} s, one-by-one {t_ps:6.1f} s: prefill is "
          f"{100 * t_pb / t_b:.0f}% of batched generation time")

    lb, t_lb = timed(lambda: score_continuations(model, tok, seqs, conts,
                                                 batch_size=args.batch_size))
    ls, t_ls = timed(lambda: [score_continuations(model, tok, [s], [c], batch_size=1,
                                                  share_prefix=False)[0]
                              for s, c in zip(seqs, conts, strict=True)])
    ln, t_ln = timed(lambda: [[score_naive(model, tok, s, x) for x in c]
                              for s, c in zip(seqs, conts, strict=True)])
    diff = max(abs(a[0] - b[0]) for ra, rb in zip(lb, ln, strict=True)
               for a, b in zip(ra, rb, strict=True))
    print(f"loglik    batched      {n / t_lb:6.2f} items/s  ({t_lb:6.1f} s)")
    print(f"loglik    one-by-one   {n / t_ls:6.2f} items/s  ({t_ls:6.1f} s)  "
          f"speedup {t_ls / t_lb:5.2f}x")
    print(f"loglik    naive/cand   {n / t_ln:6.2f} items/s  ({t_ln:6.1f} s)  "
          f"speedup {t_ln / t_lb:5.2f}x   max |logprob diff| {diff:.2e}")
    if not args.skip_growth:
        growth(model, tok, args)


def cpu_timed(fn) -> float:
    """CPU seconds of this process for `fn()` (other jobs on the machine do not count)."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def growth(model, tok, args) -> None:
    """Batched loglik and generation CPU time at 1x, 2x, 4x `--items` distinct items (the
    smaller sets inside the larger; repeated items would be scored once, so none repeat)."""
    per = max(1, args.items // 4)
    sets = []
    for mult in (1, 2, 4):
        items, prompts, seqs = chat_items(tok, 4 * per, take=mult * per)
        sets.append((mult, seqs, answers(prompts, items)))
    assert len({tuple(s) for s in sets[-1][1]}) == len(sets[-1][1]), "items repeat"
    score_continuations(model, tok, sets[0][1][:2], sets[0][2][:2])  # warm-up: first calls
    print(f"\ncost growth (CPU s)   {'items':>6s} {'loglik s':>9s} {'x 1x':>6s} "
          f"{'generate s':>11s} {'x 1x':>6s}")
    base = None
    for mult, s, c in sets:
        t_l = cpu_timed(lambda s=s, c=c: score_continuations(model, tok, s, c,
                                                            batch_size=args.batch_size))
        t_g = cpu_timed(lambda s=s: generate(model, tok, s, batch_size=args.batch_size,
                                             max_new_tokens=args.max_new_tokens))
        base = base or (t_l, t_g)
        print(f"  {mult}x                {len(s):6d} {t_l:9.1f} {t_l / base[0]:6.2f} {t_g:11.1f} "
              f"{t_g / base[1]:6.2f}")


if __name__ == "__main__":
    main()
