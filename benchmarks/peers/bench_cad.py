"""Cost of context-aware decoding (CAD) against greedy, and against a naive CAD, on
SmolLM2-135M-Instruct (CPU by default).

CAD runs two streams (with and without the context), so its target is at most 2.2x greedy's
cost. Both run batched, each stream with its own KV cache and shared-prefix cache. The naive
CAD decodes one item at a time and, at every step, recomputes both full prompts plus the
answer so far without any cache (and scores each candidate with two full forward passes), as
a script around `model(...)` would. Same items, same run; prints items/s, the ratios, and
whether the answers and scores agree. Never asserts on time.

    .venv/bin/python benchmarks/peers/bench_cad.py [--items 32] [--threads 1] [--batch-size 16]
"""

from __future__ import annotations

import time

import torch

from bench_eval import setup, timed
from knowflow.data.prompts import PromptConfig, render
from knowflow.evaluation.decoding import Method, generate_contrastive, score_contrastive
from knowflow.evaluation.generate import _eos_ids, clean_output, generate, stop_table
from knowflow.lens.prompt_batches import encode_prompts
from knowflow.lens.scorer import score_continuations


@torch.no_grad()
def naive_generate(model, tok, seq, base, method, max_new_tokens, table) -> str:
    """One item, no cache: both full sequences run again at every step."""
    out: list[int] = []
    has_text = False
    for _ in range(max_new_tokens):
        z_c = model(input_ids=torch.tensor([seq + out])).logits[0, -1]
        z_n = model(input_ids=torch.tensor([base + out])).logits[0, -1]
        t = int(method.logits(z_c, z_n).argmax())
        if table.eos[t]:
            break
        out.append(t)
        if table.newline[t] and (has_text or table.text_first[t]):
            break
        has_text = has_text or not bool(table.blank[t])
    return clean_output(tok.decode(out, skip_special_tokens=True))


@torch.no_grad()
def naive_score(model, tok, seq, base, conts, method) -> list[float]:
    """Each candidate by two full forward passes (with and without the context)."""
    out = []
    for text in conts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        z_c = model(input_ids=torch.tensor([seq + ids])).logits[0, len(seq) - 1:-1]
        z_n = model(input_ids=torch.tensor([base + ids])).logits[0, len(base) - 1:-1]
        logp = torch.log_softmax(method.logits(z_c, z_n), dim=-1)
        out.append(float(logp[torch.arange(len(ids)), torch.tensor(ids)].sum()))
    return out


def main() -> None:
    args, model, tok, items, prompts, seqs = setup(__doc__)
    base_prompts = [render(i, tok, PromptConfig("chat", use_context=False)) for i in items]
    base = encode_prompts(tok, [p.text for p in base_prompts],
                          [p.add_special_tokens for p in base_prompts])
    conts = [[p.answer_prefix + i.counterfactual_answer, p.answer_prefix + i.parametric_answer]
             for p, i in zip(prompts, items, strict=True)]
    cad = Method("cad", 1.0)
    n, bs, mnt = len(items), args.batch_size, args.max_new_tokens
    print(f"SmolLM2-135M-Instruct, {n} items, torch threads={args.threads}, batch size={bs}, "
          f"max new tokens={mnt}")

    greedy, t_g = timed(lambda: generate(model, tok, seqs, batch_size=bs, max_new_tokens=mnt))
    batched, t_c = timed(lambda: generate_contrastive(model, tok, seqs, base, cad,
                                                      batch_size=bs, max_new_tokens=mnt))
    table = stop_table(tok, model.get_output_embeddings().weight.shape[0], _eos_ids(model))
    naive, t_n = timed(lambda: [naive_generate(model, tok, s, b, cad, mnt, table)
                                for s, b in zip(seqs, base, strict=True)])
    print(f"generate  greedy            {n / t_g:6.2f} items/s  ({t_g:6.1f} s)")
    print(f"generate  cad (2 caches)    {n / t_c:6.2f} items/s  ({t_c:6.1f} s)")
    print(f"generate  cad naive         {n / t_n:6.2f} items/s  ({t_n:6.1f} s)")
    print(f"generate  cad / greedy cost {t_c / t_g:6.2f}x (target <= 2.2x); naive / cad "
          f"{t_n / t_c:6.2f}x; answers equal to naive: {sum(a == b for a, b in zip(batched, naive, strict=True))}/{n}")  # noqa: E501
    _ = greedy

    _, t_lg = timed(lambda: score_continuations(model, tok, seqs, conts, batch_size=bs))
    scores, t_lc = timed(lambda: score_contrastive(model, tok, seqs, base, conts, cad,
                                                   batch_size=bs))
    ref, t_ln = timed(lambda: [naive_score(model, tok, s, b, c, cad)
                               for s, b, c in zip(seqs, base, conts, strict=True)])
    diff = max(abs(lp - r) for sc, rs in zip(scores, ref, strict=True)
               for (lp, _), r in zip(sc, rs, strict=True))
    print(f"loglik    greedy            {n / t_lg:6.2f} items/s  ({t_lg:6.1f} s)")
    print(f"loglik    cad (2 caches)    {n / t_lc:6.2f} items/s  ({t_lc:6.1f} s)")
    print(f"loglik    cad naive         {n / t_ln:6.2f} items/s  ({t_ln:6.1f} s)")
    print(f"loglik    cad / greedy cost {t_lc / t_lg:6.2f}x (target <= 2.2x); naive / cad "
          f"{t_ln / t_lc:6.2f}x; largest score difference to naive {diff:.2e}")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - start:.0f} s")
