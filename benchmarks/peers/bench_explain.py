"""knowflow's sentence attribution (ablation and learned) side by side with ContextCite
(`context-cite` 0.0.4, default batch size 1 and batched), on needle and long items.

    python benchmarks/peers/bench_explain.py --items 48 --long 24 --ablations 32,64 --threads 1
    python benchmarks/peers/bench_explain.py --curve 10,40,100,200 --threads 1
    python benchmarks/peers/bench_explain.py --fit-estimators DIR --contexts 24 --fit-seeds 0,1

Every method runs on the same model, items, prompt (the chat template over "Context: ...\\n\\n
Question: ...\\nAnswer in a few words."), the same explained span (the model's greedy answer,
cut to its answer span as `knowflow explain` does: `explanation.target`; ContextCite
attributes the same characters of the same response with its `start_idx`/`end_idx`) and the
same ablation count. Items: `--items` needle items (half `needle-cf`, half `needle-agree`,
5-10 sentences) and `--long` long multi-document items (`explanation.contexts.long_items`:
`--long-sentences` sentences in documents of 8-12, one answer sentence). The sides take turns
going first, item by item. ContextCite's nltk download is replaced by a no-op and its
partitioner by knowflow's offline splitter, so both see the same sentences.

Per method it prints the top-1 hit rate on the answer sentence, the LDS (Spearman between
the method's scores summed over kept sentences and the span's actual log-probability on
`--holdout` held-out ablations, the same masks for all, scored once and not timed), the top-1
and top-3 drops (the fall of the log-probability when the top sentences are removed), seconds
per item (CPU, the process's own, and wall-clock) and the ratio of ContextCite-batched's CPU
seconds to each method's (the mean; then its spread: the median over items and over rounds
of 8 consecutive items, with the rounds' range). knowflow's ablation runs as `knowflow
explain` runs it (from the item's prompt run once, its rounds of ablations up to the count
until the out-of-fold LDS converges, steered by the gradient one pass: `explanation.
attribution.attribute`; the shared prompt and the one pass are timed with it);
`knowflow-flat` is the plain flat surrogate on all the count's ablations (no prior, no
rounds);
`knowflow-hier` attributes
hierarchically past 24 sentences (`--set hierarchy_above=24`, documents first:
`explanation.hierarchy`), to weigh the hierarchy against it; `learned` needs an
estimator (`knowflow explain fit`; `--estimator` or the model's own) and is skipped without;
`gradient` is `explain --attribution gradient` (the `soft` feature summed over heads, no fit;
`--gradient-masks 0,2` at 1 and 2 points, `--gradient-ablations 0,8` also corrected by 8
scored ablations, rows `gradient+8`: `--set learned_ablations=8`);
`--learned-ablations 0,8` also runs it corrected by 8 scored ablations, and method
`learned-loo` (`--learned-loo 2`) scores learned's top 2 sentences by leave-one-out
(`learned.top_leave_one_out`; its cost counts the one pass, the full log-probability and the
2 ablations). AT2 (`pip install -e
'.[at2]'`) ships no estimator for SmolLM2: `--fit-estimators DIR` trains one with AT2's own
classes on the same generated contexts and ablations as knowflow's (`at2_peer.py`), and
`--at2 DIR/at2.pt` runs it.

`--curve N,N,...` prints, per context of N sentences (one long item each), CPU seconds and
peak resident memory of one explanation by knowflow ablation, knowflow learned and
ContextCite-batched, each in a fresh process (peak memory is the process's high-water mark
less its level after loading the model); `gradient` runs at the last `--gradient-masks` count.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

TOP = (1, 3)
ROUND = 8            # items per round of the CPU ratio's spread (`rounds`)
HIER_ABOVE = 24      # knowflow-hier: sentences past which it attributes documents first


def _contextcite():
    """ContextCite's classes, imported without its network call."""
    import nltk

    nltk.download = lambda *args, **kwargs: True   # it downloads punkt_tab at import
    from context_cite import ContextCiter
    from context_cite.context_partitioner import BaseContextPartitioner

    from knowflow.explanation.splitter import join_kept, split_sentences

    class OfflinePartitioner(BaseContextPartitioner):
        """knowflow's offline splitter as a ContextCite partitioner."""

        def __init__(self, context: str):
            super().__init__(context)
            self.sentences = split_sentences(context)

        @property
        def num_sources(self) -> int:
            return len(self.sentences)

        def split_context(self) -> None:
            return None

        def get_source(self, index: int) -> str:
            return self.sentences[index].text

        def get_context(self, mask=None) -> str:
            keep = [True] * len(self.sentences) if mask is None else [bool(k) for k in mask]
            return join_kept(self.context, self.sentences, keep)

    return ContextCiter, OfflinePartitioner


