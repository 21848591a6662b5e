"""Batched greedy generation of short answers.

Greedy decoding with a KV cache, written out (rather than `model.generate`) so that batching
cannot change an answer: prompts are left-padded with an attention mask and position ids that
count real tokens only, so a batched row sees exactly what it would see alone. A row stops at
end-of-sequence or at the first newline after some text; finished rows leave the batch (their
cache rows are dropped), and the batch ends when every row has stopped or after
`max_new_tokens`. Prompts are sorted by length so batches carry little padding.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.evaluate.batching import (
    Prefix,
    forward,
    prefill,
    sorted_batches,
)
from knowflow.models.batching import pad_id as tokenizer_pad_id
from knowflow.runs import Progress


@dataclass(frozen=True)
class StopTable:
    eos: torch.Tensor          # (vocab,) bool: ends the answer
    newline: torch.Tensor      # (vocab,) bool: the token contains a newline
    text_first: torch.Tensor   # (vocab,) bool: non-blank text before the token's first newline
    blank: torch.Tensor        # (vocab,) bool: whitespace only (or nothing)


_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def stop_table(tokenizer, vocab_size: int, extra_eos: Sequence[int] = ()) -> StopTable:
    """Per-token stop flags, computed once per tokenizer."""
    key = (vocab_size, tuple(extra_eos))
    try:
        cached = _TABLES.get(tokenizer)
    except TypeError:
        cached = None
    if cached is not None and cached[0] == key:
        return cached[1]
    n = min(len(tokenizer), vocab_size)
    texts = tokenizer.batch_decode([[i] for i in range(n)]) + [""] * (vocab_size - n)
    eos = torch.zeros(vocab_size, dtype=torch.bool)
    for i in {tokenizer.eos_token_id, *extra_eos, *tokenizer.all_special_ids} - {None}:
        if 0 <= i < vocab_size:  # any special token (end of turn, a new turn) ends the answer
            eos[i] = True
    table = StopTable(
        eos=eos,
        newline=torch.tensor(["\n" in t for t in texts]),
        text_first=torch.tensor([t.split("\n", 1)[0].strip() != "" for t in texts]),
        blank=torch.tensor([t.strip() == "" for t in texts]))
    with contextlib.suppress(TypeError):  # tokenizers that cannot be weakly referenced
        _TABLES[tokenizer] = (key, table)
    return table


def _eos_ids(model) -> list[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else list(eos)


@torch.no_grad()
def _generate_batch(model, seqs: list[list[int]], prefix: Prefix, pad_id: int,
                    max_new_tokens: int, table: StopTable) -> list[list[int]]:
    logits, past, mask, pos = prefill(model, seqs, prefix, pad_id)   # (batch, vocab), ...
    device = logits.device
    eos, newline = table.eos.to(device), table.newline.to(device)
    text_first, blank = table.text_first.to(device), table.blank.to(device)
    rows = torch.arange(len(seqs), device=device)              # original row of each live row
    has_text = torch.zeros(len(seqs), dtype=torch.bool, device=device)
    out: list[list[int]] = [[] for _ in seqs]
    for step in range(max_new_tokens):
        token = logits.argmax(-1)                               # (live,)
        stop = eos[token] | (newline[token] & (has_text | text_first[token]))
        for r, t, s in zip(rows.tolist(), token.tolist(), eos[token].tolist(), strict=True):
            if not s:
                out[r].append(t)
        has_text = has_text | ~blank[token]
        keep = (~stop).nonzero().squeeze(-1)                    # (still live,)
        if keep.numel() == 0 or step == max_new_tokens - 1:
            break
        if keep.numel() < len(rows):                            # early stop: drop finished rows
            past.batch_select_indices(keep)
            rows, mask, has_text = rows[keep], mask[keep], has_text[keep]
            token, pos = token[keep], pos[keep]
        mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)   # (live, seq + 1)
        step_logits, past = forward(model, past=past, last_only=True, input_ids=token[:, None],
                                    attention_mask=mask, position_ids=pos)
        logits = step_logits[:, -1]                             # (live, vocab)
        pos = pos + 1                                           # (live, 1)
    return out


def clean_output(text: str) -> str:
    """The answer line: leading blank lines dropped, cut at the first newline."""
    return text.strip().split("\n", 1)[0].strip()


def generate(model, tokenizer, seqs: Sequence[list[int]], batch_size: int = 16,
             max_new_tokens: int = 24, progress: Progress | None = None,
             stage: str = "generate", share_prefix: bool = True) -> list[str]:
    """Greedy answers for pre-tokenized prompts `seqs`, in input order. With `share_prefix`,
    the tokens every prompt starts with are run once (see `batching.Prefix`)."""
    prefix = Prefix.build(model, seqs, share=share_prefix)
    table = stop_table(tokenizer, model.get_output_embeddings().weight.shape[0], _eos_ids(model))
    pad_id = tokenizer_pad_id(tokenizer)
    texts: list[str] = [""] * len(seqs)
    done = 0
    for batch in sorted_batches([len(s) for s in seqs], batch_size):
        outs = _generate_batch(model, [list(seqs[i]) for i in batch], prefix, pad_id,
                               max_new_tokens, table)
        for i, toks in zip(batch, outs, strict=True):
            texts[i] = clean_output(tokenizer.decode(toks, skip_special_tokens=True))
        done += len(batch)
        if progress is not None:
            progress(done, len(seqs), stage)
    return texts
