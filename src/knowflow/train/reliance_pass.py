"""One forward pass per prompt for the reliance tracker: log-likelihood choice and attention mass.

The tracker needs, per item, which of the two answers is likelier after the prompt and how
much attention the answer position (the prompt's last token) pays to the context. Both come
from the prompt's forward pass: the log-likelihood scorer (`lens.scorer`) runs each batch
of prompts once on the shared-prefix KV cache, and here that same pass carries an
`AttentionPlan` (`probes.intercept`) that captures the last query row's attention
probabilities in every layer (through the model's eager attention, since SDPA does not return
them). A second, attention-only pass over the prompts (what `probes.mass.attention_mass`
does on its own) is not needed.

Key positions: a batch's keys are the shared prefix, then each prompt left-padded, so the j-th
real token of row r sits at the j-th nonzero entry of its attention mask.
"""

from __future__ import annotations

import torch

from knowflow.data.facts import ConflictItem
from knowflow.evaluation.items import choice, render_prompts, scored_answers
from knowflow.evaluation.options import EvalConfig
from knowflow.lens.arch import arch_of
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.scorer import score_continuations
from knowflow.probes.examples import ProbeExample, find_text
from knowflow.probes.mass import span_mass
from knowflow.probes.spans import locate


def context_positions(tokenizer, prompt: str, seq: list[int], context: str | None
                      ) -> list[int] | None:
    """Token positions of `context` inside the tokenized `prompt` (`seq`); None when the
    prompt holds no context or its offsets tokenize differently from `seq`."""
    span = find_text(prompt, context) if context else None
    if span is None:
        return None
    located = locate(tokenizer, ProbeExample(prompt, context=span))
    ids = list(located.input_ids)
    shift = len(ids) - len(seq)  # e.g. a BOS token the offsets call added
    if shift < 0 or ids[shift:] != list(seq) or not located.context:
        return None
    return [p - shift for p in located.context if p >= shift]


def loglik_and_attention(model, tokenizer, items: list[ConflictItem], cfg: EvalConfig
                         ) -> tuple[list[dict], list[list[float] | None]]:
    """(records with `prompt` and `loglik.choice`, per-item attention mass on the context
    by layer (mean over heads), None for an item without a context in its prompt)."""
    prompts, seqs = render_prompts(items, tokenizer, cfg, cfg.use_context)
    ctx = [context_positions(tokenizer, p.text, s, it.context)
           for p, s, it in zip(prompts, seqs, items, strict=True)]
    n_layers = arch_of(model).n_layers
    masses: list[list[float] | None] = [None] * len(items)

    def extra_for(batch: list[int]):
        def extra(mask: torch.Tensor) -> dict:  # mask: (batch, prefix + seq)
            plan = AttentionPlan(capture=frozenset(range(n_layers)),
                                 capture_rows=torch.full((len(batch),), -1), layer_of=layer_of)
            plans.append((batch, mask, plan))
            return {"knowflow_plan": plan}
        return extra

    plans: list = []
    with intercepted(model) as layer_of:
        scores = score_continuations(model, tokenizer, seqs, scored_answers(items, prompts),
                                     batch_size=cfg.batch_size, share_prefix=cfg.share_prefix,
                                     prefill_extra=extra_for)
    for batch, mask, plan in plans:
        weights = torch.stack([plan.captured[layer] for layer in range(n_layers)],
                              dim=1).cpu()  # (batch, layers, heads, keys)
        mask = mask.cpu()
        for row, item in enumerate(batch):
            if ctx[item] is None:
                continue
            keys = mask[row].nonzero().squeeze(-1)[ctx[item]]  # context tokens' key indices
            mass = span_mass(weights[row], keys)  # (layers, heads)
            masses[item] = mass.mean(-1).tolist()
    records = [{"prompt": p.text, "loglik": {"counterfactual_logprob": cf,
                                             "parametric_logprob": par,
                                             "choice": choice(cf, par)}}
               for p, ((cf, _), (par, _)) in zip(prompts, scores, strict=True)]
    return records, masses
