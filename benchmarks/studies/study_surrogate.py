"""How the ablation surrogate's fit and its stopping rule rank held-out masks, on RAG-shaped
design items: every variant from one scoring pass per item.

    python benchmarks/studies/study_surrogate.py --tokens 1024,2048 --items 5,3 --json rows.jsonl
    python benchmarks/studies/study_surrogate.py --fit rows.jsonl

`--json` scores, per item of `rag_items` (seed 0 by default: the design items, never the
benchmarked ones, which are seed 1), explain's 64 fit masks (`--draws K`: K independent draws,
explain's seeds 0 to K-1; rows `<id>@<seed>`) (`ablation_masks`), the gradient
prior (`gradient_prior`) and bench_explain's 32 held-out half masks, and appends them to the
file. `--fit` refits every variant on the first K masks (K = 16, 24, ..., 64) of each item and
prints its mean LDS on the held-out masks per K, then each stopping rule's mean LDS and
ablations used. Nothing is timed: the variants differ in the fit (milliseconds), not in the
ablations scored.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from bench_explain import reference  # noqa: E402
from bench_rag import load_cases  # noqa: E402

COUNTS = (16, 24, 32, 40, 48, 56, 64)


def dump(args) -> None:
    from knowflow.explanation.attribution import ablation_masks, score_masks
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.sentences import gradient_prior
    from knowflow.lens.load import load_model
    from knowflow.lens.shared import share_prompt

    torch.set_num_threads(args.threads)
    model, tok = load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
    cases = load_cases(model, tok, args)
    for index, (tokens, case) in enumerate(cases):
        it, n = case.item, len(case.sents)
        held, actual, full = reference(model, tok, case, 32, index)
        shared = share_prompt(model, tok, case.led_ids[:-1])
        prior = gradient_prior(model, tok, case.led_ids, case.cont, case.spans, shared)
        for draw in range(args.draws):       # draw 0: explain's own masks (its seed 0)
            cfg = ExplainConfig(ablations=64, holdout=0, top_k=(), prompt_format="chat",
                                seed=draw)
            masks, _ = ablation_masks(n, cfg, it.id + it.context)
            y = score_masks(model, tok, it, case.sents, masks, case.cont, cfg, case.lead,
                            shared=shared)
            row = {"id": it.id + (f"@{draw}" if draw else ""), "tokens_asked": tokens,
                   "tokens": len(case.led_ids), "sentences": n, "span": case.span,
                   "full": full,
                   "span_tokens": len(tok(case.cont, add_special_tokens=False)["input_ids"]),
                   "masks": masks.tolist(), "y": y.tolist(), "prior": prior.tolist(),
                   "held": held.tolist(), "actual": actual.tolist()}
            with args.json.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(f"[{index + 1}/{len(cases)}] {row['id']}: {n} sentences, y from "
                  f"{min(row['y']):.2f} to {max(row['y']):.2f}", file=sys.stderr, flush=True)


def variants() -> dict:
    """name -> fit(masks, y, prior, row) -> (weights (sentences,), out-of-fold (ablations,))."""
    from sklearn.linear_model import Lasso

    from knowflow.explanation.surrogate import centred_ridge, fit_surrogate, out_of_fold

    def ours(prior_on: bool, centred: bool = True):
        def fit(x, y, prior, row):
            s = fit_surrogate(x, y, 4, 0, prior if prior_on else None, centred)
            return s.weights, s.out_of_fold
        return fit

    def folds_of(fit_one, x, y):
        """Out-of-fold predictions of fit_one(x, y) -> (w, b) on explain's 4 folds."""
        order = np.random.default_rng(0).permutation(len(y))
        return torch.from_numpy(out_of_fold(fit_one, x.double().numpy(), y.double().numpy(),
                                            order, 4))

    def contextcite(x, y, prior, row):
        """ContextCite's solver: standardized masks, the lasso at 0.01 on the per-token
        mean of the target."""
        k = row["span_tokens"]

        def one(xs, ys):
            mu, sd = xs.mean(0), xs.std(0)
            sd[sd == 0] = 1.0
            m = Lasso(alpha=0.01, fit_intercept=True, random_state=0).fit((xs - mu) / sd,
                                                                         ys / k)
            w = m.coef_ / sd * k
            return w, float(m.intercept_ * k - mu @ w)
        w, _ = one(x.double().numpy(), y.double().numpy())
        return torch.from_numpy(w), folds_of(one, x, y)

    def ridge(penalty: float):
        def fit(x, y, prior, row):
            def one(xs, ys):
                return centred_ridge(xs, ys, prior.double().numpy(), penalty)
            w, _ = one(x.double().numpy(), y.double().numpy())
            return torch.from_numpy(w), folds_of(one, x, y)
        return fit

    def logit_target(x, y, prior, row):
        """The default fit on the logit of the span's probability instead of its log."""
        p = y.clamp(max=-1e-6)
        return ours(True)(x, p - torch.log1p(-torch.exp(p)), prior, row)

    def prior_only(x, y, prior, row):
        return prior.double(), torch.zeros(len(y), dtype=torch.float64)

    return {"default (pick)": ours(True), "default, logit target": logit_target,
            "adaptive lasso": ours(True, False),
            "plain lasso (CV)": ours(False), "ContextCite's lasso": contextcite,
            "centred ridge 0.1": ridge(0.1), "centred ridge 1": ridge(1.0),
            "prior alone": prior_only}


