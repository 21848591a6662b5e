"""Every decoding method on every phrasing: generation counterfactual accuracy, what the other
answers are (cut off, garbled, other), and log-likelihood counterfactual accuracy (issue 42).

    python benchmarks/bench_decoding.py [--limit 32] [--threads 2] [--out runs/bench_decoding]

Runs `knowflow.evaluate` once over: the four built-in suites (`--limit` items each), the four
phrasings of `cf-phrasing` (`--limit` items each, as suites `cf-phrasing:<phrasing>`), and a
file in the documented `--data` layout (`context`, `question`, `answer`, `memory_answer`) whose
contexts state the answer only in their last words and whose question asks for "the capital
city" (`cf_capitals_late.jsonl`, written to `--out`). Methods: greedy, cad, adacad, coiecd,
cocoa and heads; `heads` calibrates on half of every suite's items, so every method is scored
on the other half (the held-out items). A second pass runs plain CAD (`guard=False`, the
decoding before issue 42) on the same held-out items. Prints one row per suite and method:
generation cf accuracy (95% bootstrap interval), the cut-off, garbled and other shares (95%
Wilson intervals) and log-likelihood cf accuracy; writes the rows to `--out`/table.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import knowflow
from knowflow.data.phrasing import LATE_CONTEXTS, PHRASINGS
from knowflow.data.suites import get_suite
from knowflow.evaluation.items import flat, load_data

SUITES = ("cf-capitals", "cf-world", "cf-bio", "cf-quotes")
METHODS = "greedy,cad,adacad,coiecd,cocoa,heads"


def late_file(path: Path, n: int, seed: int) -> Path:
    """A conflict file in the documented --data layout whose contexts name the answer last."""
    rows = []
    for it in get_suite("cf-capitals", seed=seed + 1):
        rng = random.Random(f"{seed}:late:{it.subject}")
        ctx = rng.choice(LATE_CONTEXTS).format(country=it.subject, answer=it.counterfactual_answer)
        rows.append({"id": f"late-{len(rows):03d}", "context": ctx,
                     "question": f"What is the capital city of {it.subject}?",
                     "answer": it.counterfactual_answer, "memory_answer": it.parametric_answer})
    random.Random(seed).shuffle(rows)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[:n]),
                    encoding="utf-8")
    return path


def phrasing_items(limit: int, seed: int) -> list:
    """`limit` cf-phrasing items per phrasing, each phrasing its own suite."""
    import dataclasses
    out = []
    for phrasing in PHRASINGS:
        items = [i for i in get_suite("cf-phrasing", seed=seed) if i.meta["phrasing"] == phrasing]
        random.Random(f"{seed}:{phrasing}").shuffle(items)
        out += [dataclasses.replace(i, suite=f"cf-phrasing:{phrasing}") for i in items[:limit]]
    return out


def _cell(row: dict, key: str) -> str:
    v, ci = row.get(key), row.get(f"{key}_ci")
    if v is None:
        return "-"
    return f"{v:.2f} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else f"{v:.2f}"


def rows_of(conditions: dict) -> list[dict]:
    out = []
    for method, suites in conditions.items():
        for suite, modes in suites.items():
            gen = modes.get("generate", {}).get("conflicting", {})
            ll = modes.get("loglik", {}).get("conflicting", {})
            out.append({"suite": suite, "method": method, "n": gen.get("n"),
                        "gen_cf": gen.get("context_share"),
                        "gen_cf_ci": gen.get("context_share_ci"),
                        **{k: v for k, v in gen.items() if k.startswith("outcome_")},
                        "loglik_cf": ll.get("context_share"),
                        "loglik_cf_ci": ll.get("context_share_ci")})
    return out


def print_table(rows: list[dict]) -> None:
    head = (f"{'suite':22} {'method':18} {'n':>3}  {'gen cf acc':17} {'cut off':17} "
            f"{'garbled':17} {'other':17} {'memory':17} {'loglik cf acc':17}")
    print(head)
    print("-" * len(head))
    for r in sorted(rows, key=lambda r: (r["suite"], r["method"] != "greedy")):
        print(f"{r['suite']:22} {r['method']:18} {r['n'] or 0:>3}  {_cell(r, 'gen_cf'):17} "
              f"{_cell(r, 'outcome_cut_off'):17} {_cell(r, 'outcome_garbled'):17} "
              f"{_cell(r, 'outcome_other'):17} {_cell(r, 'outcome_memory'):17} "
              f"{_cell(r, 'loglik_cf'):17}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=32, help="items per suite and per phrasing")
    ap.add_argument("--methods", default=METHODS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench_decoding")
    ap.add_argument("--part", choices=("all", "builtin", "phrasing", "late"), default="all",
                    help="builtin: the four built-in suites; phrasing: cf-phrasing and the "
                         "late file (two processes on a shared machine); late: the late file "
                         "and the answer-late phrasings only (sentence, passage)")
    ap.add_argument("--merge", nargs="+", metavar="OUT",
                    help="print the table of earlier runs' --out folders and stop")
    args = ap.parse_args()
    if args.merge:
        print_table([r for d in args.merge
                     for r in json.loads((Path(d) / "table.json").read_text())["rows"]])
        return
    import torch
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    items = []
    if args.part in ("all", "builtin"):
        items += [i for name in SUITES for i in get_suite(name, seed=args.seed, limit=args.limit)]
    if args.part in ("all", "phrasing", "late"):
        files = load_data([late_file(out / "cf_capitals_late.jsonl", args.limit, args.seed)])
        items += [*phrasing_items(args.limit, args.seed), *(i for v in files.values() for i in v)]
    if args.part == "late":
        items = [i for i in items if i.suite.split(":")[-1] in
                 ("sentence", "passage", "cf_capitals_late")]
    t0 = time.time()
    res = knowflow.evaluate("smollm2-135m-instruct", items, method=args.methods,
                            scoring="both", seed=args.seed, prompt_format="chat",
                            known_filter=False, max_new_tokens=24)
    rows = rows_of(res.conditions)
    spec = (res.config.get("heads_calibration") or {}).get("spec")
    print(f"# main pass {time.time() - t0:.0f} s; heads calibration chose {spec}")
    scored = {(r["suite"], r["id"]) for recs in res.by_suite.values() for r in recs}
    held = [i for i in items if (i.suite, i.id) in scored]
    t1 = time.time()
    plain = knowflow.evaluate("smollm2-135m-instruct", held, method="greedy,cad",
                              scoring="generate", seed=args.seed, prompt_format="chat",
                              known_filter=False, max_new_tokens=24, guard=False)
    rows += [r for r in rows_of(plain.conditions) if r["method"] != "greedy"]
    print(f"# plain CAD pass {time.time() - t1:.0f} s")
    (out / "table.json").write_text(json.dumps({"rows": rows, "config": res.config}, indent=1,
                                               default=str))
    (out / "outputs.jsonl").write_text("".join(
        json.dumps({k: r.get(k) for k in ("suite", "method", "id", "generate_output",
                                          "generate_outcome")}, ensure_ascii=False) + "\n"
        for r in map(flat, [*res.swept.records, *plain.swept.records])), encoding="utf-8")
    print_table(rows)


if __name__ == "__main__":
    main()
