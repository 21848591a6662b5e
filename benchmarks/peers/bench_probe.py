"""Benchmark: a full attention-knockout sweep (every layer, 3 source sets) on 100 prompts,
batched (as `knowflow probe knockout` runs it) against the naive loop of one forward pass per
(prompt, layer, source set). The naive loop runs on a subset and is extrapolated linearly
(forward passes of one prompt cost the same whatever the prompt); the printout says so.
Then how cost grows: the batched sweep at 1x, 2x and 4x `--growth-prompts`, on the model and
on two sizes of knowflow's tiny Llama (random weights over the same tokenizer: cost does not
depend on the weights). Prints figures; never asserts on time.

    .venv/bin/python benchmarks/peers/bench_probe.py [--prompts 100] [--naive-prompts 3]
                                                     [--growth-prompts 8] [--growth-only]
"""

from __future__ import annotations

import argparse
import time

import torch

from knowflow.lens.arch import arch_of
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.load import load_model
from knowflow.probes.common import predict, window
from knowflow.probes.examples import builtin_facts
from knowflow.probes.knockout import KnockoutConfig, knockout
from knowflow.probes.spans import locate

SOURCES = ("subject", "non_subject", "last")


@torch.no_grad()
def naive_sweep(model, tokenizer, examples, k: int = 9) -> dict[tuple[str, str, int], float]:
    """One forward pass per (prompt, source set, layer), plus one unmodified pass per prompt."""
    arch = arch_of(model)
    located = [locate(tokenizer, ex) for ex in examples]
    preds = predict(model, tokenizer, examples, located)
    out = {}
    with intercepted(model) as layer_of:
        for ex, loc, pred in zip(examples, located, preds, strict=True):
            ids = torch.tensor([loc.input_ids], device=model.device)
            n = len(loc.input_ids)
            base = model(ids).logits[0, -1].float().softmax(-1)[pred.token_id].item()
            for source in SOURCES:
                pos = list(loc.positions(source))
                for centre in range(arch.n_layers):
                    lo, hi = window(centre, k, arch.n_layers)
                    block = torch.zeros(1, 1, n, n, dtype=torch.bool, device=model.device)
                    block[0, 0, n - 1, pos] = True
                    plan = AttentionPlan(block={layer: block for layer in range(lo, hi + 1)},
                                         layer_of=layer_of)
                    logits = model(ids, knowflow_plan=plan).logits[0, -1].float()
                    p = logits.softmax(-1)[pred.token_id].item()
                    out[(ex.id, source, centre)] = (p - base) / base
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--naive-prompts", type=int, default=3)
    parser.add_argument("--replicate-prompts", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--growth-prompts", type=int, default=8)
    parser.add_argument("--growth-only", action="store_true")
    parser.add_argument("--skip-growth", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model, tokenizer = load_model(args.model, device=args.device)
    if not args.growth_only:
        compare(model, tokenizer, args)
    if not args.skip_growth:
        growth(model, tokenizer, args)


def growth(model, tokenizer, args) -> None:
    """Batched knockout sweep time at 1x, 2x, 4x prompts, on `model` and two tiny Llamas."""
    from knowflow.experiments.inversion_tiny.model import TinyModelConfig, make_model

    facts = builtin_facts()
    vocab = model.get_input_embeddings().weight.shape[0]
    models = [(args.model, model)]
    for cfg in (TinyModelConfig(layers=2, heads=4, d_model=64, d_ff=256),
                TinyModelConfig(layers=4, heads=4, d_model=128, d_ff=512)):
        tiny = make_model(cfg, vocab, 512, seed=0).to(args.device).eval()
        models.append((f"tiny llama {cfg.layers}L d{cfg.d_model}", tiny))
    print(f"\ncost growth (batched sweep, every layer, {', '.join(SOURCES)}, window min(9, "
          "layers); CPU seconds of this process, after a one-prompt warm-up)")
    print(f"{'model':28s} {'params':>8s} {'prompts':>8s} {'CPU s':>8s} {'x 1x':>6s}")
    for name, m in models:
        params = sum(p.numel() for p in m.parameters())
        cfg = KnockoutConfig(known_only=False, window=min(9, arch_of(m).n_layers))
        knockout(m, tokenizer, facts[:1], cfg)  # warm-up: first-call costs
        base = None
        for mult in (1, 2, 4):
            n = args.growth_prompts * mult
            examples = [facts[i % len(facts)] for i in range(n)]
            start = time.process_time()
            knockout(m, tokenizer, examples, cfg)
            t = time.process_time() - start
            base = base or t
            print(f"{name:28s} {params / 1e6:7.1f}M {n:8d} {t:8.1f} {t / base:6.2f}")


def compare(model, tokenizer, args) -> None:
    """The batched sweep against full replication and the naive loop."""
    n_layers = arch_of(model).n_layers
    facts = builtin_facts()
    examples = [facts[i % len(facts)] for i in range(args.prompts)]  # cycled to N prompts
    print(f"model {args.model} ({n_layers} layers) on {model.device}, {args.threads} thread(s);"
          f" {args.prompts} prompts ({len(facts)} distinct facts, cycled), sources "
          f"{', '.join(SOURCES)}, window 9, every layer")

    def timed(fn):
        start = time.perf_counter()
        result = fn()
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        return result, time.perf_counter() - start

    cfg = KnockoutConfig(known_only=False)
    records, t_batched = timed(lambda: knockout(model, tokenizer, examples, cfg))
    passes = args.prompts * len(SOURCES) * n_layers
    print(f"batched, shared prefix   : {t_batched:8.1f} s for {args.prompts} prompts "
          f"({len(records)} knockouts, {t_batched / args.prompts:.2f} s/prompt)")

    sub = examples[: args.replicate_prompts]
    rep_records, t_rep = timed(lambda: knockout(
        model, tokenizer, sub, KnockoutConfig(known_only=False, shared_prefix=False)))
    t_rep_all = t_rep / len(sub) * args.prompts
    print(f"batched, full replication: {t_rep_all:8.1f} s extrapolated from {len(sub)} prompts "
          f"({t_rep:.1f} s measured)")

    naive_sub = examples[: args.naive_prompts]
    naive, t_naive = timed(lambda: naive_sweep(model, tokenizer, naive_sub))
    t_naive_all = t_naive / len(naive_sub) * args.prompts
    print(f"naive loop               : {t_naive_all:8.1f} s extrapolated from "
          f"{len(naive_sub)} prompts ({t_naive:.1f} s measured, {len(naive)} forward passes"
          f" + {len(naive_sub)} unmodified; {passes} + {args.prompts} for all prompts)")
    print(f"speed-up over the naive loop: {t_naive_all / t_batched:.1f}x (shared prefix), "
          f"{t_naive_all / t_rep_all:.1f}x (full replication)")

    by_key = {(r["example"], r["source"], r["layer"]): r["rel_change"] for r in records}
    diff = max(abs(by_key[key] - value) for key, value in naive.items())
    rep = {(r["example"], r["source"], r["layer"]): r["rel_change"] for r in rep_records}
    diff_rep = max(abs(by_key[key] - value) for key, value in rep.items())
    print(f"agreement: max |relative change difference| batched vs naive {diff:.2e}, "
          f"shared prefix vs full replication {diff_rep:.2e}")


if __name__ == "__main__":
    main()