class Case:
    """One item prepared for every method: prompt, answer, explained span and sentences."""

    def __init__(self, item, tok, prompt, answer: str):
        from knowflow.explanation.prompts import encode, sentence_tokens, with_lead
        from knowflow.explanation.splitter import split_sentences
        from knowflow.explanation.target import explained_span

        self.item, self.prompt, self.answer = item, prompt, answer
        self.lead, self.span, _ = explained_span(item, answer)
        self.cont = (prompt.answer_prefix if not self.lead else "") + self.span
        self.response = prompt.answer_prefix + answer   # what ContextCite sees
        self.span_at = len(prompt.answer_prefix) + len(self.lead)
        self.led_ids = encode(tok, [with_lead(prompt, self.lead)])[0]
        self.sents = split_sentences(item.context)
        self.spans = sentence_tokens(item, self.sents, tok, "chat")


def setup(model_name: str, n_items: int, n_long: int, long_sentences: int, seed: int):
    """(model, tokenizer, cases): needle items then long items, with greedy answers."""
    from knowflow.data.suites import get_suite
    from knowflow.evaluation.generate import generate
    from knowflow.explanation.contexts import long_items
    from knowflow.explanation.prompts import encode, rendered
    from knowflow.lens.load import load_model

    model, tok = load_model(model_name, device="cpu", dtype="float32")
    half = n_items // 2
    items = get_suite("needle-cf", seed, half) + get_suite("needle-agree", seed, n_items - half) \
        if n_items else []
    items += long_items(n_long, long_sentences, seed) if n_long else []
    prompts = [rendered(it, tok, "chat") for it in items]
    answers = generate(model, tok, encode(tok, prompts), batch_size=8, max_new_tokens=16)
    return model, tok, [Case(it, tok, p, a) for it, p, a in zip(items, prompts, answers,
                                                                strict=True)]