def fit_all(paths: list[Path]) -> None:
    from sklearn.exceptions import ConvergenceWarning

    from knowflow.explanation.surrogate import spearman

    warnings.simplefilter("ignore", ConvergenceWarning)

    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines() if line]
    table: dict[str, dict[int, list[float]]] = {}
    per_item: dict[str, list[dict]] = {}
    for row in rows:
        x, y = torch.tensor(row["masks"]), torch.tensor(row["y"], dtype=torch.float64)
        held = torch.tensor(row["held"]).double()
        actual = torch.tensor(row["actual"], dtype=torch.float64)
        prior = torch.tensor(row["prior"], dtype=torch.float64)
        for name, fit in variants().items():
            for k in COUNTS:
                w, oof = fit(x[:k], y[:k], prior, row)
                lds = spearman(held @ w, actual)
                table.setdefault(name, {}).setdefault(k, []).append(lds or 0.0)
                per_item.setdefault(name, []).append(
                    {"id": row["id"], "k": k, "lds": lds or 0.0,
                     "own": spearman(oof, y[:k]) or 0.0})
    print(f"{len(rows)} items; mean held-out LDS by ablations")
    print(f"{'variant':<24}" + "".join(f"{k:>7}" for k in COUNTS))
    for name, by_k in table.items():
        print(f"{name:<24}" + "".join(f"{statistics.mean(by_k[k]):>7.3f}" for k in COUNTS))
    print("\nper item at 64 (ids):", ", ".join(r["id"] for r in rows))
    for name, by_k in table.items():
        print(f"{name:<24}" + " ".join(f"{v:.2f}" for v in by_k[64]))
    print("\nstopping rules: mean held-out LDS, mean ablations (per variant)")
    for rule, stop in RULES.items():
        cells = []
        for name, got in per_item.items():
            lds, used = [], []
            for row in rows:
                seq = [g for g in got if g["id"] == row["id"]]
                end = next((i for i in range(len(seq)) if stop(seq[:i + 1])), len(seq) - 1)
                lds.append(seq[end]["lds"])
                used.append(seq[end]["k"])
            cells.append(f"{name}: {statistics.mean(lds):.3f} / {statistics.mean(used):.0f}")
        print(f"  {rule}: " + "; ".join(cells))


def _rise(seq, tol):
    return len(seq) >= 2 and seq[-1]["own"] - seq[-2]["own"] < tol


RULES = {
    "rise < 0.02 (before)": lambda s: _rise(s, 0.02),
    "rise < 0.02, own LDS >= 0.7 (default)": lambda s: _rise(s, 0.02) and s[-1]["own"] >= 0.7,
    "rise < 0.02, own LDS >= 0.5": lambda s: _rise(s, 0.02) and s[-1]["own"] >= 0.5,
    "always 32": lambda s: s[-1]["k"] >= 32,
    "always 64": lambda s: False,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1024,2048")
    ap.add_argument("--items", default="5,3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--draws", type=int, default=1, help="independent draws of the 64 fit "
                                                          "masks per item (explain's seeds)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fit", type=Path, nargs="+")
    args = ap.parse_args()
    if args.fit:
        fit_all(args.fit)
        return 0
    args.tokens = [int(t) for t in args.tokens.split(",")]
    args.items = [int(n) for n in args.items.split(",")]
    args.hotpot = None
    dump(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
