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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from knowflow.evaluation.closed_class import CLOSED_CLASS
from knowflow.lens.batching import pad_id as tokenizer_pad_id
from knowflow.lens.prefix import Prefix, forward
from knowflow.lens.prompt_batches import prefill, sorted_batches
from knowflow.store.run_folder import Progress


@dataclass(frozen=True)
class StopTable:
    eos: torch.Tensor          # (vocab,) bool: ends the answer
    newline: torch.Tensor      # (vocab,) bool: the token contains a newline
    text_first: torch.Tensor   # (vocab,) bool: non-blank text before the token's first newline
    blank: torch.Tensor        # (vocab,) bool: whitespace only (or nothing)
    punct: torch.Tensor        # (vocab,) bool: non-blank, no letter or digit (".", ",", ").")
    word_piece: torch.Tensor   # (vocab,) bool: starts with a letter (continues a word)
    word_end: torch.Tensor     # (vocab,) bool: ends with a letter (the word may go on)
    closed: torch.Tensor       # (vocab,) bool: a whole closed-class word ("The", " is")
    word: torch.Tensor         # (vocab,) long: one id per word text (stripped, lower case;
    #                            "The" and " the" share it), -1 for a token without a letter
    lower: torch.Tensor        # (vocab,) bool: has a letter and no capital (" seat", not "Paris")

    @property
    def stops(self) -> torch.Tensor:
        """(vocab,) bool: tokens that end or punctuate an answer (eos, newline, punctuation)."""
        return self.eos | self.newline | self.punct


def token_table(texts: Sequence[str], eos_ids: Sequence[int] = ()) -> StopTable:
    """The per-token flags of a vocabulary given as each token's decoded text."""
    eos = torch.zeros(len(texts), dtype=torch.bool)
    for i in eos_ids:
        if 0 <= i < len(texts):
            eos[i] = True

    def flags(test) -> torch.Tensor:
        return torch.tensor([bool(test(t)) for t in texts], dtype=torch.bool)

    return StopTable(
        eos=eos, newline=flags(lambda t: "\n" in t),
        text_first=flags(lambda t: t.split("\n", 1)[0].strip() != ""),
        blank=flags(lambda t: t.strip() == ""),
        punct=flags(lambda t: t.strip() != "" and not any(c.isalnum() for c in t)),
        word_piece=flags(lambda t: t[:1].isalpha()),
        word_end=flags(lambda t: t[-1:].isalpha()),
        closed=flags(lambda t: t.strip().lower() in CLOSED_CLASS), word=_word_ids(texts),
        lower=flags(lambda t: any(c.isalpha() for c in t) and t == t.lower()))


def _word_ids(texts: Sequence[str]) -> torch.Tensor:
    """(vocab,) long: the first token id of each token's stripped, lower-cased text; -1 for a
    token with no letter."""
    first: dict[str, int] = {}
    ids = [first.setdefault(t.strip().lower(), i) if any(c.isalpha() for c in t) else -1
           for i, t in enumerate(texts)]
    return torch.tensor(ids, dtype=torch.long)


def prompt_words(table: StopTable, prompts: Sequence[Sequence[int]],
                 with_context: Sequence[Sequence[int]] | None = None) -> torch.Tensor:
    """(rows, vocab) bool: the tokens that repeat, in any case, a lower-case word of each
    row's no-context prompt ("Seat" and " seat" both repeat " seat"), and, given each row's
    with-context prompt, the first token of a name the question and the context share: a
    word of a run of two or more capitalised words of the no-context prompt ("The Communist
    Manifesto") that the with-context prompt holds more often (its passage names it too;
    the instruction example's "France", alone and in both prompts once, is not one)."""
    out = torch.zeros(len(prompts), len(table.word), dtype=torch.bool)
    for row, ids in enumerate(prompts):
        ids_t = torch.tensor(list(ids), dtype=torch.long)
        words = table.word[ids_t[table.lower[ids_t]]].tolist()
        if with_context is not None:
            base = _words(table, ids)
            held, more = Counter(w for w, _ in base), Counter(w for w, _ in
                                                              _words(table, with_context[row]))
            words += [w[0] for k, (w, cap) in enumerate(base) if cap and more[w] > held[w]
                      and any(base[j][1] for j in (k - 1, k + 1) if 0 <= j < len(base))]
        found = torch.tensor([w for w in words if w >= 0], dtype=torch.long)
        out[row] = torch.isin(table.word, found)
    return out


