"""knowflow's sentence attribution side by side with ContextCite (`context-cite` 0.0.4).

    python benchmarks/bench_explain.py --items 48 --ablations 32,64 --threads 1

Both run on the same model, the same needle items (half `needle-cf`, half `needle-agree`),
the same prompt (the chat template over "Context: ...\\n\\nQuestion: ...\\nAnswer in a few
words."), the same answer (the model's greedy answer with the full context) and the same
number of ablations. ContextCite calls nltk's downloader when imported; this script replaces
it with a no-op and gives ContextCite knowflow's offline sentence splitter as its partitioner
(as a user without network would), so both see the same sentences. ContextCite runs with its
defaults otherwise (batch size 1, lasso alpha 0.01 on logit-probabilities).

Per tool and ablation count it prints: the top-1 hit rate on the needle sentence; the LDS
(Spearman between the surrogate's predictions and the answer's actual log-probability on
`--holdout` held-out ablations, the same masks for both tools, scored once by knowflow's
scorer and not timed); the top-1 drop (the fall of the answer's log-probability when the top
sentence is removed); seconds per item of the attribution alone (ablations + fit), wall-clock
and CPU (the process's, so time the shared machine gives other processes is not counted);
and the speed ratios, of the means and per item (median and range). The one-pass estimate's
(gradient x input) hit rate is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


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


def needle_setup(model_name: str, n_items: int, seed: int):
    """(model, tokenizer, items, prompts, encoded prompts, answers): the needle items, half
    `needle-cf` and half `needle-agree`, their chat prompts and the model's greedy answers
    (up to 16 tokens) with the full context, the answers both tools explain."""
    from knowflow.data.suites import get_suite
    from knowflow.evaluation.generate import generate
    from knowflow.explanation.prompts import encode, rendered
    from knowflow.lens.load import load_model

    model, tok = load_model(model_name, device="cpu", dtype="float32")
    half = n_items // 2
    items = get_suite("needle-cf", seed, half) + get_suite("needle-agree", seed, n_items - half)
    prompts = [rendered(it, tok, "chat") for it in items]
    seqs = encode(tok, prompts)
    answers = generate(model, tok, seqs, batch_size=8, max_new_tokens=16)
    return model, tok, items, prompts, seqs, answers


def knowflow_weights(model, tok, item, sents, cont: str, cfg) -> torch.Tensor:
    """knowflow's sentence attribution of one item, as `knowflow explain` computes it: the
    ablation masks, their scores over the trie, the surrogate's weights, (sentences,)."""
    from knowflow.explanation.attribution import ablation_masks, score_masks
    from knowflow.explanation.surrogate import fit_surrogate

    masks, _ = ablation_masks(len(sents), cfg, item.id + item.context)
    targets = score_masks(model, tok, item, sents, masks, cont, cfg)
    return fit_surrogate(masks, targets, cfg.cv_folds, cfg.seed).weights


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--items", type=int, default=48, help="needle items, half of each suite")
    ap.add_argument("--ablations", default="32,64")
    ap.add_argument("--holdout", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", type=int, default=0, help="skip the items before this index "
                                                         "(to split a run across processes)")
    ap.add_argument("--last", type=int, help="stop before this index")
    ap.add_argument("--no-contextcite", action="store_true", help="knowflow only")
    ap.add_argument("--json", type=Path, help="append each item's row here (JSONL) as it ends")
    ap.add_argument("--summarize", type=Path, help="print the table of a --json file, run "
                                                   "nothing")
    args = ap.parse_args()
    counts = [int(n) for n in args.ablations.split(",")]
    if args.summarize:
        rows = [json.loads(line) for line in args.summarize.read_text().splitlines() if line]
        _report(rows, counts, any(k.startswith("contextcite") for k in rows[0]))
        return 0
    torch.set_num_threads(args.threads)

    from knowflow.data.prompts import PromptConfig, qa_instruction
    from knowflow.explanation.attribution import gradient_x_input, score_masks
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.prompts import sentence_tokens
    from knowflow.explanation.splitter import split_sentences
    from knowflow.explanation.surrogate import random_masks, spearman
    from knowflow.lens.scorer import score_continuations

    model, tok, items, prompts, seqs, answers = needle_setup(args.model, args.items, args.seed)
    if not args.no_contextcite:
        ContextCiter, OfflinePartitioner = _contextcite()
    rows = []
    for i, (it, prompt, seq, answer) in enumerate(zip(items, prompts, seqs, answers,
                                                      strict=True)):
        if i < args.first or (args.last is not None and i >= args.last):
            continue
        sents = split_sentences(it.context)
        n = len(sents)
        cont = prompt.answer_prefix + answer
        cfg = ExplainConfig(n_holdout=0)
        gen = torch.Generator().manual_seed(10_000 + i)
        held = random_masks(args.holdout, n, 0.5, gen)
        actual = score_masks(model, tok, it, sents, held, cont, cfg)
        full = score_continuations(model, tok, [seq], [[cont]])[0][0][0]
        drops: dict[int, float] = {}   # top sentence -> the fall when it is removed
        for top in range(n):
            mask = torch.ones(1, n, dtype=torch.int64)
            mask[0, top] = 0
            drops[top] = full - float(score_masks(model, tok, it, sents, mask, cont, cfg)[0])

        row = {"id": it.id, "needle": it.meta["needle"], "n_sentences": n, "answer": answer}
        spans = sentence_tokens(it, sents, tok, "chat")
        clock = time.perf_counter()
        one = gradient_x_input(model, seq, tok(cont, add_special_tokens=False)["input_ids"],
                               spans)
        row["one_pass"] = {"top": max(range(n), key=one.__getitem__),
                           "seconds": time.perf_counter() - clock}
        # the sides take turns going first, item by item, so a slow stretch of a shared
        # machine falls on both
        tools = ["knowflow"] if args.no_contextcite else \
            ["knowflow", "contextcite"][::1 if i % 2 == 0 else -1]
        for count in counts:
            for tool in tools:
                if tool == "knowflow":
                    cfg_n = ExplainConfig(n_ablations=count, n_holdout=0, seed=args.seed)
                    clock, cpu = time.perf_counter(), time.process_time()
                    w = knowflow_weights(model, tok, it, sents, cont, cfg_n)
                else:
                    cc = ContextCiter(model, tok, it.context,
                                      qa_instruction(it, PromptConfig()), num_ablations=count,
                                      prompt_template="Context: {context}\n\n{query}",
                                      partitioner=OfflinePartitioner(it.context))
                    cc._cache["output"] = prompt.text + cont    # explain the same answer
                    clock, cpu = time.perf_counter(), time.process_time()
                    w = torch.tensor(cc.get_attributions(verbose=False), dtype=torch.float64)
                secs, cpu = time.perf_counter() - clock, time.process_time() - cpu
                top = int(w.argmax())
                row[f"{tool}_{count}"] = {"top": top, "seconds": secs, "cpu": cpu,
                                          "drop": drops[top],
                                          "lds": spearman(held.double() @ w, actual),
                                          "weights": w.tolist()}
        rows.append(row)
        if args.json:
            with args.json.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
        print(f"[{i + 1}/{len(items)}] " + "  ".join(
            f"{k}: top {v['top']} (needle {row['needle']}) {v['seconds']:.1f}s"
            for k, v in row.items() if isinstance(v, dict)), file=sys.stderr, flush=True)
    _report(rows, counts, not args.no_contextcite)
    return 0


