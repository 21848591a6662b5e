"""The sweep that the intervention probes (attention-edge knockout, sublayer knockout) share.

For each example the model gets right, one intervention per (what, where, window of layers)
is applied and the probability of the model's own prediction is compared with the unmodified
model's: the record's `rel_change` is (p - p_base) / p_base. A probe supplies only its
interventions (`variants`) and how to run a batch of them (`probs`); the sweep picks the
examples, runs the unmodified model first, writes the records and reports progress. The
summary is the same for every such probe: per group, the mean relative change per layer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from knowflow.probes.common import recall_examples
from knowflow.probes.examples import ProbeExample
from knowflow.probes.spans import Located
from knowflow.store.run_folder import Progress

log = logging.getLogger(__name__)

# (fields the record carries, the intervention the probe runs)
Keyed = tuple[dict[str, Any], Any]


def sweep(model, tokenizer, examples: Sequence[ProbeExample], known_only: bool, probe: str,
          base: Any, variants: Callable[[Located], list[Keyed]],
          probs: Callable[[Located, int, list[Any]], torch.Tensor],
          progress: Progress | None = None, predict_batch: int = 16) -> list[dict]:
    """One record per (example, variant). `base` is the intervention that changes nothing;
    `probs(loc, target, interventions)` gives the probability of token `target` at the last
    position under each intervention: (len(interventions),). `predict_batch`: prompts per
    pass of the unmodified model's prediction."""
    located, preds, chosen = recall_examples(model, tokenizer, examples, known_only, probe,
                                             predict_batch)
    log.info("%s: %d of %d examples kept", probe, len(chosen), len(examples))
    records: list[dict] = []
    for done, i in enumerate(chosen):
        ex, loc, pred = examples[i], located[i], preds[i]
        keyed = variants(loc)
        p_all = probs(loc, pred.token_id, [base] + [v for _, v in keyed]).tolist()
        p_base = p_all[0]
        for (fields, _), p in zip(keyed, p_all[1:], strict=True):
            records.append({
                "example": ex.id or str(i), "prompt": ex.prompt, "subject": ex.subject,
                "prediction": pred.text, "known": pred.known, **fields, "p_base": p_base,
                "p": p, "rel_change": (p - p_base) / p_base if p_base > 0 else 0.0})
        if progress:
            progress(done + 1, len(chosen))
    return records


def layer_curves(records: Sequence[dict], group: Callable[[dict], str],
                 n_layers: int | None = None) -> dict:
    """Per group of records: the mean relative change per layer (window centre) and the layer
    where it is most negative."""
    n_layers = n_layers or (max((r["layer"] for r in records), default=-1) + 1)
    summary: dict[str, dict] = {}
    for name in dict.fromkeys(group(r) for r in records):
        rows = [r for r in records if group(r) == name]
        curve: list[float | None] = []
        for layer in range(n_layers):
            vals = [r["rel_change"] for r in rows if r["layer"] == layer]
            curve.append(sum(vals) / len(vals) if vals else None)
        valid = [(v, layer) for layer, v in enumerate(curve) if v is not None]
        worst = min(valid) if valid else (None, None)
        summary[name] = {"mean_rel_change": curve, "most_negative_layer": worst[1],
                         "most_negative_value": worst[0],
                         "n_examples": len({r["example"] for r in rows})}
    return summary
