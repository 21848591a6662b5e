"""How each job's CPU cost and peak memory grow with model size and context length (issue 41).

Random-weight models of real shapes (the configs of SmolLM2-135M, SmolLM2-360M, Qwen2.5-0.5B
and Llama-3.2-1B, written below; the vocabulary stays real-size; speed and memory do not depend
on the weights' values, so nothing is downloaded) and SmolLM2's tokenizer. Items are cf-capitals
conflict items whose context is padded with other items' statements to about N tokens.

Each cell (model, job, context) runs in a fresh subprocess, which builds the model, runs the job
once untimed on one item (warm-up), then times it: CPU seconds (process time, every thread) and
wall seconds per item (per step for sft), and the child's peak resident memory
(`resource.getrusage(RUSAGE_SELF).ru_maxrss` at its end; this includes Python, torch and the
model's float32 weights, printed beside it as `weights`). The parent prints one table per job,
fitted log-log exponents (seconds ~ params^a at a fixed context, ~ context^b at a fixed model)
and writes a log-log PNG. Never asserts on time; on a shared machine the figures are noisy.
With no flags (as `make bench` runs it): SmolLM2-135M's shape, eval-loglik and explain, contexts
256 and 1k; `--full`: the whole grid.

Jobs: eval-loglik (items), eval-generate (items, greedy, 8 new tokens), explain (ablation
attribution, 8 subsets + 4 held out, per item), knockout (attention knockout sweep, per
prompt: the context then a well-known-fact prompt), heads (probe heads, zero ablation, per
item), sft (LoRA, steps of batch 1 at the context length; no tracker).

    .venv/bin/python benchmarks/bench_scale.py --models smollm2-135m,smollm2-360m \\
        --jobs eval-loglik,knockout,sft --contexts 256,1024 --threads 2 --plot /tmp/scale.png
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

# Real shapes; `model_type` picks the transformers class. Vocabulary and tying as released.
CONFIGS: dict[str, dict] = {
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                         rms_norm_eps=1e-5, max_position_embeddings=8192),
    "smollm2-360m": dict(model_type="llama", hidden_size=960, intermediate_size=2560,
                         num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5,
                         vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                         rms_norm_eps=1e-5, max_position_embeddings=8192),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0,
                         rms_norm_eps=1e-6, max_position_embeddings=32768),
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=131072,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                       "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 8192}),
}
JOBS = ("eval-loglik", "eval-generate", "explain", "knockout", "heads", "sft")
ITEMS = {"eval-loglik": 4, "eval-generate": 2, "explain": 1, "knockout": 1, "heads": 1,
         "sft": 2}
UNIT = {"sft": "step"}


def build_model(name: str):
    """A random-weight model of `name`'s shape (float32, eval mode) and SmolLM2's tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from knowflow.lens.load import load_tokenizer

    spec = dict(CONFIGS[name])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    tok = load_tokenizer("smollm2-135m-instruct")
    config.bos_token_id, config.eos_token_id = tok.bos_token_id, tok.eos_token_id
    config.pad_token_id = tok.pad_token_id
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                             attn_implementation="sdpa")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok


def long_items(tok, n: int, tokens: int):
    """`n` cf-capitals items, each context padded (before the item's own statement) with
    other items' statements to about `tokens` tokens."""
    from knowflow.data.suites import get_suite

    pool = get_suite("cf-capitals")
    filler = [it.context for it in pool]
    out = []
    for i, it in enumerate(pool[:n]):
        parts, count, j = [], 0, i + 1
        while count < tokens - len(tok(it.context)["input_ids"]):
            s = filler[j % len(filler)]
            parts.append(s)
            count += len(tok(s)["input_ids"])
            j += 1
        out.append(replace(it, context=" ".join(parts + [it.context])))
    return out


