"""How the hierarchical attribution's weights rank sentences against the flat surrogate's, on
long multi-document items: every variant from one scoring pass per item.

    python benchmarks/studies/study_hierarchy.py --long 7 --sentences 40 --json rows.jsonl

Per item (bench_explain's long items and greedy answers): the flat surrogate on 64 masks over
every sentence; the document stage on `--documents` masks over the documents (paragraphs); the
sentence stage on 64 masks over the sentences of the 2 top documents, the others removed
(`explanation.hierarchy`). From these scores, four weightings of the hierarchy: `zeros` (the
other documents' sentences 0: the hierarchy before 2026-12-06), `share` (each of them an equal
share of its document's weight), `one-scale` (share, and a kept document's weights shifted to
sum to its document weight: `hierarchy.one_scale`, what `--set hierarchy_above=N` runs) and
`documents` (every sentence its document's share, no sentence stage). Each is scored by its
LDS on 32 held-out masks over every sentence (bench_explain's `reference`, the same masks for
all); CPU seconds are the scoring's (the flat fit's, or the document stage's plus the
sentence stage's). Prints the means per variant.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from bench_explain import reference, setup  # noqa: E402


def study(case, index: int, documents: int) -> dict:
    from knowflow.explanation.attribution import ablation_masks, score_masks
    from knowflow.explanation.hierarchy import document_units, one_scale
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.surrogate import fit_surrogate, random_masks, spearman

    model, tok = study.model
    it, n = case.item, len(case.sents)
    cfg = ExplainConfig(ablations=64, holdout=0, top_k=(), prompt_format="chat")
    held, actual, _ = reference(model, tok, case, 32, index)

    def scored(masks: torch.Tensor) -> tuple[torch.Tensor, float]:
        cpu = time.process_time()
        got = score_masks(model, tok, it, case.sents, masks, case.cont, cfg, case.lead)
        return got, time.process_time() - cpu

    masks, _ = ablation_masks(n, cfg, it.id + it.context)
    flat_y, flat_cpu = scored(masks)
    weights = {"flat": (fit_surrogate(masks, flat_y, 4, 0).weights, flat_cpu)}
    unit = torch.tensor(document_units(it.context, case.sents, cfg.block_sentences))
    u = int(unit.max()) + 1
    doc = random_masks(documents, u, 0.5, torch.Generator().manual_seed(12345 + index))
    doc_y, doc_cpu = scored(doc[:, unit])
    unit_w = fit_surrogate(doc, doc_y, 4, 0).weights                       # (units,)
    kept_units = sorted(sorted(range(u), key=lambda k: -float(unit_w[k]))[:2])
    kept = [j for j in range(n) if int(unit[j]) in kept_units]
    short = torch.zeros(len(masks), n, dtype=torch.int64)
    short[:, kept] = masks[:, kept]
    y2, cpu2 = scored(short)
    w2 = fit_surrogate(masks[:, kept], y2, 4, 0).weights                  # (kept,)
    size = torch.bincount(unit, minlength=u).double()
    share = unit_w.double()[unit] / size[unit]                            # (sentences,)
    zeros, shared = torch.zeros(n, dtype=torch.float64), share.clone()
    zeros[kept] = shared[kept] = w2.double()
    hier_cpu = doc_cpu + cpu2
    weights.update({"zeros": (zeros, hier_cpu), "share": (shared, hier_cpu),
                    "one-scale": (one_scale(unit, unit_w, kept, w2), hier_cpu),
                    "documents": (share, doc_cpu)})
    return {"id": it.id, "sentences": n, "units": u,
            **{k: {"lds": spearman(held.double() @ w, actual), "cpu": c}
               for k, (w, c) in weights.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--long", type=int, default=7)
    ap.add_argument("--sentences", type=int, default=40)
    ap.add_argument("--documents", type=int, default=32, help="document-stage masks")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, help="append each item's row here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, cases = setup("smollm2-135m-instruct", 0, args.long, args.sentences, 0)
    study.model = (model, tok)
    rows = []
    for i, case in enumerate(cases):
        rows.append(study(case, i, args.documents))
        if args.json:
            with args.json.open("a") as fh:
                fh.write(json.dumps(rows[-1]) + "\n")
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"{len(rows)} items of {args.sentences} sentences; mean LDS, mean CPU s")
    for k in ("flat", "zeros", "share", "one-scale", "documents"):
        print(f"{k:<10}{statistics.mean(r[k]['lds'] for r in rows):>8.3f}"
              f"{statistics.mean(r[k]['cpu'] for r in rows):>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
