"""What an attribution must see to score like ablation: sentences cut out of the
attention of the readers only or of every row, with the positions kept or shifted as the
ablated text would shift them, exactly (64 masks fitted by explain's lasso) and to first order
(the keep-weight gradient `--attribution gradient` takes).

    python benchmarks/studies/study_explain_ceiling.py --items 48 --last 30 --threads 1 \\
        --json rows.jsonl

Per needle item (bench_explain's items and greedy answers), each scored by its LDS on the
benchmark's 32 held-out masks (`bench_explain.reference`: the sentences removed from the text):

* `ablation`: the 64 masks scored as explain scores them (sentences removed from the text);
* `knockout <rows>, <positions>`: the same 64 masks, each mask's dropped sentences cut out of
  the attention (their keys get a bias of log 1e-30) of the readers only (the rows after the
  context, continuing a KV cache of the context) or of every row; with `positions kept` every
  token keeps its position, with `positions shifted` it sees the positions the ablated text
  gives it: every row takes the cumulative count of kept tokens as its position id, the
  readers rotate the cached keys (RoPE) by the number of dropped tokens between them and the
  readers;
* `gradient <rows>, <positions>, <points>`: the same views relaxed to a keep weight k per
  sentence (attention bias log k; a token's position advanced by the keep weights of the
  tokens before it), differentiated at 1/2 or at explain's 2 mask points (`--set
  gradient_masks=2`) and summed; `readers, kept` is `--attribution gradient` exactly.

Every row with shifted positions is the ablation up to tokenization at the cuts; dropping
either half of it shows which part of the ablation a cheaper view misses. RoPE models only
(SmolLM2). Prints the means per variant.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
from bench_explain import reference, setup  # noqa: E402

CHUNK = 16            # masks per exact pass


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, -1)
    return torch.cat([-b, a], -1)


def span_logprob(model, ids: torch.Tensor, target: torch.Tensor, owner: torch.Tensor,
                 keep: torch.Tensor, cut: int, rows: bool, positions: bool,
                 prefix=None) -> torch.Tensor:
    """(b,) the span's log-probability with sentence keep weights `keep` (b, sentences) in
    [0, 1]: a bias log k on each sentence's keys, at every row (`rows`) or at the rows from
    `cut` (continuing `prefix`, the cache of ids[:, :cut]); `positions`: a token's position
    advanced by the keep weights before it. `ids` (1, seq) end with the span but its last
    token; `target` (T,) the span."""
    from knowflow.lens.arch import arch_of
    from knowflow.lens.attention import AttentionPlan, intercepted

    b, n_t = keep.shape[0], len(target)
    tok_keep = torch.cat([keep, torch.ones(b, 1)], 1)[:, owner]            # (b, seq)
    bias = tok_keep.clamp_min(1e-30).log()[:, None]                        # (b, 1, seq)
    inputs = {}
    if rows:
        inputs["input_ids"] = ids.expand(b, -1)
        if positions:
            inputs["position_ids"] = tok_keep.cumsum(-1) - tok_keep         # (b, seq)
    else:
        cache = copy.deepcopy(prefix)
        cache.batch_repeat_interleave(b)
        if positions:                  # each cached key moves later by what drops after it
            dropped = 1 - tok_keep[:, :cut]                                # (b, cut)
            shift = dropped.flip(-1).cumsum(-1).flip(-1) - dropped         # (b, cut)
            cos, sin = model.model.rotary_emb(cache.layers[0].keys, shift)  # (b, cut, dh)
            cos, sin = cos[:, None], sin[:, None]
            for layer in cache.layers:
                layer.keys = layer.keys * cos + _rotate_half(layer.keys) * sin
        inputs.update(input_ids=ids[:, cut:].expand(b, -1), past_key_values=cache)
    layers = arch_of(model).n_layers
    with intercepted(model) as layer_of:
        plan = AttentionPlan(key_bias={layer: bias for layer in range(layers)},
                             layer_of=layer_of)
        out = model(knowflow_plan=plan, logits_to_keep=n_t, **inputs)
    logp = torch.log_softmax(out.logits.float(), -1)                       # (b, T, vocab)
    return logp[:, torch.arange(n_t), target].sum(-1)


def study(case, index: int) -> dict:
    from knowflow.explanation.attribution import ablation_masks, score_masks
    from knowflow.explanation.features import (
        SOFT_KEEP,
        mask_points,
        reader_start,
        sentence_owner,
    )
    from knowflow.explanation.learned import gradient_masks
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.surrogate import fit_surrogate, spearman
    from knowflow.lens.prefix import Prefix

    model, tok = study.model
    it, n = case.item, len(case.sents)
    cfg = ExplainConfig(ablations=64, holdout=0, top_k=(), prompt_format="chat")
    held, actual, _ = reference(model, tok, case, 32, index)
    answer = tok(case.cont, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([list(case.led_ids) + answer[:-1]])                 # (1, seq)
    target = torch.tensor(answer)
    owner = sentence_owner(ids.shape[1], case.spans)
    cut = reader_start(case.led_ids, case.spans)
    points = {"1/2": torch.full((1, n), SOFT_KEEP),          # the gradient's keep weights
              "2 masks": mask_points(gradient_masks(
                  n, ExplainConfig(attribution="gradient", gradient_masks=2),
                  it.id + it.context))}
    row = {"id": it.id, "n_sentences": n}

    def lds(weights) -> float:
        return spearman(held.double() @ torch.as_tensor(weights).double(), actual)

    masks, _ = ablation_masks(n, cfg, it.id + it.context)
    cpu = time.process_time()
    y = score_masks(model, tok, it, case.sents, masks, case.cont, cfg, case.lead)
    row["ablation"] = [lds(fit_surrogate(masks, y, 4, 0).weights), time.process_time() - cpu]
    views = [(rows, positions) for rows in (False, True) for positions in (False, True)]
    for rows, positions in views:
        name = f"{'every row' if rows else 'readers'}, positions " \
               f"{'shifted' if positions else 'kept'}"
        cpu = time.process_time()
        with torch.no_grad():
            prefix = None if rows else Prefix.run(model, ids[:, :cut]).cache
            y = torch.cat([span_logprob(model, ids, target, owner, m.float(), cut, rows,
                                        positions, prefix) for m in masks.split(CHUNK)])
        row[f"knockout {name}"] = [lds(fit_surrogate(masks, y.double(), 4, 0).weights),
                                   time.process_time() - cpu]
        for label, keep in points.items():      # each variant timed alone: its own prefix
            cpu = time.process_time()
            with torch.no_grad():
                prefix = None if rows else Prefix.run(model, ids[:, :cut]).cache
            keep = keep.clone().requires_grad_(True)
            total = span_logprob(model, ids, target, owner, keep, cut, rows, positions,
                                 prefix).sum()
            grad, = torch.autograd.grad(total, keep)                       # (points, n)
            row[f"gradient {name}, {label}"] = [lds(grad.double().mean(0)),
                                                time.process_time() - cpu]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--items", type=int, default=48, help="needle items, half of each suite")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--last", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="append each item's row here (JSONL)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, cases = setup(args.model, args.items, 0, 40, args.seed)
    study.model = (model, tok)
    rows = []
    for index in range(args.first, min(args.last or len(cases), len(cases))):
        row = study(cases[index], index)
        rows.append(row)
        print(f"[{index}] {row['id']}: " + "  ".join(
            f"{k} {v[0]:.3f}" for k, v in row.items() if isinstance(v, list)), flush=True)
        if args.json:
            with args.json.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
    print(f"\n{len(rows)} needle items: LDS and CPU s per item (mean)")
    for key in [k for k, v in rows[0].items() if isinstance(v, list)]:
        print(f"{key:<52}{statistics.mean(r[key][0] for r in rows):>7.3f}"
              f"{statistics.mean(r[key][1] for r in rows):>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