def run_method(method: str, count: int, model, tok, case: Case, est, cc_batch: int,
               at2=None) -> torch.Tensor:
    """One method's sentence scores (sentences,) for one case: `count` ablations (learned:
    ablations that correct its one-pass scores, 0 for none)."""
    from knowflow.explanation.attribution import attribute
    from knowflow.explanation.estimator import unit_estimator
    from knowflow.explanation.hierarchy import hierarchical, hierarchical_attribute
    from knowflow.explanation.learned import (
        learned_attribute,
        learned_scores,
        sentence_features,
        top_leave_one_out,
    )
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.sentences import gradient_prior
    from knowflow.lens.shared import share_prompt

    it = case.item
    if method in ("knowflow", "knowflow-flat", "knowflow-hier"):
        threshold = {"knowflow-flat": {"hierarchy_above": None, "converge": 0.0,
                                       "prior": "none"},
                     "knowflow-hier": {"hierarchy_above": HIER_ABOVE}}.get(method, {})
        cfg = ExplainConfig(ablations=count, holdout=0, top_k=(), prompt_format="chat",
                            **threshold)
        if hierarchical(cfg, len(case.sents)):
            attr, _ = hierarchical_attribute(model, tok, it, case.sents, case.cont, 0.0, cfg,
                                             case.lead)
            return torch.tensor(attr.weights, dtype=torch.float64)
        shared = share_prompt(model, tok, case.led_ids[:-1])
        prior = gradient_prior(model, tok, case.led_ids, case.cont, case.spans, shared) \
            if cfg.prior == "gradient" else None
        attr = attribute(model, tok, it, case.sents, case.cont, 0.0, cfg, case.lead,
                         shared=shared, prior=prior)
        return torch.tensor(attr.weights, dtype=torch.float64)
    if method == "learned-loo":          # the full log-prob is scored too: counted here
        ids = tok(case.cont, add_special_tokens=False)["input_ids"]
        scores = learned_scores(sentence_features(model, case.led_ids, ids, case.spans,
                                                  est.features), est.tensor())
        return top_leave_one_out(model, tok, it, case.sents, scores, count, case.cont,
                                 ExplainConfig(prompt_format="chat"), case.lead)
    if method == "learned" or method.startswith("gradient"):   # as explain runs them:
        gradient = method.startswith("gradient")   # learned (count: correcting ablations),
        est = unit_estimator(model) if gradient else est   # gradient[+K] (count: masks)
        fixes = int(method.partition("+")[2] or 0) if gradient else count
        cfg = ExplainConfig(attribution="gradient" if gradient else "learned",
                            gradient_masks=count if gradient else 0,
                            learned_ablations=fixes, holdout=0, top_k=(),
                            prompt_format="chat")
        attr = learned_attribute(model, tok, it, case.sents, case.led_ids, case.cont, 0.0,
                                 case.spans, est.tensor(), cfg, case.lead, est.features,
                                 "gradient" if gradient else "learned",
                                 share_prompt(model, tok, case.led_ids[:-1]))
        return torch.tensor(attr.weights, dtype=torch.float64)
    if method == "at2":
        from at2_peer import at2_features, at2_scores

        ids = tok(case.cont, add_special_tokens=False)["input_ids"]
        return at2_scores(at2, at2_features(model, case.led_ids, ids, case.spans))
    from knowflow.data.prompts import PromptConfig, qa_instruction

    citer, partitioner = _contextcite()
    cc = citer(model, tok, it.context, qa_instruction(it, PromptConfig()),
               num_ablations=count, prompt_template="Context: {context}\n\n{query}",
               partitioner=partitioner(it.context),
               batch_size=cc_batch if method == "contextcite-batched" else 1)
    cc._cache["output"] = case.prompt.text + case.response     # explain the same answer
    start = len(cc.response) - len(case.response) + case.span_at
    side, tok.padding_side = tok.padding_side, "left"   # as ContextCite.from_pretrained sets
    try:
        return torch.tensor(cc.get_attributions(start_idx=start,
                                                end_idx=start + len(case.span),
                                                verbose=False), dtype=torch.float64)
    finally:
        tok.padding_side = side


def reference(model, tok, case: Case, holdout: int, index: int):
    """(held-out masks, their actual log-probs, the full log-prob): scored once, untimed."""
    from knowflow.explanation.attribution import score_masks
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.surrogate import random_masks

    cfg = ExplainConfig(holdout=0, prompt_format="chat")
    n = len(case.sents)
    held = random_masks(holdout, n, 0.5, torch.Generator().manual_seed(10_000 + index))
    both = torch.cat([held, torch.ones(1, n, dtype=torch.int64)])
    scores = score_masks(model, tok, case.item, case.sents, both, case.cont, cfg, case.lead)
    return held, scores[:-1], float(scores[-1])


