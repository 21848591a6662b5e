"""Throughput on whatever device is present (CUDA GPU if there is one, else CPU): `knowflow
eval` scoring (log-likelihood and greedy generation), an attention-knockout sweep and a short
LoRA finetuning run, on SmolLM2-135M-Instruct. Prints one table: items/s and tokens/s per job.

On CUDA the model runs in bfloat16 with SDPA attention (knockout edits SDPA's mask through
knowflow's registered attention function; nothing here needs the attention matrix), eval
batches are sized by free GPU memory (`--batch-size 0`), and finetuning keeps float32 weights
under bf16 autocast (the Trainer's `bf16`). On CPU: float32, batch 16, small sizes (the same
table). Never asserts on time.

    .venv/bin/python benchmarks/scale/bench_gpu.py [--device auto] [--dtype auto] [--items N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from knowflow.data.instruction_rows import encode_all
from knowflow.data.instructions import MixtureConfig, builtin_mixture
from knowflow.evaluation.items import load_suites
from knowflow.evaluation.run import evaluate
from knowflow.lens.load import load_model, resolve_device
from knowflow.probes.examples import builtin_facts
from knowflow.probes.knockout import KnockoutConfig, knockout
from knowflow.train.sft import SFTConfig, train_model


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--items", type=int, help="eval items per suite (default: all on GPU, "
                                              "8 on CPU)")
    ap.add_argument("--prompts", type=int, help="knockout prompts (default 100 GPU, 4 CPU)")
    ap.add_argument("--steps", type=int, help="LoRA steps (default 50 GPU, 3 CPU)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    gpu = device.type == "cuda"
    limit = args.items if args.items is not None else (None if gpu else 8)
    n_prompts = args.prompts or (100 if gpu else 4)
    steps = args.steps or (50 if gpu else 3)
    model, tok = load_model("smollm2-135m-instruct", device=str(device), dtype=args.dtype)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    name = torch.cuda.get_device_name(device) if gpu else f"CPU, {args.threads} thread(s)"
    print(f"device: {name}; weights {dtype}; attention {model.config._attn_implementation}")
    rows = []

    suites = load_suites(None, limit=limit)
    n_items = sum(len(v) for v in suites.values())
    prompt_tokens = None
    for scoring in ("loglik", "generate"):
        res, t = timed(lambda s=scoring: evaluate(model, list(suites), tokenizer=tok,
                                                  scoring=s, batch_size=0, known_filter=False,
                                                  limit=limit), device)
        if prompt_tokens is None:
            prompt_tokens = sum(len(tok(r["prompt"], add_special_tokens=False)["input_ids"])
                                for rs in res.by_suite.values() for r in rs)
        rows.append((f"eval {scoring}", n_items, t, prompt_tokens, "prompt"))

    facts = builtin_facts()
    examples = [facts[i % len(facts)] for i in range(n_prompts)]
    kcfg = KnockoutConfig(known_only=False)
    recs, t = timed(lambda: knockout(model, tok, examples, kcfg), device)
    scored = sum(len(tok(e.prompt)["input_ids"]) for e in examples) * len(recs) // n_prompts
    rows.append(("knockout sweep", n_prompts, t, scored, "variant"))

    sft_model, _ = load_model("smollm2-135m-instruct", device=str(device),
                              dtype="float32" if args.dtype == "auto" else args.dtype)
    data, _ = encode_all(tok, builtin_mixture(MixtureConfig()), "chat", 256)
    cfg = SFTConfig(steps=steps, batch_size=8, save_every=10_000)
    with tempfile.TemporaryDirectory() as tmp:
        _, t = timed(lambda: train_model(sft_model, tok, data, cfg, Path(tmp)), device)
    mean_len = sum(len(d["input_ids"]) for d in data) / len(data)
    rows.append((f"LoRA sft {steps} steps", steps * 8, t, int(steps * 8 * mean_len), "train"))

    print(f"\n{'job':22s} {'items':>6s} {'seconds':>8s} {'items/s':>9s} {'tokens/s':>10s}  tokens")
    for job, n, t, tokens, kind in rows:
        print(f"{job:22s} {n:6d} {t:8.1f} {n / t:9.2f} {tokens / t:10.0f}  {kind}")
    print("items: eval items, knockout prompts (all layers x 3 source sets each), training "
          "examples; tokens: prompt tokens scored, token positions under knockout variants, "
          "training tokens (padding excluded)")


if __name__ == "__main__":
    main()