def run_job(job: str, model, tok, items, context: int, n: int):
    """Run `job` once on `n` items (or `n` sft steps)."""
    from knowflow.evaluation.run import evaluate

    if job in ("eval-loglik", "eval-generate"):
        scoring = job.split("-")[1]
        evaluate(model, items[:n], tokenizer=tok, scoring=scoring, known_filter=False,
                 batch_size=4, max_new_tokens=8)
    elif job == "explain":
        from knowflow.explanation.run import explain

        explain(model, items[:n], tokenizer=tok, levels=("source", "sentences"),
                attribution="ablation", n_ablations=8, n_holdout=4, max_new_tokens=8)
    elif job == "knockout":
        from knowflow.probes.examples import builtin_facts
        from knowflow.probes.knockout import KnockoutConfig, knockout

        facts = builtin_facts()
        examples = []
        for it, ex in zip(items[:n], facts, strict=False):
            prefix = it.context + "\n"
            examples.append(replace(ex, prompt=prefix + ex.prompt, context=(0, len(prefix))))
        knockout(model, tok, examples, KnockoutConfig(known_only=False))
    elif job == "heads":
        from knowflow.probes.heads import HeadsConfig, heads

        heads(model, tok, items[:n], HeadsConfig(ablations=("zero",), rank_by="zero",
                                                 n_bootstrap=10))
    elif job == "sft":
        from knowflow.data.facts import Instruction
        from knowflow.data.instruction_rows import encode_all
        from knowflow.train.sft import SFTConfig, train_model

        rows = [Instruction(instruction=it.question, input=it.context,
                            output=it.counterfactual_answer) for it in items]
        data, _ = encode_all(tok, rows, "chat", context + 128)
        cfg = SFTConfig(steps=n, batch_size=1, save_every=10_000, max_length=context + 128)
        with tempfile.TemporaryDirectory() as tmp:
            train_model(model, tok, data, cfg, Path(tmp))
    else:
        raise SystemExit(f"unknown job {job!r} (known: {', '.join(JOBS)})")


def cell(name: str, job: str, context: int, threads: int, items: int | None = None) -> dict:
    """One measurement in this (fresh) process; returns its figures."""
    import torch

    torch.set_num_threads(threads)
    model, tok = build_model(name)
    params = sum(p.numel() for p in model.parameters())
    n = items or ITEMS[job]
    items = long_items(tok, max(n, 2), context)
    prompt_tokens = len(tok(items[0].context)["input_ids"])
    warm = model if job != "sft" else build_model(name)[0]  # sft wraps its model in LoRA
    run_job(job, warm, tok, items, context, 1)
    del warm
    cpu0, wall0 = time.process_time(), time.perf_counter()
    run_job(job, model, tok, items, context, n)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return dict(model=name, job=job, context=context, params=params, n=n,
                context_tokens=prompt_tokens, cpu_s=cpu / n, wall_s=wall / n,
                peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                weights_mib=params * 4 / 2**20)


