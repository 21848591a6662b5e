"""Mechanism of one answer: attention knockout from the answer positions (Geva et al. 2023).

Per layer (a window of `window` layers centred on it), the answer positions (the last prompt
token and the answer's tokens but its last, the positions that predict the answer's tokens)
are stopped from attending to the whole context, or to the top sentence only; the effect is
the change in the answer's teacher-forced log-probability. Then the heads that attend most to
the top sentence (from the one-pass attention) are knocked out one at a time, each in its own
layer only.

This is the attention-edge knockout of `knowflow probe knockout` (`probes.knockout.cut_scores`:
a plan that blocks different edges in different batch rows, heads and layers), run from the
answer's positions. Only edges from those positions are cut, so the prompt up to its last
token computes what the unmodified model computes: it runs once, and every variant continues
from a copy of its KV cache with the answer positions alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from knowflow.lens.arch import arch_of
from knowflow.lens.attention import intercepted
from knowflow.probes.common import window
from knowflow.probes.knockout import Cut, cut_scores


def answer_logprobs(model, prompt_ids: list[int], answer_ids: list[int], cuts: Sequence[Cut],
                    batch_size: int = 32) -> torch.Tensor:
    """The answer's summed log-probability after the prompt under each cut: (cuts,) float64.
    A cut with no keys is the unmodified model."""
    start = len(prompt_ids) - 1                         # the first answer position
    ids = (prompt_ids + answer_ids)[:start + len(answer_ids)]  # the answer positions' inputs
    targets = torch.tensor(answer_ids)                  # (q_len,)

    def logprob(logits: torch.Tensor) -> torch.Tensor:  # (n, q_len, vocab)
        logp = torch.log_softmax(logits.float(), dim=-1)
        at = targets.to(logp.device).expand(len(logp), -1)[..., None]      # (n, q_len, 1)
        return logp.gather(-1, at)[..., 0].sum(-1).double().cpu()          # (n,)

    with intercepted(model) as layer_of:
        return cut_scores(model, ids, start, cuts, logprob, layer_of, batch_size)


def mechanism(model, prompt_ids: list[int], answer_ids: list[int], context_keys: list[int],
              top_keys: list[int], head_mass: torch.Tensor, window_size: int, n_heads: int,
              batch_size: int = 32) -> dict:
    """Per-layer knockout effects (context, top sentence) and the top heads' effects;
    `head_mass` (layers, heads) is each head's attention to the top sentence."""
    arch = arch_of(model)
    size = min(window_size, arch.n_layers)
    spans = [window(centre, size, arch.n_layers) for centre in range(arch.n_layers)]
    layer_sets = [tuple(range(lo, hi + 1)) for lo, hi in spans]
    flat = head_mass.flatten()
    order = flat.argsort(descending=True)[:min(n_heads, len(flat))].tolist()
    heads = [(i // arch.n_heads, i % arch.n_heads) for i in order]
    cuts = [Cut((), ())]
    cuts += [Cut(ls, tuple(context_keys)) for ls in layer_sets]
    cuts += [Cut(ls, tuple(top_keys)) for ls in layer_sets]
    cuts += [Cut((layer,), tuple(top_keys), (head,)) for layer, head in heads]
    lps = answer_logprobs(model, prompt_ids, answer_ids, cuts, batch_size)
    base = float(lps[0])
    n = arch.n_layers
    return {
        "logprob": base, "window": size,
        "layers": [{"layer": layer, "context": float(lps[1 + layer]) - base,
                    "top_sentence": float(lps[1 + n + layer]) - base}
                   for layer in range(n)],
        "heads": [{"layer": layer, "head": head, "attention": float(head_mass[layer, head]),
                   "effect": float(lps[1 + 2 * n + i]) - base}
                  for i, (layer, head) in enumerate(heads)]}