def _mean(values) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def _answer_sentence(row: dict, item) -> int | None:
    """The one sentence whose statement the model's answer names (its answer, or its subject
    where that is not the question's), or None (none or several)."""
    from knowflow.evaluation.normalize import alternatives, answers_present

    named = [i for i, (subject, value) in enumerate(item.meta["statements"])
             if answers_present(row["answer"], [alternatives(value)])[0] or
             (subject != item.subject and answers_present(row["answer"],
                                                          [alternatives(subject)])[0])]
    return named[0] if len(named) == 1 else None


def _report(rows: list[dict], counts: list[int], with_cc: bool) -> None:
    from knowflow.data.suites import get_suite

    _table(rows, counts, with_cc)
    by_id = {it.id: it for suite in ("needle-cf", "needle-agree") for it in get_suite(suite)}
    named = []
    for r in rows:
        where = _answer_sentence(r, by_id[r["id"]])
        if where is not None:
            named.append({**r, "needle": where})
    print(f"\nthe {len(named)} of them whose answer names exactly one sentence's statement, "
          "with that sentence as the one to find:")
    if named:
        _table(named, counts, with_cc)


def _ratios(rows: list[dict], count: int, clock: str) -> list[float]:
    """ContextCite's seconds over knowflow's, per item, sorted."""
    return sorted(r[f"contextcite_{count}"][clock] / r[f"knowflow_{count}"][clock]
                  for r in rows if clock in r[f"knowflow_{count}"])


def _table(rows: list[dict], counts: list[int], with_cc: bool) -> None:
    print(f"{len(rows)} needle items ({sum(r['id'].startswith('needle-cf') for r in rows)} "
          f"needle-cf, {sum(r['id'].startswith('needle-agree') for r in rows)} needle-agree)")
    print(f"{'method':<22}{'ablations':>10}{'top-1 hit':>11}{'LDS':>8}{'top-1 drop':>12}"
          f"{'wall s/item':>13}{'CPU s/item':>12}{'ratio wall':>12}{'ratio CPU':>11}")
    for count in counts:
        tools = ["knowflow"] + (["contextcite"] if with_cc else [])
        secs = {(t, c): _mean([r[f"{t}_{count}"].get(c) for r in rows])
                for t in tools for c in ("seconds", "cpu")}
        for t in tools:
            key = f"{t}_{count}"
            hit = _mean([float(r[key]["top"] == r["needle"]) for r in rows])
            ratio = [secs["contextcite", c] / secs[t, c] if with_cc else float("nan")
                     for c in ("seconds", "cpu")]
            print(f"{t:<22}{count:>10}{hit:>11.3f}{_mean([r[key]['lds'] for r in rows]):>8.3f}"
                  f"{_mean([r[key]['drop'] for r in rows]):>12.3f}{secs[t, 'seconds']:>13.2f}"
                  f"{secs[t, 'cpu']:>12.2f}{ratio[0]:>11.2f}x{ratio[1]:>10.2f}x")
        for clock, name in (("seconds", "wall"), ("cpu", "CPU")):
            per_item = _ratios(rows, count, clock) if with_cc else []
            if per_item:
                print(f"{'':<22}{count:>10}  median per-item speed ratio ({name}) "
                      f"{per_item[len(per_item) // 2]:.2f}x (range {per_item[0]:.2f}-"
                      f"{per_item[-1]:.2f}x over {len(per_item)} items, sides alternating)")
    hit = _mean([float(r["one_pass"]["top"] == r["needle"]) for r in rows])
    print(f"{'one-pass grad x input':<22}{'0':>10}{hit:>11.3f}{'':>8}{'':>12}"
          f"{_mean([r['one_pass']['seconds'] for r in rows]):>13.2f}")


if __name__ == "__main__":
    sys.exit(main())