def fit_exponent(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y on log x (None under two distinct points)."""
    if len(set(xs)) < 2:
        return None
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    cov = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
    return cov / sum((a - mx) ** 2 for a in lx)


def report(rows: list[dict]) -> None:
    for job in dict.fromkeys(r["job"] for r in rows):
        sub = [r for r in rows if r["job"] == job]
        unit = UNIT.get(job, "item")
        print(f"\n== {job} (per {unit})")
        print(f"{'model':14s} {'params':>7s} {'context':>8s} {'tokens':>7s} {'cpu s':>8s} "
              f"{'wall s':>8s} {'peak MiB':>9s} {'weights':>8s}")
        for r in sub:
            print(f"{r['model']:14s} {r['params'] / 1e6:6.0f}M {r['context']:8d} "
                  f"{r['context_tokens']:7d} {r['cpu_s']:8.2f} {r['wall_s']:8.2f} "
                  f"{r['peak_mib']:9.0f} {r['weights_mib']:8.0f}")
        for ctx in sorted({r["context"] for r in sub}):
            at = [r for r in sub if r["context"] == ctx]
            a = fit_exponent([r["params"] for r in at], [r["cpu_s"] for r in at])
            m = fit_exponent([r["params"] for r in at], [r["peak_mib"] for r in at])
            if a is not None:
                print(f"  context {ctx}: cpu s ~ params^{a:.2f}; peak memory ~ params^{m:.2f}")
        for name in dict.fromkeys(r["model"] for r in sub):
            at = [r for r in sub if r["model"] == name]
            b = fit_exponent([r["context_tokens"] for r in at], [r["cpu_s"] for r in at])
            m = fit_exponent([r["context_tokens"] for r in at], [r["peak_mib"] for r in at])
            if b is not None:
                print(f"  {name}: cpu s ~ context^{b:.2f}; peak memory ~ context^{m:.2f}")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = list(dict.fromkeys(r["job"] for r in rows))
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for job in jobs:
        for ctx in sorted({r["context"] for r in rows}):
            at = sorted((r for r in rows if r["job"] == job and r["context"] == ctx),
                        key=lambda r: r["params"])
            if at:
                x = [r["params"] for r in at]
                axes[0][0].plot(x, [r["cpu_s"] for r in at], "o-", label=f"{job} @{ctx}")
                axes[1][0].plot(x, [r["peak_mib"] for r in at], "o-", label=f"{job} @{ctx}")
        for name in dict.fromkeys(r["model"] for r in rows):
            at = sorted((r for r in rows if r["job"] == job and r["model"] == name),
                        key=lambda r: r["context_tokens"])
            if at:
                x = [r["context_tokens"] for r in at]
                axes[0][1].plot(x, [r["cpu_s"] for r in at], "o-", label=f"{job} {name}")
                axes[1][1].plot(x, [r["peak_mib"] for r in at], "o-", label=f"{job} {name}")
    titles = [["CPU s per item vs parameters", "CPU s per item vs context tokens"],
              ["peak RSS (MiB) vs parameters", "peak RSS (MiB) vs context tokens"]]
    for i in range(2):
        for j in range(2):
            ax = axes[i][j]
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(titles[i][j], fontsize=10)
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2-135m",
                    help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--jobs", default="eval-loglik,explain", help=f"of {', '.join(JOBS)}")
    ap.add_argument("--contexts", default="256,1024", help="context tokens")
    ap.add_argument("--full", action="store_true",
                    help="every model, job and context 256,1024,2048 (hours on a laptop CPU)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plot", type=Path, help="write the log-log PNG here")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    ap.add_argument("--items", type=int, help="items (sft: steps) per cell, instead of "
                                               f"each job's default {ITEMS}")
    ap.add_argument("--cell", help=argparse.SUPPRESS)  # model,job,context: run one cell here
    args = ap.parse_args()
    if args.cell:
        name, job, ctx = args.cell.split(",")
        print(json.dumps(cell(name, job, int(ctx), args.threads, args.items)))
        return
    if args.full:
        args.models, args.jobs = ",".join(CONFIGS), ",".join(JOBS)
        args.contexts = "256,1024,2048"
    models = [m.strip() for m in args.models.split(",")]
    jobs = [j.strip() for j in args.jobs.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    for bad in [m for m in models if m not in CONFIGS] + [j for j in jobs if j not in JOBS]:
        raise SystemExit(f"unknown model or job {bad!r}")
    rows = []
    for job in jobs:
        for name in models:
            for ctx in contexts:
                cmd = [sys.executable, __file__, "--cell", f"{name},{job},{ctx}",
                       "--threads", str(args.threads)] + (
                           ["--items", str(args.items)] if args.items else [])
                try:
                    done = subprocess.run(cmd, capture_output=True, text=True,
                                          timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    print(f"{name} {job} @{ctx}: over {args.timeout} s, skipped", flush=True)
                    continue
                if done.returncode != 0:
                    tail = done.stderr.strip().splitlines()[-3:]
                    print(f"{name} {job} @{ctx}: failed: {' | '.join(tail)}", flush=True)
                    continue
                row = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(f"{name} {job} @{ctx}: {row['cpu_s']:.2f} cpu s, {row['wall_s']:.2f} "
                      f"wall s per {UNIT.get(job, 'item')}, peak {row['peak_mib']:.0f} MiB",
                      flush=True)
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.plot and rows:
        plot(rows, args.plot)
        print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
