"""The contrast decides content, the with-context model decides form (issue 42).

Contrastive decoding (CAD, AdaCAD, COIECD, CoCoA) scores each next token by how much more
likely the context makes it. On function words that is the wrong question: after "The capital
city of Nepal" the no-context model is as sure of " is" as the with-context model, so the
contrast penalises " is", and a full stop, which the no-context model finds unlikely, wins:
the answer ends before the name ("The capital city of Nepal."). Inside a name the no-context
model has no idea how the context's city is spelt, so the contrast favours stray pieces
("Suhan Reap" for Siem Reap, "Kandeshtar" for Kandahar).

The guard splits each generation step in two:

- **ending and punctuation are the with-context model's call**: when its top token ends the
  answer (end of sequence, a newline) or is punctuation, that token is emitted; otherwise no
  such token is eligible, so a contrast can never end, or punctuate, an answer the model
  would have continued;
- **a word, once begun, is finished by the with-context model**: after a token that ends in a
  letter, the model's top token is emitted when it continues the word (starts with a letter);
  otherwise no word piece is eligible, so the contrast never splices a piece onto a finished
  word.

Everywhere else (the start of every word and every number's digits) the method's own scores
decide, within its plausibility constraint. So the contrast still chooses which name comes
(" Pok" over " Kathmandu"), but not whether an answer goes on or how a name is spelt.
Log-likelihood scoring teacher-forces the candidates and is not affected.
"""

from __future__ import annotations

import torch

from knowflow.evaluation.generate import StopTable


def guarded_argmax(z_ctx: torch.Tensor, scores: torch.Tensor, last: torch.Tensor,
                   table: StopTable) -> torch.Tensor:
    """Each live row's token, (live,), from the with-context logits `z_ctx` and the method's
    `scores` (both (live, vocab)) and each row's previous token `last` (live,; -1: none)."""
    device = scores.device
    stops = table.stops.to(device)                                  # (vocab,)
    piece, end = table.word_piece.to(device), table.word_end.to(device)
    top = z_ctx.argmax(-1)                                          # (live,)
    mid_word = (last >= 0) & end[last.clamp(min=0)]                 # (live,)
    own = stops[top] | (mid_word & piece[top])                      # (live,) the model's call
    blocked = stops[None, :] | (mid_word[:, None] & piece[None, :])  # (live, vocab)
    chosen = scores.masked_fill(blocked, float("-inf")).argmax(-1)  # (live,)
    return torch.where(own, top, chosen)
