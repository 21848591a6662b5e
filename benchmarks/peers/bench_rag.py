"""`knowflow explain` against ContextCite on RAG-shaped contexts: 256 to 8k tokens.

    python benchmarks/peers/bench_rag.py --tokens 256,1024,2048 --items 8,6,4 --threads 1 \\
        --json rag.jsonl
    python benchmarks/peers/bench_rag.py --summarize rag.jsonl
    python benchmarks/peers/bench_rag.py --hotpot tests/data/layouts/hotpotqa_distractor.json
    python benchmarks/peers/bench_rag.py --floor 1024,4096 --masks 16
    python benchmarks/peers/bench_rag.py --tokens 4096 --items 1 --methods explain \
        --set max_memory=1.5      # explain's peak memory under --max-memory 1.5

Items (`rag_items.py`): retrieved passages of 3-8 sentences, the answer in one of them,
distractor passages of the same relation; `--tokens T` takes `rag_items.PASSAGES[T]`
passages (about T prompt tokens with SmolLM2's chat template), `--items` how many per length;
`--hotpot FILE` reads a file in HotpotQA's distractor layout instead. Every method explains
the same answer (the model's greedy answer, cut to its span as `knowflow explain` cuts it)
after the same prompt; ContextCite (`context-cite` 0.0.4, `_contextcite` in bench_explain.py:
its 64 ablations at keep 0.5 and its own lasso; its nltk download replaced by knowflow's
splitter) is given that answer and timed on its attribution, at its default batch size 1
(`contextcite`) and batched (`contextcite-batched`: 16 prompts of 1k tokens a batch, fewer as
they grow, `cc_batch`: its full logits are 200 kB a token); its generation of the answer
(`model.generate`, the same number of new tokens) is timed apart (`cc_generate`).

Methods: `explain` is the whole `knowflow explain` command per item at its defaults
(`--levels source,sentences`): the generation with and without the context, the source
verdict, the attribution (its rounds of ablations until the held-out LDS converges), the
held-out check and the top-k drops; `explain-fast` is the fast mode (`FAST`: one pass plus at
most 8 ablations); `--set k=v` changes explain's config for both. Each item runs every
method in one process, the sides alternating which goes first item by item. Per method:
CPU seconds (the process's own), wall seconds, peak resident memory above the level before
the method (VmHWM, reset before each method) and the process's whole peak (the loaded model
included: what `--set max_memory=GIB` bounds, printed as "process peak"), and the LDS: the
Spearman correlation between the method's scores summed over the kept sentences and the
span's actual log-probability on `--holdout` random half masks of the item's sentences, the
same for every method, scored once and not timed. `forward_cpu` is one forward pass over the
item's whole prompt (the floor a pass over the text costs). The summary prints, per length,
each method's mean LDS, CPU, peak memory and the CPU ratio of ContextCite to it, and each
method's CPU against length as a log-log slope beside the forward pass's.

`--floor T,...` measures the ablation path against the physical floor: for `--masks` random
half masks of an item of each length, the CPU of knowflow's scoring of them (from the
prompt's keys and values, run once) against one forward pass of each ablated text, and
against a pass of each ablated text's tokens after its first removed sentence from a cached
prefix (the floor), per ablation.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from bench_explain import Case, merged_rows, reference, run_method  # noqa: E402
from rag_items import PASSAGES, hotpot_items, rag_items  # noqa: E402

FAST = {"attribution": "gradient", "gradient_masks": 2, "learned_ablations": 8}
HOLDOUT = 32


def cc_batch(tokens: int) -> int:
    """ContextCite-batched's batch: 16 prompts up to 1k tokens, halved per doubling."""
    return max(1, min(16, 16 * 1024 // max(tokens, 1)))


def _reset_peak() -> int:
    """Reset the process's peak resident memory; returns the resident memory now (kB)."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def timed(fn):
    """(result, {cpu s, wall s, peak MB above the resident level before, the process's peak
    resident MB (the loaded model's included)})."""
    base = _reset_peak()
    clock, cpu = time.perf_counter(), time.process_time()
    out = fn()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - clock
    peak = _status("VmHWM")
    return out, {"cpu": cpu, "seconds": wall, "peak_mb": (peak - base) / 1024,
                 "peak_total_mb": peak / 1024}


def load_cases(model, tok, args) -> list[tuple[int, Case]]:
    """(tokens asked, case) per item: greedy answers as explain generates them."""
    from knowflow.evaluation.generate import generate
    from knowflow.explanation.prompts import encode, rendered

    groups = []
    if args.hotpot:
        groups.append((0, hotpot_items(args.hotpot)[:args.items[0]]))
    else:
        for tokens, n in zip(args.tokens, args.items, strict=True):
            groups.append((tokens, rag_items(n, PASSAGES[tokens], args.seed)))
    out = []
    for tokens, items in groups:
        prompts = [rendered(it, tok, "chat") for it in items]
        said = generate(model, tok, encode(tok, prompts), batch_size=1, max_new_tokens=16)
        out += [(tokens, Case(it, tok, p, a)) for it, p, a in zip(items, prompts, said,
                                                                   strict=True)]
    return out


def run_explain(model, tok, case: Case, config, overrides: dict) -> tuple[torch.Tensor, dict]:
    """The whole `knowflow explain` of one item: (sentence weights, its record)."""
    import knowflow

    res = knowflow.explain(model, [case.item], tokenizer=tok, config=config,
                           levels=("source", "sentences"), prompt_format="chat",
                           max_new_tokens=16, **overrides)
    (rec,) = res.records
    if rec.get("unexplained"):
        return torch.zeros(len(case.sents), dtype=torch.float64), rec
    return torch.tensor([s["attribution"] for s in rec["sentences"]],
                        dtype=torch.float64), rec


def cc_generate(model, tok, case: Case) -> None:
    """ContextCite's own generation of an answer of as many new tokens (`model.generate`)."""
    ids = tok(case.prompt.text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        model.generate(ids, max_new_tokens=16, do_sample=False)


def forward_cpu(model, case: Case) -> float:
    """CPU seconds of one forward pass over the whole prompt (the last position's logits)."""
    ids = torch.tensor([case.led_ids])
    with torch.no_grad():
        cpu = time.process_time()
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
        return time.process_time() - cpu


def measure(model, tok, tokens: int, case: Case, index: int, args) -> dict:
    from knowflow.explanation.surrogate import spearman

    held, actual, full = reference(model, tok, case, HOLDOUT, index)
    n = len(case.sents)
    row = {"id": case.item.id, "tokens_asked": tokens, "tokens": len(case.led_ids),
           "n_sentences": n, "needle": case.item.meta.get("needle"), "answer": case.answer,
           "span": case.span, "forward_cpu": forward_cpu(model, case)}
    methods = args.methods if index % 2 == 0 else args.methods[::-1]
    for method in methods:
        if method in ("explain", "explain-fast"):
            extra = FAST if method == "explain-fast" else {}
            (w, rec), stats = timed(lambda e=extra: run_explain(model, tok, case,
                                                                args.config, e))
            got = {"ablations_used": rec.get("ablations_used"), "lds_own": rec.get("lds"),
                   "stopped": rec.get("ablations_stopped"),
                   "same_answer": rec.get("answer") == case.answer,
                   "unexplained": rec.get("unexplained")}
        elif method == "cc-generate":
            _, stats = timed(lambda: cc_generate(model, tok, case))
            row[method] = stats
            continue
        else:
            w, stats = timed(lambda m=method: run_method(
                m, 64, model, tok, case, None, cc_batch(len(case.led_ids))))
            got = {"batch": cc_batch(len(case.led_ids)) if method.endswith("batched") else 1}
        row[method] = {**stats, "lds": spearman(held.double() @ w, actual),
                       "top": int(w.argmax()), **got}
    row["logprob_full"] = full
    return row


def summarize(rows: list[dict]) -> None:
    methods = sorted({k for r in rows for k, v in r.items() if isinstance(v, dict)})
    base = "contextcite-batched" if "contextcite-batched" in methods else "contextcite"
    print(f"{'tokens':>7}{'items':>6}  {'method':<22}{'LDS':>7}{'CPU s':>9}{'peak MB':>9}"
          f"{base + ' CPU / method':>34}")
    by_len: dict[int, list[dict]] = {}
    for r in rows:
        by_len.setdefault(r["tokens_asked"], []).append(r)
    curves: dict[str, list[tuple[float, float]]] = {}
    for tokens in sorted(by_len):
        # the methods every item of this length ran (ContextCite's default batch may be
        # left out at the longer lengths), over the items that ran them
        here = [m for m in methods if any(m in r for r in by_len[tokens])]
        part = [r for r in by_len[tokens] if all(m in r for m in here)]
        if not part:
            continue
        mean_tokens = statistics.mean(r["tokens"] for r in part)
        fwd = statistics.mean(r["forward_cpu"] for r in part)
        curves.setdefault("forward pass", []).append((mean_tokens, fwd))
        print(f"{round(mean_tokens):>7}{len(part):>6}  {'one forward pass':<22}{'':>7}"
              f"{fwd:>9.2f}")
        for m in here:
            got = [r[m] for r in part]
            lds = [g["lds"] for g in got if g.get("lds") is not None]
            cpu = statistics.mean(g["cpu"] for g in got)
            curves.setdefault(m, []).append((mean_tokens, cpu))
            # each item is one round (the sides alternate item by item): its own ratio
            rounds = [r[base]["cpu"] / r[m]["cpu"] for r in part if base in r]
            ratio = statistics.median(rounds) if len(rounds) == len(part) else float("nan")
            used = [g["ablations_used"] for g in got if g.get("ablations_used")]
            note = f"  ablations {statistics.mean(used):.0f}" if used else ""
            totals = [g["peak_total_mb"] for g in got if "peak_total_mb" in g]
            note += f"  process peak {max(totals):.0f} MB" if totals else ""
            print(f"{'':>13}  {m:<22}{(statistics.mean(lds) if lds else float('nan')):>7.3f}"
                  f"{cpu:>9.2f}{statistics.mean(g['peak_mb'] for g in got):>9.0f}"
                  f"{ratio:>33.2f}x{note}")
            if m != base and len(rounds) == len(part):
                print(f"{'':>15}rounds: {', '.join(f'{x:.2f}x' for x in rounds)}; "
                      f"median {ratio:.2f}x")
    print("\nCPU against prompt length (log-log slope over the lengths above):")
    for m, pts in curves.items():
        if len(pts) > 1:
            xs, ys = [math.log(t) for t, _ in pts], [math.log(c) for _, c in pts]
            mx, my = statistics.mean(xs), statistics.mean(ys)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / \
                sum((x - mx) ** 2 for x in xs)
            print(f"  {m:<22} tokens^{slope:.2f}")


def floor(model, tok, args) -> None:
    """Per ablation: knowflow's scoring from the shared prompt, a forward pass of the ablated
    text, and a pass of its tokens after the first removed sentence from a cached prefix."""
    from knowflow.explanation.attribution import score_masks
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.prompts import ablated_prompts
    from knowflow.explanation.surrogate import random_masks
    from knowflow.lens.prefix import Prefix, forward
    from knowflow.lens.shared import share_prompt

    cfg = ExplainConfig(prompt_format="chat")
    print(f"{'tokens':>7}{'masks':>6}{'shared prompt':>15}{'knowflow / abl.':>17}"
          f"{'forward / abl.':>16}{'floor / abl.':>14}{'tokens after cut':>18}")
    for tokens in args.floor:
        (it,) = rag_items(1, PASSAGES[tokens], args.seed)
        case = load_cases(model, tok, argparse.Namespace(
            hotpot=None, tokens=[tokens], items=[1], seed=args.seed))[0][1]
        n = len(case.sents)
        masks = random_masks(args.masks, n, 0.5, torch.Generator().manual_seed(7))
        seqs = ablated_prompts(it, case.sents, masks, tok, "chat", case.lead)
        clock = time.process_time()
        shared = share_prompt(model, tok, case.led_ids[:-1])
        shared_cpu = time.process_time() - clock
        clock = time.process_time()
        score_masks(model, tok, it, case.sents, masks, case.cont, cfg, case.lead,
                    shared=shared)
        ours = (time.process_time() - clock) / len(masks)
        fwd = cut_cpu = 0.0
        after = []
        with torch.no_grad():
            for seq in seqs:
                clock = time.process_time()
                model(input_ids=torch.tensor([seq]), use_cache=False, logits_to_keep=1)
                fwd += time.process_time() - clock
                cut = shared.covers(seq)
                after.append(len(seq) - cut)
                prefix = shared.prefix(cut)
                clock = time.process_time()
                forward(model, past=prefix.cache, last_only=True,
                        input_ids=torch.tensor([seq[cut:]]),
                        position_ids=torch.arange(cut, len(seq))[None])
                cut_cpu += time.process_time() - clock
                del prefix
        _ = Prefix
        print(f"{len(case.led_ids):>7}{len(masks):>6}{shared_cpu:>15.2f}{ours:>17.3f}"
              f"{fwd / len(masks):>16.3f}{cut_cpu / len(masks):>14.3f}"
              f"{statistics.mean(after):>18.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tokens", default="256,1024,2048", help="prompt lengths (rag_items)")
    ap.add_argument("--items", default="8,6,4", help="items per length")
    ap.add_argument("--hotpot", type=Path, help="a file in HotpotQA's distractor layout")
    ap.add_argument("--methods", default="explain,contextcite-batched,contextcite,cc-generate")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an ExplainConfig field for explain and explain-fast")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1, help="rag_items' seed (0: the items the "
                                                        "defaults were chosen on)")
    ap.add_argument("--first", type=int, default=0, help="skip the items before this index")
    ap.add_argument("--last", type=int, help="stop before this index")
    ap.add_argument("--json", type=Path, help="append each item's row here (JSONL)")
    ap.add_argument("--summarize", type=Path, nargs="+", help="print the table of --json files")
    ap.add_argument("--floor", help="lengths for the per-ablation cost against the floor")
    ap.add_argument("--masks", type=int, default=16)
    args = ap.parse_args()
    if args.summarize:
        summarize(merged_rows(args.summarize))
        return 0
    torch.set_num_threads(args.threads)
    from knowflow.config import apply_overrides
    from knowflow.explanation.options import ExplainConfig
    from knowflow.lens.load import load_model

    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.items = [int(n) for n in str(args.items).split(",")]
    args.methods = [m for m in args.methods.split(",") if m]
    args.config = apply_overrides(ExplainConfig(), args.set)
    model, tok = load_model(args.model, device="cpu", dtype="float32")
    if args.floor:
        args.floor = [int(t) for t in args.floor.split(",")]
        floor(model, tok, args)
        return 0
    cases = load_cases(model, tok, args)
    rows = []
    for i, (tokens, case) in enumerate(cases):
        if i < args.first or (args.last is not None and i >= args.last):
            continue
        row = measure(model, tok, tokens, case, i, args)
        rows.append(row)
        if args.json:
            with args.json.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
        print(f"[{i + 1}/{len(cases)}] {row['id']} ({row['tokens']} tokens, "
              f"{row['n_sentences']} sentences, span {row['span']!r}): " + "  ".join(
                  f"{k}: LDS {v.get('lds', float('nan')) or float('nan'):.2f} "
                  f"{v['cpu']:.1f}s" for k, v in row.items() if isinstance(v, dict)),
              file=sys.stderr, flush=True)
    summarize(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