def measure(methods, counts, model, tok, case: Case, index: int, args, est, at2=None
            ) -> dict:
    from knowflow.explanation.attribution import score_masks
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.surrogate import spearman

    held, actual, full = reference(model, tok, case, args.holdout, index)
    n = len(case.sents)
    row = {"id": case.item.id, "needle": case.item.meta["needle"], "n_sentences": n,
           "answer": case.answer, "span": case.span,
           "answer_sentence": answer_sentence(case.item.context, case.span)}
    order = methods if index % 2 == 0 else methods[::-1]       # sides take turns first
    order = [f"{m}+{k}" if k else m for m in order              # gradient+K: corrected
             for k in (args.fix_counts if m == "gradient" else [0])]  # by K ablations
    for method in order:
        for count in (args.learned_counts if method == "learned" else
                      args.loo_counts if method == "learned-loo" else
                      args.mask_counts if method.startswith("gradient") else
                      [0] if method == "at2" else counts):
            clock, cpu = time.perf_counter(), time.process_time()
            w = run_method(method, count, model, tok, case, est, args.cc_batch, at2)
            secs, cpu = time.perf_counter() - clock, time.process_time() - cpu
            ranked = sorted(range(n), key=lambda j: -float(w[j]))
            removed = torch.ones(len(TOP), n, dtype=torch.int64)
            for r, k in enumerate(TOP):
                removed[r, ranked[:k]] = 0
            fallen = score_masks(model, tok, case.item, case.sents, removed, case.cont,
                                 ExplainConfig(prompt_format="chat"), case.lead)
            row[f"{method}_{count}"] = {
                "top": ranked[0], "seconds": secs, "cpu": cpu,
                "drop": {str(k): full - float(v) for k, v in zip(TOP, fallen, strict=True)},
                "lds": spearman(held.double() @ w, actual)}
    return row


def _mean(values) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def answer_sentence(context: str, span: str) -> int | None:
    """The one sentence that holds the explained span as whole words (the sentence the
    answer comes from), or None (none or several)."""
    import re

    from knowflow.explanation.splitter import split_sentences

    word = span.strip().rstrip(".")
    if not word:
        return None
    found = [j for j, s in enumerate(split_sentences(context))
             if re.search(rf"(?<!\w){re.escape(word)}(?!\w)", s.text, re.IGNORECASE)]
    return found[0] if len(found) == 1 else None


def report(rows: list[dict]) -> None:
    for name, part in (("needle", [r for r in rows if not r["id"].startswith("long")]),
                       ("long", [r for r in rows if r["id"].startswith("long")])):
        if not part:
            continue
        keys = sorted({k for r in part for k, v in r.items() if isinstance(v, dict)})
        part = [r for r in part if all(k in r for k in keys)]   # items every method ran on
        if not part:
            continue
        base = [k for k in keys if k.startswith("contextcite-batched_")]
        print(f"\n{len(part)} {name} items ({_mean([r['n_sentences'] for r in part]):.0f} "
              "sentences on average)")
        named = [r for r in part if r.get("answer_sentence") is not None]
        print(f"answer-sentence hit: on the {len(named)} items whose span is named by exactly "
              "one sentence, the top sentence is that one")
        print(f"{'method':<32}{'hit':>7}{'ans-hit':>8}{'LDS':>8}{'drop@1':>8}{'drop@3':>8}"
              f"{'CPU s':>9}{'wall s':>9}{'CPU ratio':>11}")
        for key in keys:
            got = [r[key] for r in part if key in r]
            ref = _reference(key, base)
            cpu = _mean([g["cpu"] for g in got])
            ratio = _mean([r[ref]["cpu"] for r in part if ref in r]) / cpu if ref else \
                float("nan")
            label = _label(key)
            print(f"{label:<32}"
                  f"{_mean([float(r[key]['top'] == r['needle']) for r in part]):>7.3f}"
                  f"{_mean([float(r[key]['top'] == r['answer_sentence']) for r in named]):>8.3f}"
                  f"{_mean([g['lds'] for g in got]):>8.3f}"
                  f"{_mean([g['drop']['1'] for g in got]):>8.2f}"
                  f"{_mean([g['drop']['3'] for g in got]):>8.2f}{cpu:>9.2f}"
                  f"{_mean([g['seconds'] for g in got]):>9.2f}{ratio:>10.1f}x")
        print("CPU ratio: ContextCite-batched's CPU seconds at the same ablation count (the "
              "one-pass methods: at the largest count) over the method's")
        rounds(part, keys, base)