def _words(table: StopTable, ids: Sequence[int]) -> list[tuple[tuple[int, ...], bool]]:
    """The words of a token sequence, each as its tokens' word ids (case set aside) and
    whether it is capitalised; a word is a token with a letter and the word pieces that
    continue it, and a token without a letter (".", " 1818") stands as a word of its own
    that is not capitalised, so it breaks a run of capitalised words."""
    words: list[tuple[list[int], bool]] = []
    for i, t in enumerate(ids):
        w = int(table.word[t])
        if words and i and w >= 0 and table.word_piece[t] and table.word_end[ids[i - 1]]:
            words[-1][0].append(w)
        else:
            words.append(([w], w >= 0 and not bool(table.lower[t])))
    return [(tuple(w), cap) for w, cap in words]


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
    # any special token (end of turn, a new turn) ends the answer
    table = token_table(texts, sorted({tokenizer.eos_token_id, *extra_eos,
                                       *tokenizer.all_special_ids} - {None}))
    with contextlib.suppress(TypeError):  # tokenizers that cannot be weakly referenced
        _TABLES[tokenizer] = (key, table)
    return table


def _eos_ids(model) -> list[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else list(eos)


class Stream:
    """One left-padded batch of prompts continuing from its own KV cache: `logits` (live,
    vocab) predict each live row's next token."""

    def __init__(self, model, seqs: list[list[int]], prefix: Prefix, pad_id: int):
        self.model = model
        self.logits, self.past, self.mask, self.pos = prefill(model, seqs, prefix, pad_id)

    def keep(self, rows: torch.Tensor) -> None:                       # rows: (still live,)
        self.past.batch_select_indices(rows)
        self.mask, self.pos = self.mask[rows], self.pos[rows]

    def advance(self, token: torch.Tensor) -> None:                   # token: (live,)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(token), 1)], dim=1)
        logits, self.past = forward(self.model, past=self.past, last_only=True,
                                    input_ids=token[:, None], attention_mask=self.mask,
                                    position_ids=self.pos)
        self.logits = logits[:, -1]                                   # (live, vocab)
        self.pos = self.pos + 1                                       # (live, 1)


@torch.no_grad()
def decode(streams: Sequence[Stream], pick: Callable[..., torch.Tensor], max_new_tokens: int,
           table: StopTable) -> list[list[int]]:
    """The one step loop: each step `pick(*logits, last, rows)` chooses every live row's token
    from the streams' next-token logits (greedy: one stream's argmax; contrastive methods: a
    combination of the with- and without-context streams), `last`, each live row's
    previous answer token (-1 before the first), and `rows`, each live row's index in the
    batch; a row stops at end-of-sequence or at a newline after some text, and leaves every
    stream's batch."""
    device = streams[0].logits.device
    eos, newline = table.eos.to(device), table.newline.to(device)
    text_first, blank = table.text_first.to(device), table.blank.to(device)
    n = len(streams[0].logits)
    rows = torch.arange(n, device=device)                      # original row of each live row
    has_text = torch.zeros(n, dtype=torch.bool, device=device)
    last = torch.full((n,), -1, dtype=torch.long, device=device)
    out: list[list[int]] = [[] for _ in range(n)]
    for step in range(max_new_tokens):
        token = pick(*(s.logits for s in streams), last, rows)  # (live,)
        ends = eos[token]
        stop = ends | (newline[token] & (has_text | text_first[token]))
        for r, t, e in zip(rows.tolist(), token.tolist(), ends.tolist(), strict=True):
            if not e:
                out[r].append(t)
        has_text = has_text | ~blank[token]
        keep = (~stop).nonzero().squeeze(-1)                    # (still live,)
        if keep.numel() == 0 or step == max_new_tokens - 1:
            break
        if keep.numel() < len(rows):                            # early stop: drop finished rows
            for stream in streams:
                stream.keep(keep)
            rows, has_text, token = rows[keep], has_text[keep], token[keep]
        last = token
        for stream in streams:
            stream.advance(token)
    return out


def greedy(logits: torch.Tensor, last: torch.Tensor | None = None,
           rows: torch.Tensor | None = None) -> torch.Tensor:
    return logits.argmax(-1)                                    # (live, vocab) -> (live,)


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
        outs = decode([Stream(model, [list(seqs[i]) for i in batch], prefix, pad_id)], greedy,
                      max_new_tokens, table)
        for i, toks in zip(batch, outs, strict=True):
            texts[i] = clean_output(tokenizer.decode(toks, skip_special_tokens=True))
        done += len(batch)
        if progress is not None:
            progress(done, len(seqs), stage)
    return texts
