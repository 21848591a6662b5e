"""Every candidate of a batch scored in the prompt's own forward pass (a "tree" batch).

Each row is the prompt (left-padded) followed by its candidates' tokens side by side:
`prompt | c1[:-1] | c2[:-1] | ...`. A 4D attention mask lets a candidate token see the
prompt and the earlier tokens of its own candidate only, and position ids restart at the
prompt's end for every candidate, so each candidate is scored exactly as if it were appended
to the prompt alone. This replaces the second, small forward pass over the candidates (on a CPU
that pass has so few rows that its matrix products run at half speed) with one larger pass.
`loglik._score_batch` checks it against the two-pass scorer once per model and falls back to
that if a model ignores custom 4D masks.
"""

from __future__ import annotations

import torch

from knowflow.evaluate.batching import Prefix, forward, left_pad
from knowflow.models.batching import model_device


def tree_layout(conts: list[list[list[int]]]
                ) -> tuple[list[list[int]], list[list[tuple[int, int]]], int]:
    """Per row the candidate tokens fed (each candidate without its last token), the
    [start, end) of each candidate's tokens in the candidate region, and that region's width."""
    fed, spans = [], []
    for cs in conts:
        row, where = [], []
        for c in cs:
            where.append((len(row), len(row) + len(c) - 1))
            row += c[:-1]
        fed.append(row)
        spans.append(where)
    return fed, spans, max(1, max(len(r) for r in fed))


def tree_mask(prompt_mask: torch.Tensor, spans: list[list[tuple[int, int]]], width: int,
              n_prefix: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask (batch, 1, queries, keys): 0 where a query may attend, the dtype's
    minimum elsewhere. Queries are the prompt (left-padded) then the candidate region; keys
    the shared prefix, the prompt and the candidate region. Every query sees itself, so a
    padding row never has an empty softmax (its output is never read)."""
    batch, lp = prompt_mask.shape
    q, k = lp + width, n_prefix + lp + width
    allow = torch.zeros((batch, q, k), dtype=torch.bool)
    allow[:, :, :n_prefix] = True
    real = prompt_mask.bool()                                            # (batch, lp)
    causal = torch.tril(torch.ones((lp, lp), dtype=torch.bool))
    allow[:, :lp, n_prefix:n_prefix + lp] = causal[None] & real[:, None, :]
    allow[:, lp:, n_prefix:n_prefix + lp] = real[:, None, :]             # candidates see it all
    for b, where in enumerate(spans):
        for start, end in where:
            seg = torch.tril(torch.ones((end - start, end - start), dtype=torch.bool))
            allow[b, lp + start:lp + end, n_prefix + lp + start:n_prefix + lp + end] = seg
    diag = torch.arange(q)
    allow[:, diag, n_prefix + diag] = True
    mask = torch.zeros((batch, 1, q, k), dtype=dtype)
    return mask.masked_fill(~allow[:, None], torch.finfo(dtype).min)


@torch.no_grad()
def score_batch_tree(model, prompts: list[list[int]], conts: list[list[list[int]]],
                     prefix: Prefix, pad_id: int) -> list[list[tuple[float, int]]]:
    """(summed log-probability, token count) of every candidate of every prompt, one pass."""
    device = model_device(model)
    n = prefix.length
    ids, pmask, pos = left_pad([p[n:] for p in prompts], pad_id, torch.device("cpu"))
    fed, spans, width = tree_layout(conts)
    lp = ids.shape[1]
    cand = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    cpos = torch.zeros((len(prompts), width), dtype=torch.long)
    for b, (row, where) in enumerate(zip(fed, spans, strict=True)):
        cand[b, :len(row)] = torch.tensor(row, dtype=torch.long)
        for start, end in where:
            cpos[b, start:end] = len(prompts[b]) + torch.arange(end - start)
    dtype = next(model.parameters()).dtype
    mask = tree_mask(pmask, spans, width, n, dtype if dtype.is_floating_point else torch.float32)
    logits, _ = forward(model, past=prefix.expand(len(prompts)),
                        input_ids=torch.cat([ids, cand], 1).to(device),
                        attention_mask=mask.to(device),
                        position_ids=torch.cat([pos + n, cpos], 1).to(device))
    logp = torch.log_softmax(logits[:, lp - 1:].float(), dim=-1)  # (batch, 1 + width, vocab)
    out = []
    for b, (cs, where) in enumerate(zip(conts, spans, strict=True)):
        row = []
        for c, (start, _) in zip(cs, where, strict=True):
            # c[0] from the prompt's last position; c[j] from candidate position start + j - 1
            at = [0] + [1 + start + j for j in range(len(c) - 1)]
            row.append((float(logp[b, at, c].sum()), len(c)))
        out.append(row)
    return out