def _label(key: str) -> str:
    """A row's method and count as the tables print it: `gradient @4`, `at2 (1 pass)`,
    `gradient @2 +8 ablations`."""
    method, count = key.rsplit("_", 1)
    method, _, fixes = method.partition("+")         # gradient+K: K correcting ablations
    fixes = f" +{fixes} ablations" if fixes else ""
    return f"{method} (1 pass){fixes}" if count == "0" else f"{method} @{count}{fixes}"


def _reference(key: str, base: list[str]) -> str | None:
    """The ContextCite-batched row a method's CPU ratio is taken against: the same ablation
    count for the ablation methods, the largest count for the others (one pass, or a
    count of something else: learned's correcting ablations, gradient's mask points)."""
    if not base:
        return None
    method, count = key.rsplit("_", 1)
    same = f"contextcite-batched_{count}"
    if method.startswith(("knowflow", "contextcite")) and same in base:
        return same
    return max(base, key=lambda k: int(k.rsplit("_", 1)[1]))


def ratio_spread(part: list[dict], ref: str, key: str) -> tuple[float, list[float]]:
    """(the median over items, the ratio of each round): ContextCite-batched's (`ref`) CPU
    seconds over the method's (`key`), per item (the sides alternate going first item by
    item) and per round of `ROUND` consecutive items (the ratio of their summed seconds)."""
    pairs = [(r[ref]["cpu"], r[key]["cpu"]) for r in part if ref in r and key in r]
    per_item = [a / b for a, b in pairs if b > 0]
    per_round = [sum(a for a, _ in chunk) / max(sum(b for _, b in chunk), 1e-12)
                 for chunk in (pairs[i:i + ROUND] for i in range(0, len(pairs), ROUND))]
    return (statistics.median(per_item) if per_item else float("nan")), per_round


def rounds(part: list[dict], keys: list[str], base: list[str]) -> None:
    """Prints the CPU ratio's spread (`ratio_spread`), so a noisy stretch of a shared machine
    shows as a spread rather than hiding in the mean."""
    if not base:
        return
    print(f"\nCPU ratio's spread: median over items, and over rounds of {ROUND} items "
          "(median, min-max): each round")
    for key in keys:
        if key.startswith("contextcite-batched_"):
            continue
        ref = _reference(key, base)
        item, per_round = ratio_spread(part, ref, key)
        if not per_round:
            continue
        label = _label(key)
        print(f"{label:<32} items {item:>7.1f}x   {len(per_round)} rounds "
              f"{statistics.median(per_round):>7.1f}x ({min(per_round):.1f}-"
              f"{max(per_round):.1f}x): " + " ".join(f"{r:.1f}x" for r in per_round))


def curve_point(args) -> None:
    """One (method, sentences) point in this fresh process: JSON on stdout."""
    from knowflow.explanation.estimator import load_estimator

    model, tok, cases = setup(args.model, 0, 1, args.curve_point[1], args.seed)
    est = load_estimator(model, args.model, args.estimator) \
        if args.curve_point[0] == "learned" else None
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    clock, cpu = time.perf_counter(), time.process_time()
    method = args.curve_point[0]
    at2 = None
    if method == "at2":
        from at2_peer import load_at2

        at2 = load_at2(args.at2)
    count = args.learned_counts[-1] if method == "learned" else \
        args.mask_counts[-1] if method.startswith("gradient") else \
        max(int(c) for c in args.ablations.split(","))
    run_method(method, count, model, tok, cases[0], est, args.cc_batch, at2)
    if method.startswith("gradient") and count:
        method = method.replace("gradient", f"gradient@{count}")
    print(json.dumps({"method": method, "sentences": args.curve_point[1],
                      "tokens": len(cases[0].led_ids), "cpu": time.process_time() - cpu,
                      "seconds": time.perf_counter() - clock,
                      "peak_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
                      / 1024}))


