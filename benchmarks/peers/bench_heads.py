"""Speed of the per-head sweep (`knowflow probe heads`) against one forward pass per head.

The batched sweep runs each item's prompt prefix once and recomputes only the answer position
for every (layer, head) edit, as rows of a few batches (`lens.heads.last_position_sweep`).
The reference loop runs the whole prompt once per head with that head zeroed by a hand-written
o_proj pre-hook. Both measure the same numbers (the script checks they agree on the loop's
items); the loop is timed on a few items and scaled to the sweep's item count.

    .venv/bin/python benchmarks/peers/bench_heads.py --items 64 --loop-items 2 --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch

from knowflow.data.suites import get_suite
from knowflow.lens.arch import arch_of
from knowflow.lens.heads import head_shape
from knowflow.lens.load import load_model
from knowflow.probes.heads import conflict_prompt, head_effects


def loop_effects(model, prompt) -> torch.Tensor:
    """Zero-ablation effects, one full forward pass per head: (layers, heads)."""
    n_layers, n_heads, d = head_shape(model)
    ids = torch.tensor([prompt.ids])

    def odds() -> float:
        logits = model(ids, logits_to_keep=1).logits[0, -1]
        return float(logits[prompt.cf_token] - logits[prompt.par_token])

    base = odds()
    out = torch.zeros(n_layers, n_heads)
    for layer in range(n_layers):
        for head in range(n_heads):
            def zero(module, args, head=head):
                x = args[0].clone()
                x[:, -1, head * d:(head + 1) * d] = 0.0
                return (x,)
            handle = arch_of(model).o[layer].register_forward_pre_hook(zero)
            out[layer, head] = odds() - base
            handle.remove()
    return out


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--suites", default="cf-capitals,cf-world")
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--loop-items", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model)
    names = args.suites.split(",")
    items = [it for name in names for it in get_suite(name, limit=args.items // len(names))]
    prompts = [p for p in (conflict_prompt(it, tok, "chat") for it in items) if p is not None]
    n_layers, n_heads, _ = head_shape(model)
    print(f"{args.model}: {n_layers} layers x {n_heads} heads; {len(prompts)} items "
          f"(prompt {min(len(p.ids) for p in prompts)}-{max(len(p.ids) for p in prompts)} "
          f"tokens), {args.threads} thread(s)")
    # one forward pass per head first (on --loop-items items), then the batched sweep; CPU
    # seconds (one thread) are printed next to wall seconds, since a shared machine's wall
    # time depends on its other work
    wall, cpu = time.perf_counter(), time.process_time()
    looped = [loop_effects(model, p) for p in prompts[: args.loop_items]]
    loop_s, loop_cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = len(looped)
    print(f"one forward per head: {loop_s:.1f} s wall, {loop_cpu:.1f} s CPU for {n} item(s) "
          f"-> {loop_cpu / n * len(prompts):.0f} s CPU for {len(prompts)} items", flush=True)
    wall, cpu = time.perf_counter(), time.process_time()
    swept = []
    for i, p in enumerate(prompts, start=1):
        swept.append(head_effects(model, p, ("zero",), batch_size=args.batch_size)[1][0])
        if i % 16 == 0 or i == len(prompts):
            print(f"  batched sweep: {i} items, {time.perf_counter() - wall:.1f} s wall, "
                  f"{time.process_time() - cpu:.1f} s CPU", flush=True)
    sweep_s, sweep_cpu = time.perf_counter() - wall, time.process_time() - cpu
    diff = max(float((a - b).abs().max()) for a, b in zip(swept, looped, strict=False))
    print(f"batched sweep (zero ablation, every head): {sweep_s:.1f} s wall, {sweep_cpu:.1f} s "
          f"CPU for {len(prompts)} items ({sweep_cpu / len(prompts):.2f} s CPU/item)")
    print(f"speed-up (CPU): {loop_cpu / n * len(prompts) / sweep_cpu:.1f}x; max |effect "
          f"difference| on the loop's items: {diff:.2e}")

if __name__ == "__main__":
    main()
