"""Every decoding method on every phrasing: generation counterfactual accuracy, what the other
answers are (cut off, garbled, other), and log-likelihood counterfactual accuracy.

    python benchmarks/studies/bench_decoding.py [--limit 24] [--suites all] [--threads 1]
        [--heads SPEC | --heads calibrate] [--out runs/bench_decoding]
    python benchmarks/studies/bench_decoding.py --heads calibrate --calibrate-only --out DIR
    python benchmarks/studies/bench_decoding.py --merge OUT1 OUT2 ... [--heads x1] [--markdown]

Suites, `--limit` held-out items each: the four built-in suites (cf-capitals without the dev
countries), each phrasing of `cf-phrasing` on its test countries (`cf-phrasing:<phrasing>`),
and `cf_capitals_late`, a file in the documented `--data` layout whose contexts name the answer
only in their last words (benchmarks/data/make_cf_capitals_late.py, test countries). The dev
countries of `data/phrasing.py` are never scored here: settings were chosen on them.

Methods: greedy, cad, adacad, coiecd, cocoa (defaults: beta 0.3, the guard) and heads. `heads`
is calibrated on cf-phrasing's dev countries (`--heads calibrate`: the search of
heads_calibration.py on `--heads-items` dev items per phrasing, printed and saved) or given as
a spec from an earlier calibration (`--heads x1`, `--heads 24.3+27.1x2`), so every method is
scored on the same held-out items. A spec that steers no head (`x1`) leaves the model as it
is, so its rows are greedy's (labelled `heads:x1 (= greedy)`) and are not recomputed.
`--unguarded` adds plain CAD (guard=False) on them.

One `knowflow.evaluate` pass per suite; after each, the rows so far are written to
`--out`/table.json and the generations to `--out`/outputs.jsonl, so a stopped run keeps its
finished suites. Prints one row per suite and method: n, generation cf accuracy, the cut-off,
garbled, other and memory shares and log-likelihood cf accuracy, each with its 95% Wilson
interval (the two accuracies' intervals are computed here from share and n; table.json keeps
the evaluation's bootstrap intervals).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

import knowflow
from knowflow.data.phrasing import PHRASINGS, dev_subjects
from knowflow.data.suites import get_suite
from knowflow.evaluation.items import flat, load_data
from knowflow.evaluation.outcomes import wilson_ci
from knowflow.evaluation.steer_heads import HeadSteering

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from make_cf_capitals_late import write as write_late  # noqa: E402

BUILTIN = ("cf-capitals", "cf-world", "cf-bio", "cf-quotes")
LATE = "cf_capitals_late"
SUITES = (*BUILTIN, *(f"cf-phrasing:{p}" for p in PHRASINGS), LATE)
METHODS = "greedy,cad,adacad,coiecd,cocoa"
MODEL = "smollm2-135m-instruct"
RUN = dict(seed=0, prompt_format="chat", known_filter=False, max_new_tokens=24)


def phrasing_split(phrasing: str, split: str, limit: int, seed: int) -> list:
    """`limit` cf-phrasing items of one phrasing and split (dev or test), as their own suite."""
    items = [i for i in get_suite("cf-phrasing", seed=seed)
             if i.meta["phrasing"] == phrasing and i.meta["split"] == split]
    random.Random(f"{seed}:{phrasing}").shuffle(items)
    return [dataclasses.replace(i, suite=f"cf-phrasing:{phrasing}") for i in items[:limit]]


HELD_OUT_MAX = 64  # a built-in suite's held-out items: the first --limit (at most this many)
DEV_MAX = 32  # its dev items: the next --limit (at most this many); the rest are fresh


def _builtin_order(name: str, seed: int) -> list:
    """A built-in suite's items in the benchmark's seeded order (cf-capitals without its dev
    countries)."""
    items = get_suite(name, seed=seed)
    if name == "cf-capitals":
        dev = dev_subjects(i.subject for i in items)
        items = [i for i in items if i.subject not in dev]
    random.Random(f"{seed}:{name}:bench").shuffle(items)
    return items


def suite_items(name: str, limit: int, seed: int, out: Path, dev: bool = False,
                fresh: bool = False) -> list:
    """The held-out items of one suite of SUITES; with `dev` its dev items: cf-phrasing's
    dev countries, and for a built-in suite the DEV_MAX items after the first HELD_OUT_MAX
    of its seeded order, which no held-out run scores (the late file has no dev items); with
    `fresh` (built-in suites only) the items after those, which neither scores: a held-out
    slice for checking rules that were designed while the held-out items were looked at."""
    if (dev or fresh) and name == LATE or fresh and name.startswith("cf-phrasing:"):
        raise SystemExit(f"{name} has no {'dev' if dev else 'fresh'} items")
    if name.startswith("cf-phrasing:"):
        return phrasing_split(name.split(":", 1)[1], "dev" if dev else "test", limit, seed)
    if name == LATE:
        path = write_late(out / f"{LATE}.jsonl", limit, seed, "test")
        return [i for v in load_data([path]).values() for i in v]
    order = _builtin_order(name, seed)
    if not (dev or fresh):
        return order[:min(limit, HELD_OUT_MAX)]
    start = HELD_OUT_MAX + (DEV_MAX if fresh else 0)
    picked = order[start:start + (limit if fresh else min(limit, DEV_MAX))]
    before = {i.id for i in order[:start]}
    assert not before & {i.id for i in picked}, "dev and fresh items are no earlier slice's"
    return picked


def calibrate_heads(n: int, seed: int, out: Path) -> str:
    """The heads spec calibrated on `n` dev items per cf-phrasing phrasing (half of them
    calibrate, heads_calibration.py); the search is saved to `out`/heads_calibration.json."""
    items = [i for p in PHRASINGS for i in phrasing_split(p, "dev", n, seed)]
    res = knowflow.evaluate(MODEL, items, method="greedy,heads", scoring="loglik",
                            **{**RUN, "seed": seed})
    record = res.config["heads_calibration"]
    (out / "heads_calibration.json").write_text(json.dumps(record, indent=1, default=str))
    for c in record.get("candidates", []):
        heads = "+".join(f"{layer}.{head}" for layer, head in c["heads"])
        print(f"#   heads:{heads}x{c['gamma']:g}: calibration loglik cf acc "
              f"{c['cf_acc']}, robustness {c['robustness']}")
    return record["spec"]


def _cell(row: dict, key: str) -> str:
    v, ci = row.get(key), row.get(f"{key}_ci")
    if v is None:
        return "-"
    n = row.get("n_loglik" if key == "loglik_cf" else "n")
    if key in ("gen_cf", "loglik_cf") and n:  # a share of n items: Wilson, as the outcomes
        ci = wilson_ci(round(v * n), n)
    return f"{v:.2f} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else f"{v:.2f}"


def rows_of(conditions: dict) -> list[dict]:
    out = []
    for method, suites in conditions.items():
        for suite, modes in suites.items():
            if suite == "all":
                continue
            gen = modes.get("generate", {}).get("conflicting", {})
            ll = modes.get("loglik", {}).get("conflicting", {})
            out.append({"suite": suite, "method": method, "n": gen.get("n"),
                        "gen_cf": gen.get("context_share"),
                        "gen_cf_ci": gen.get("context_share_ci"),
                        **{k: v for k, v in gen.items() if k.startswith("outcome_")},
                        "loglik_cf": ll.get("context_share"),
                        "loglik_cf_ci": ll.get("context_share_ci"), "n_loglik": ll.get("n")})
    return out


COLUMNS = (("gen cf acc", "gen_cf"), ("cut off", "outcome_cut_off"),
           ("garbled", "outcome_garbled"), ("other", "outcome_other"),
           ("memory", "outcome_memory"), ("loglik cf acc", "loglik_cf"))


def print_table(rows: list[dict], markdown: bool = False) -> None:
    """One line per suite and method, as text columns or (`markdown`) a Markdown table."""
    order = {s: i for i, s in enumerate(SUITES)}
    rows = sorted(rows, key=lambda r: (order.get(r["suite"], 99), r["suite"],
                                       r["method"] != "greedy"))
    if markdown:
        print("| suite | method | n | " + " | ".join(name for name, _ in COLUMNS) + " |")
        print("|---|---|---|" + "---|" * len(COLUMNS))
        for r in rows:
            print(f"| {r['suite']} | {r['method']} | {r['n'] or 0} | "
                  + " | ".join(_cell(r, key) for _, key in COLUMNS) + " |")
        return
    head = f"{'suite':22} {'method':20} {'n':>3}  " + " ".join(f"{name:17}"
                                                              for name, _ in COLUMNS)
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['suite']:22} {r['method']:20} {r['n'] or 0:>3}  "
              + " ".join(f"{_cell(r, key):17}" for _, key in COLUMNS))


def _outputs(records) -> str:
    keys = ("suite", "method", "id", "subject", "counterfactual_answer", "generate_output",
            "generate_outcome")
    return "".join(json.dumps({k: r.get(k) for k in keys}, ensure_ascii=False) + "\n"
                   for r in map(flat, records))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=24, help="held-out items per suite")
    ap.add_argument("--suites", default="all",
                    help=f"comma-separated, of: {', '.join(SUITES)} (default: all)")
    ap.add_argument("--methods", default=METHODS)
    ap.add_argument("--heads", default="calibrate",
                    help="'calibrate' (on the dev countries), a spec such as x1 or "
                         "24.3+27.1x2, or 'none' to leave heads out")
    ap.add_argument("--heads-items", type=int, default=8,
                    help="dev items per phrasing for --heads calibrate")
    ap.add_argument("--calibrate-only", action="store_true",
                    help="with --heads calibrate: print and save the calibration, score nothing")
    ap.add_argument("--dev", action="store_true",
                    help="score dev items instead (cf-phrasing's dev countries; a built-in "
                         f"suite's items after its first {HELD_OUT_MAX}), for choosing settings")
    ap.add_argument("--fresh", action="store_true",
                    help=f"score a built-in suite's fresh items instead (after its first "
                         f"{HELD_OUT_MAX} held-out and {DEV_MAX} dev items)")
    ap.add_argument("--unguarded", action="store_true", help="add plain CAD (guard=False)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=24,
                    help="prompts per batch (on a CPU a step reads the weights once for the "
                         "whole batch, so one batch per suite is cheapest)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench_decoding")
    ap.add_argument("--merge", nargs="+", metavar="OUT",
                    help="print the table of earlier runs' --out folders and stop")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    if args.merge:
        rows = [r for d in args.merge
                for r in json.loads((Path(d) / "table.json").read_text())["rows"]]
        if args.heads not in ("none", "calibrate") and not HeadSteering.parse(args.heads).heads:
            rows += [{**r, "method": f"heads:{args.heads} (= greedy)"} for r in rows
                     if r["method"] == "greedy"]
        print_table(rows, args.markdown)
        return
    import torch
    torch.set_num_threads(args.threads)
    names = SUITES if args.suites == "all" else tuple(s.strip() for s in args.suites.split(","))
    if unknown := set(names) - set(SUITES):
        ap.error(f"unknown suite(s) {', '.join(sorted(unknown))}; give some of "
                 f"{', '.join(SUITES)}")
    if args.dev and args.fresh:
        ap.error("--dev and --fresh are different items; give one")
    if args.limit > HELD_OUT_MAX:
        ap.error(f"--limit {args.limit}: at most {HELD_OUT_MAX}, the built-in suites' items "
                 "after that are their dev items")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    methods, same, spec = args.methods, False, ""
    if args.heads != "none":
        t0 = time.time()
        spec = calibrate_heads(args.heads_items, args.seed, out) if args.heads == "calibrate" \
            else f"heads:{args.heads}"
        print(f"# heads: {spec} ({time.time() - t0:.0f} s)", flush=True)
        if args.calibrate_only:
            return
        same = not HeadSteering.parse(spec.split(":", 1)[1]).heads
        methods = methods if same else f"{methods},{spec}"
    rows, records = [], []
    for name in names:
        t0 = time.time()
        items = suite_items(name, args.limit, args.seed, out, args.dev, args.fresh)
        res = knowflow.evaluate(MODEL, items, method=methods, scoring="both",
                                **{**RUN, "seed": args.seed, "batch_size": args.batch_size})
        new = rows_of(res.conditions)
        if same:  # no head steered: the model unchanged, so heads' answers are greedy's
            new += [{**r, "method": f"{spec} (= greedy)"} for r in new
                    if r["method"] == "greedy"]
        rows += new
        records += res.swept.records
        if args.unguarded:
            plain = knowflow.evaluate(MODEL, items, method="cad", scoring="generate",
                                      guard=False, **{**RUN, "seed": args.seed,
                                                      "batch_size": args.batch_size})
            rows += rows_of(plain.conditions)
            records += plain.swept.records
        (out / "table.json").write_text(json.dumps({"rows": rows, "methods": methods,
                                                    "limit": args.limit}, indent=1))
        (out / "outputs.jsonl").write_text(_outputs(records), encoding="utf-8")
        print(f"# {name}: {len(items)} items, {time.time() - t0:.0f} s", flush=True)
    print_table(rows, args.markdown)


if __name__ == "__main__":
    main()
