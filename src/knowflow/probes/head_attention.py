"""Where the ranked heads look: the attention pattern of the strongest context and memory
heads on one example item, from the answer position over every prompt token.

The heads probe ranks heads by what removing them does; this shows, for the first item the
sweep scored, what those heads read. A context head that carries the context's answer should
attend to the context's tokens (often the counterfactual answer itself); a memory head to
the subject or the question. The pattern is the softmax row of the answer position (the last
prompt token, after the answers' shared first tokens), captured in one forward pass by the
same interception the knockout uses (`probes.intercept`), so it is what the model computes,
not a re-derivation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from knowflow.data.facts import ConflictItem
from knowflow.lens.arch import arch_of
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.batching import model_device
from knowflow.probes.heads import conflict_prompt

PER_SIDE = 3  # heads shown per side (context, memory)


@torch.no_grad()
def answer_attention(model, ids: Sequence[int]) -> torch.Tensor:
    """Attention probabilities from the last position of `ids` to every position, per layer
    and head: (layers, heads, seq)."""
    n_layers = arch_of(model).n_layers
    with intercepted(model) as layer_of:
        x = torch.tensor([list(ids)], device=model_device(model))        # (1, seq)
        plan = AttentionPlan(capture=frozenset(range(n_layers)),
                             capture_rows=torch.tensor([x.shape[1] - 1]), layer_of=layer_of)
        model(input_ids=x, knowflow_plan=plan, logits_to_keep=1)
        return torch.stack([plan.captured[layer][0] for layer in range(n_layers)]).float().cpu()


def example_attention(model, tokenizer, items: Sequence[ConflictItem], summary: dict,
                      prompt_format: str, per_side: int = PER_SIDE) -> dict | None:
    """The top `per_side` context and memory heads of `summary` (the heads probe's, ranked
    by its `rank_by` ablation) on the first item with two answers that differ in a token:
    `{"example", "question", "tokens", "context", "heads": [{"layer", "head", "side",
    "effect", "weights", "context_mass"}]}`; None when no head was ranked."""
    ranked = [("context", c) for c in summary.get("context_heads", [])[:per_side]] + \
             [("memory", c) for c in summary.get("memory_heads", [])[:per_side]]
    prompt = next((p for p in (conflict_prompt(it, tokenizer, prompt_format) for it in items)
                   if p is not None), None)
    if not ranked or prompt is None:
        return None
    item = next(it for it in items if it.id == prompt.id)
    weights = answer_attention(model, prompt.ids)                      # (layers, heads, seq)
    ctx = list(prompt.context)
    return {"example": prompt.id, "question": item.question,
            "tokens": [tokenizer.decode([t]) for t in prompt.ids], "context": ctx,
            "heads": [{"layer": c["layer"], "head": c["head"], "side": side,
                       "effect": c["effect"],
                       "weights": [round(float(w), 5) for w in weights[c["layer"], c["head"]]],
                       "context_mass": float(weights[c["layer"], c["head"], ctx].sum())}
                      for side, c in ranked]}