def curve(args, methods) -> None:
    print(f"{'sentences':>10}{'tokens':>8}  {'method':<22}{'CPU s':>9}{'wall s':>9}"
          f"{'peak MB':>9}")
    for n in (int(x) for x in args.curve.split(",")):
        for method in methods:
            cmd = [sys.executable, __file__, "--curve-point", method, str(n), "--model",
                   args.model, "--ablations", args.ablations, "--threads", str(args.threads),
                   "--cc-batch", str(args.cc_batch)]
            cmd += ["--estimator", str(args.estimator)] if args.estimator else []
            cmd += ["--at2", str(args.at2)] if args.at2 else []
            cmd += ["--learned-ablations", args.learned_ablations,
                    "--gradient-masks", args.gradient_masks]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                print(f"{n:>10}  {method}: failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            p = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{n:>10}{p['tokens']:>8}  {p['method']:<22}{p['cpu']:>9.2f}{p['seconds']:>9.2f}"
                  f"{p['peak_mb']:>9.0f}", flush=True)


def fit_both(args) -> None:
    """knowflow's estimator (`fit_estimator`) and AT2's (`at2_peer.train_at2`) on the same
    generated contexts: `--contexts` of `training_items` per seed in `--fit-seeds`, their
    ablations scored once (`fit_examples`, kept in DIR/examples-seed<S>.pt and reused) and
    given to both; prints each fit's cost and held-out LDS (the same held-out contexts)."""
    from at2_peer import at2_features, train_at2
    from knowflow.explanation.estimator import save_estimator
    from knowflow.explanation.fit import FitConfig, fit_estimator, fit_examples
    from knowflow.explanation.learned import FitExample, mean_lds, sentence_features
    from knowflow.lens.load import load_model

    out = args.fit_estimators
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.fit_seeds.split(",")]
    shared = shared_with_evaluation(seeds, args)
    if shared:
        sys.exit(f"bench_explain: training contexts share {len(shared)} sentences or questions "
                 f"with the evaluation items, e.g. {sorted(shared)[0]!r}")
    model, tok = load_model(args.model, device="cpu", dtype="float32")
    examples, cost = [], 0.0
    for seed in seeds:
        cfg = FitConfig(contexts=args.contexts, ablations=32, seed=seed,
                        prompt_format="chat", features=args.features, world=args.world)
        path = out / f"examples-seed{seed}.pt"
        recipe = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "features"}
        if not path.exists():
            cpu = time.process_time()
            got = fit_examples(model, tok, cfg)
            torch.save({"examples": got, "cpu": time.process_time() - cpu, "recipe": recipe},
                       path)
        saved = torch.load(path, weights_only=False)
        if saved.get("recipe", recipe) != recipe:     # a cache of other contexts: refuse
            sys.exit(f"bench_explain: {path} holds contexts of {saved['recipe']}, not "
                     f"{recipe}; remove it or give another DIR")
        examples += saved["examples"]
        cost += saved["cpu"]
    clock = time.process_time()        # saved examples may hold other kinds: recompute
    examples = [dataclasses.replace(ex, features=sentence_features(
        model, ex.prompt_ids, ex.answer_ids, ex.spans, cfg.kinds())) for ex in examples]
    feature_cpu = time.process_time() - clock
    cut = max(1, round(len(examples) * 0.75))
    clock = time.process_time()
    est = fit_estimator(model, tok, args.model, cfg, examples=examples)
    ridge_cpu = time.process_time() - clock
    est.provenance.update({"training_seeds": args.fit_seeds, "contexts_per_seed": args.contexts,
                           "examples_cpu_seconds": cost, "features_cpu_seconds": feature_cpu,
                           "command": "python benchmarks/peers/bench_explain.py " +
                           " ".join(sys.argv[1:]),
                           "disjoint_from": f"needle-cf, needle-agree (seed {args.seed}) and "
                                            f"long_items(24, {args.long_sentences}): no "
                                            "sentence or question shared"})
    save_estimator(est, args.model, out / "knowflow.json")
    clock = time.process_time()
    feats = [at2_features(model, ex.prompt_ids, ex.answer_ids, ex.spans) for ex in examples]
    at2_cpu = time.process_time() - clock
    clock = time.process_time()
    at2 = train_at2(model, [(f, ex.masks, ex.targets) for f, ex in
                            zip(feats[:cut], examples[:cut], strict=True)])
    train_cpu = time.process_time() - clock
    at2.save(out / "at2.pt")
    weights = at2.linear.weight.detach()[0].double()
    held = [FitExample(f, ex.masks, ex.targets) for f, ex in
            zip(feats[cut:], examples[cut:], strict=True)]
    print(f"{len(examples)} contexts ({cut} fit, {len(examples) - cut} held out); their "
          f"answers and ablations: {cost:.0f} CPU s; {cfg.features} features "
          f"{feature_cpu:.0f} CPU s")
    print(f"knowflow: ridge {est.provenance['ridge']:g}, held-out LDS "
          f"{est.provenance['heldout_lds']:.3f}, fit {ridge_cpu:.1f} CPU s -> "
          f"{out / 'knowflow.json'}")
    print(f"AT2: held-out LDS {mean_lds(held, weights):.3f}; its features "
          f"{at2_cpu:.1f} CPU s, training {train_cpu:.1f} CPU s -> {out / 'at2.pt'}")


