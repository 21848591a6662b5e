"""Greedy generation of short answers on SmolLM2-135M-Instruct (CPU by default): knowflow's
batched decoder against a one-item loop and against `model.generate` (batched, left-padded,
greedy), same prompts, same run, and the floor a CPU puts under it.

Batching shares the weights' memory reads across a batch, which makes decoding steps cheap;
the prompt prefill is compute-bound and costs the same FLOPs batched or not. So the floor of
batched generation is the prefill's FLOPs (the linear layers, 2 x parameters per token, over
the prompt tokens past the shared prefix) divided by the machine's measured matmul throughput
(a (tokens x 576) @ (576 x 1536) fp32 product, as in the model's MLP, timed in CPU seconds).
The script prints that floor, the one-item loop's time, and the speedup the floor allows.

`model.generate` runs with the same batch size, left padding, greedy decoding and
max_new_tokens; it stops a row at end-of-sequence only (knowflow also stops at the answer's
end of line, so it decodes fewer tokens). Outputs are compared after knowflow's answer-line
cleaning (first non-blank line). Never asserts on time.

    .venv/bin/python benchmarks/bench_generate.py [--items 32] [--threads 1] [--batch-size 16]
"""

from __future__ import annotations

import time

import torch

from bench_eval import setup, timed  # same directory: the shared item setup
from knowflow.evaluate.batching import common_prefix_len, left_pad
from knowflow.evaluate.generate import clean_output, generate


def matmul_gflops(d_in: int = 576, d_out: int = 1536, rows: int = 512, reps: int = 20) -> float:
    """Measured fp32 matmul throughput (GFLOP/s) at the current torch thread count."""
    x, w = torch.randn(rows, d_in), torch.randn(d_in, d_out)
    x @ w
    start = time.process_time()  # CPU time: other jobs on the machine do not count
    for _ in range(reps):
        x @ w
    return 2 * rows * d_in * d_out * reps / (time.process_time() - start) / 1e9


def hf_generate(model, tok, seqs, batch_size: int, max_new_tokens: int) -> list[str]:
    """`model.generate`, left-padded batches in input order, greedy."""
    out = []
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start:start + batch_size]
        ids, mask, _ = left_pad(chunk, pad, model.device)
        gen = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=pad)
        out += [clean_output(tok.decode(g[ids.shape[1]:], skip_special_tokens=True))
                for g in gen]
    return out


def main() -> None:
    args, model, tok, _, _, seqs = setup(__doc__)
    n, bs, mnt = len(seqs), args.batch_size, args.max_new_tokens
    print(f"SmolLM2-135M-Instruct, {n} items (chat prompts, mean {sum(map(len, seqs)) / n:.0f} "
          f"tokens), {args.threads} thread(s), batch size {bs}, max_new_tokens {mnt}")

    cpu = {}

    def cpu_timed(name, fn):  # CPU seconds too: other people's jobs do not count in them
        start = time.process_time()
        out, wall = timed(fn)
        cpu[name] = time.process_time() - start
        return out, wall

    batched, t_b = cpu_timed("b", lambda: generate(model, tok, seqs, batch_size=bs,
                                                   max_new_tokens=mnt))
    single, t_s = cpu_timed("s", lambda: [generate(model, tok, [s], batch_size=1,
                                                   share_prefix=False, max_new_tokens=mnt)[0]
                                          for s in seqs])
    hf, t_h = cpu_timed("h", lambda: hf_generate(model, tok, seqs, bs, mnt))
    print(f"{'':26s} {'items/s':>8s} {'wall s':>8s} {'CPU s':>8s} {'vs one-by-one wall/CPU':>23s}"
          "  outputs")
    for key, name, out, t in (("b", "knowflow batched", batched, t_b),
                              ("s", "one-by-one loop", single, t_s),
                              ("h", "model.generate batched", hf, t_h)):
        same = "reference" if out is single else f"identical to one-by-one: {out == single}"
        print(f"{name:26s} {n / t:8.2f} {t:8.1f} {cpu[key]:8.1f} {t_s / t:14.2f}x /"
              f"{cpu['s'] / cpu[key]:5.2f}x  {same}")
    if hf != single:
        diff = [(a, b) for a, b in zip(hf, single, strict=True) if a != b]
        print(f"  model.generate differs on {len(diff)} item(s), e.g. {diff[0]!r}")

    # the floor: prefill FLOPs (linear layers, past the shared prefix) at measured throughput
    emb = model.get_input_embeddings().weight.numel()
    params = sum(p.numel() for p in model.parameters()) - emb  # tied head: not in the prefill
    shared = common_prefix_len(seqs)
    prefill_tokens = sum(len(s) - shared for s in seqs) + shared
    gflops = matmul_gflops()
    floor = 2 * params * prefill_tokens / (gflops * 1e9)
    _, t_pre = cpu_timed("p", lambda: generate(model, tok, seqs, batch_size=bs,
                                               max_new_tokens=1))
    print(f"matmul throughput {gflops:.0f} GFLOP/s; prefill {prefill_tokens} tokens x "
          f"{params / 1e6:.0f}M params = {2 * params * prefill_tokens / 1e12:.2f} TFLOP -> floor "
          f"{floor:.1f} s; knowflow's prefill (1 new token) {t_pre:.1f} s wall, "
          f"{cpu['p']:.1f} s CPU ({100 * floor / cpu['p']:.0f}% of peak)")
    print(f"best speedup the prefill floor allows (CPU time): {cpu['s'] / floor:.1f}x; knowflow "
          f"batched {cpu['s'] / cpu['b']:.2f}x; the floor is {100 * floor / cpu['b']:.0f}% of "
          "knowflow's batched CPU time")


if __name__ == "__main__":
    main()
