"""Every candidate of a batch scored in the prompt's own forward pass (a "tree" batch).

Each row is one prompt followed by its candidates' tokens side by side, the whole row
right-aligned (padding on the left): `pad | prompt | c1[:-1] | c2[:-1] | ...`. A 4D attention
mask lets a candidate token see the prompt and the earlier tokens of its own candidate only,
and position ids restart at the prompt's end for every candidate, so each candidate is scored
exactly as if it were appended to the prompt alone. Because the candidates sit at the end of
every row, the vocabulary projection runs for the last `1 + longest candidate region`
positions only (`logits_to_keep`), not for the prompt, and rows sorted by their whole length
(`tree_length`) carry little padding. `loglik._score_batch` checks this pass against the
two-pass scorer once per model and falls back to that if a model ignores custom 4D masks.
"""

from __future__ import annotations

import torch

from knowflow.evaluate.batching import Prefix, forward
from knowflow.models.batching import model_device


def tree_length(prompt: list[int], conts: list[list[int]]) -> int:
    """Tokens of one tree row: the prompt and every candidate but its last token."""
    return len(prompt) + sum(len(c) - 1 for c in conts)


def tree_layout(conts: list[list[list[int]]]
                ) -> tuple[list[list[int]], list[list[tuple[int, int]]], int]:
    """Per row the candidate tokens fed (each candidate without its last token), the
    [start, end) of each candidate's tokens in the candidate region, and the widest region."""
    fed, spans = [], []
    for cs in conts:
        row, where = [], []
        for c in cs:
            where.append((len(row), len(row) + len(c) - 1))
            row += c[:-1]
        fed.append(row)
        spans.append(where)
    return fed, spans, max(len(r) for r in fed)


def tree_mask(prompt_lens: list[int], spans: list[list[tuple[int, int]]], fed_lens: list[int],
              width: int, n_prefix: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask (batch, 1, width, n_prefix + width): 0 where a query may attend, the
    dtype's minimum elsewhere. Row b holds `width - prompt - fed` padding tokens, then its
    prompt, then its candidate region; keys are the shared prefix and the row itself. Every
    query sees itself, so a padding query never has an empty softmax (its output is unread)."""
    batch = len(prompt_lens)
    allow = torch.zeros((batch, width, n_prefix + width), dtype=torch.bool)
    allow[:, :, :n_prefix] = True
    causal = torch.tril(torch.ones((width, width), dtype=torch.bool))
    for b, (lp, lf, where) in enumerate(zip(prompt_lens, fed_lens, spans, strict=True)):
        p0 = width - lp - lf                                 # the prompt's first position
        c0 = width - lf                                      # the candidate region's first
        allow[b, p0:c0, n_prefix + p0:n_prefix + c0] = causal[:lp, :lp]
        allow[b, c0:, n_prefix + p0:n_prefix + c0] = True    # candidates see all the prompt
        for start, end in where:
            seg = causal[:end - start, :end - start]
            allow[b, c0 + start:c0 + end, n_prefix + c0 + start:n_prefix + c0 + end] = seg
    diag = torch.arange(width)
    allow[:, diag, n_prefix + diag] = True
    mask = torch.zeros((batch, 1, width, n_prefix + width), dtype=dtype)
    return mask.masked_fill(~allow[:, None], torch.finfo(dtype).min)


@torch.no_grad()
def score_batch_tree(model, prompts: list[list[int]], conts: list[list[list[int]]],
                     prefix: Prefix, pad_id: int) -> list[list[tuple[float, int]]]:
    """(summed log-probability, token count) of every candidate of every prompt, one pass."""
    device = model_device(model)
    n = prefix.length
    fed, spans, widest = tree_layout(conts)
    lens = [len(p) - n for p in prompts]
    width = max(lp + len(f) for lp, f in zip(lens, fed, strict=True))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)       # (batch, width)
    pos = torch.zeros((len(prompts), width), dtype=torch.long)
    for b, (p, row, where) in enumerate(zip(prompts, fed, spans, strict=True)):
        c0 = width - len(row)
        ids[b, c0 - lens[b]:] = torch.tensor(list(p[n:]) + row, dtype=torch.long)
        pos[b, c0 - lens[b]:c0] = torch.arange(n, len(p))
        for start, end in where:
            pos[b, c0 + start:c0 + end] = len(p) + torch.arange(end - start)
    dtype = next(model.parameters()).dtype
    mask = tree_mask(lens, spans, [len(r) for r in fed], width, n,
                     dtype if dtype.is_floating_point else torch.float32)
    keep = widest + 1                     # the prompts' last positions and every candidate's
    logits, _ = forward(model, past=prefix.expand(len(prompts)), keep=keep,
                        input_ids=ids.to(device), attention_mask=mask.to(device),
                        position_ids=pos.to(device))
    logp = torch.log_softmax(logits.float(), dim=-1)                    # (batch, keep, vocab)
    out = []
    for b, (cs, where) in enumerate(zip(conts, spans, strict=True)):
        last = keep - len(fed[b]) - 1                     # the prompt's last position in logp
        row = []
        for c, (start, _) in zip(cs, where, strict=True):
            # c[0] from the prompt's last position; c[j] from candidate position start + j - 1
            at = [last] + [last + 1 + start + j for j in range(len(c) - 1)]
            row.append((float(logp[b, at, c].sum()), len(c)))
        out.append(row)
    return out