def shared_with_evaluation(seeds, args) -> set[str]:
    """The sentences and questions the training contexts of `seeds` share with every item
    the benchmark evaluates (both needle suites whole, 24 long items): must be empty."""
    from knowflow.data.suites import get_suite
    from knowflow.explanation.contexts import long_items, training_items
    from knowflow.explanation.splitter import split_sentences

    def texts(items) -> set[str]:
        return {s.text for it in items for s in split_sentences(it.context)} | \
            {it.question for it in items}

    train = [it for seed in seeds for it in training_items(args.contexts, seed, 0.5,
                                                             args.world)]
    evaluation = get_suite("needle-cf", args.seed) + get_suite("needle-agree", args.seed) + \
        long_items(24, args.long_sentences, args.seed)
    return texts(train) & texts(evaluation)


def merged_rows(paths: list[Path]) -> list[dict]:
    """The rows of --json files, one per item id (a later file's fields over an earlier's)."""
    merged: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line:
                row = json.loads(line)
                merged.setdefault(row["id"], {}).update(row)
    return list(merged.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--items", type=int, default=48, help="needle items, half of each suite")
    ap.add_argument("--long", type=int, default=0, help="long multi-document items")
    ap.add_argument("--long-sentences", type=int, default=40)
    ap.add_argument("--ablations", default="32,64")
    ap.add_argument("--holdout", type=int, default=32)
    ap.add_argument("--cc-batch", type=int, default=16, help="ContextCite-batched batch size")
    ap.add_argument("--estimator", type=Path, help="learned estimator file (default: the "
                                                   "model's, beside its cache entry)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", type=int, default=0, help="skip the items before this index")
    ap.add_argument("--last", type=int, help="stop before this index")
    ap.add_argument("--no-contextcite", action="store_true", help="knowflow only")
    ap.add_argument("--cc-default", action="store_true",
                    help="also ContextCite at its default batch size 1 (slow)")
    ap.add_argument("--json", type=Path, help="append each item's row here (JSONL)")
    ap.add_argument("--summarize", type=Path, nargs="+",
                    help="print the table of --json files (rows of one item merged by id)")
    ap.add_argument("--methods", help="run only these (comma-separated: knowflow, learned, "
                                      "gradient, knowflow-flat, knowflow-hier, learned-loo, "
                                      "at2, "
                                      "contextcite-batched, contextcite)")
    ap.add_argument("--learned-ablations", default="0",
                    help="learned: ablations that correct its scores (0: one pass), e.g. 0,8")
    ap.add_argument("--gradient-masks", default="0",
                    help="gradient: mask points averaged (comma-separated; 0: one pass)")
    ap.add_argument("--gradient-ablations", default="0",
                    help="gradient: scored ablations that correct it (`--set "
                         "learned_ablations`; comma-separated; rows `gradient+K`)")
    ap.add_argument("--learned-loo", default="2",
                    help="learned-loo: leave-one-out of learned's top K sentences, e.g. 1,2")
    ap.add_argument("--at2", type=Path, help="AT2 estimator file (from --fit-estimators)")
    ap.add_argument("--fit-estimators", type=Path, metavar="DIR",
                    help="fit knowflow's learned estimator and train AT2's on the same "
                         "generated contexts (--contexts per --fit-seeds seed), save both "
                         "in DIR (see fit_both)")
    ap.add_argument("--contexts", type=int, default=24, help="fit: contexts per seed")
    ap.add_argument("--fit-seeds", default="0,1", help="fit: training_items seeds")
    ap.add_argument("--world", type=float, default=0.5,
                    help="fit: share of real-fact training contexts (contexts.py)")
    ap.add_argument("--features", default="soft",
                    help="fit: knowflow's feature kinds (explanation/features.py), '+'-joined")
    ap.add_argument("--curve", help="sentence counts of the cost curve, e.g. 10,40,100,200")
    ap.add_argument("--curve-point", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.summarize:
        report(merged_rows(args.summarize))
        return 0
    torch.set_num_threads(args.threads)
    args.learned_counts = [int(n) for n in args.learned_ablations.split(",")]
    args.loo_counts = [int(n) for n in args.learned_loo.split(",")]
    args.mask_counts = [int(n) for n in args.gradient_masks.split(",")]
    args.fix_counts = [int(n) for n in args.gradient_ablations.split(",")]
    if args.fit_estimators:
        fit_both(args)
        return 0
    methods = ["knowflow", "learned"] + (["at2"] if args.at2 else []) + \
        ([] if args.no_contextcite else ["contextcite-batched"] +
         (["contextcite"] if args.cc_default else []))
    if args.methods:
        methods = [m for m in args.methods.split(",") if m]
    if args.curve_point:
        args.curve_point = (args.curve_point[0], int(args.curve_point[1]))
        curve_point(args)
        return 0
    if args.curve:
        curve(args, methods)
        return 0
    from knowflow.explanation.estimator import load_estimator

    counts = [int(n) for n in args.ablations.split(",")]
    model, tok, cases = setup(args.model, args.items, args.long, args.long_sentences,
                              args.seed)
    est = load_estimator(model, args.model, args.estimator)
    at2 = None
    if "at2" in methods:
        from at2_peer import load_at2

        at2 = load_at2(args.at2)
    if est is None and {"learned", "learned-loo"} & set(methods):
        print("no learned estimator: `knowflow explain fit` first; learned skipped",
              file=sys.stderr)
        methods = [m for m in methods if m not in ("learned", "learned-loo")]
    rows = []
    for i, case in enumerate(cases):
        if i < args.first or (args.last is not None and i >= args.last):
            continue
        row = measure(methods, counts, model, tok, case, i, args, est, at2)
        rows.append(row)
        if args.json:
            with args.json.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
        print(f"[{i + 1}/{len(cases)}] {row['id']} ({row['n_sentences']} sentences, span "
              f"{row['span']!r}): " + "  ".join(
                  f"{k}: top {v['top']} (answer {row['needle']}) {v['cpu']:.1f}s"
                  for k, v in row.items() if isinstance(v, dict)), file=sys.stderr, flush=True)
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
