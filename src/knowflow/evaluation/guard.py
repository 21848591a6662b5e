"""The contrast decides content the context argues for; the model decides the rest.

Contrastive decoding (CAD, AdaCAD, COIECD, CoCoA) scores each next token by how much more
likely the context makes it. On function words that is the wrong question: after "The capital
city of Nepal" the no-context model is as sure of " is" as the with-context model, so the
contrast penalises " is", and a full stop, which the no-context model finds unlikely, wins:
the answer ends before the name ("The capital city of Nepal."). Inside a name the no-context
model has no idea how the context's city is spelt, so the contrast favours stray pieces
("Suhan Reap" for Siem Reap, "Kandeshtar" for Kandahar).

The guard leaves each generation step to the with-context model (its top token is emitted)
in six cases, and otherwise lets the method's own scores choose, within its plausibility
constraint, among the tokens none of the rules reserves and that start a passage word (the
last rule below):

- **ending, punctuation and bare spaces**: its top token ends the answer (end of sequence, a
  newline), is punctuation or is whitespace only; such tokens are never the contrast's to
  pick, so a contrast can never end, or punctuate, an answer the model would have continued,
  nor split the next word with a bare space (" " then "1": "The 1980s." for a singer);
- **the rest of a begun word**: after a token that ends in a letter, its top token continues
  the word; otherwise no word piece is eligible, so the contrast never splices a piece onto a
  finished word;
- **closed-class words** (articles, auxiliaries, pronouns, prepositions, conjunctions:
  `closed_class.py`): its top token is one, or the contrast would pick one. The no-context
  model is usually surer of a sentence's frame ("The capital city of ...") than the
  with-context model, so the contrast prefers any piece the context lifts over "The" and
  starts a word the model never planned ("B" -> "Bahia, Bahia, ..." for Belize City);
- **a token the context supports**: its top token is at least as likely with the context as
  without it, `p(top|c,x) >= p(top|x)`. The contrast exists to overrule what the model says
  *against* its context; a token the context makes likelier needs no correction, and
  overruling it only swerves the sentence to a tail token the context lifts further ("The
  capital city of Canada is also Paris." where the model says Toronto);
- **a lower-case word of the question**: its top token repeats, in any case, a lower-case
  word of the no-context prompt (the question and its instruction: "Seat" repeats " seat"),
  or the contrast would pick one. The no-context model has nothing but the question, so it
  copies the question's words more readily than the with-context model does, and the
  contrast turns that into a preference for any other word the context lifts: asked "Which
  city is the seat of government of Finland?", the model's "The seat of government of
  Finland is Tampere." became "The city of Paris serves as the seat of the Finnish
  government, ..." under CAD. That preference says nothing about the context against
  memory. Capitalised words stay the contrast's: they are names, often the instruction's
  example ("for example: The capital city of France is Paris."), and overruling the model's
  copy of the example ("The capital city of France is Paris." asked about Kiribati) is what
  the contrast is for;
- **a name the question and the context share**: its top token repeats a capitalised word of
  the no-context prompt that the with-context prompt holds more often, i.e. one the context
  names too, or the contrast would pick one. Such a word is the item's own topic (asked "Who
  co-wrote The Communist Manifesto?" over a passage that names the Manifesto), not the
  instruction's example, which the context does not repeat; copying it is again the
  no-context model's habit, and COIECD turned "The Communist Manifesto was written by
  Archimedes." into "The Chinese-German philosopher and mathematician.". The memorized
  answer is not such a word: a question does not hold its own answer.

**Only a passage word's first piece is the contrast's.** Where the contrast does decide, a
token with a letter is eligible only if it starts a word of the passage as the tokenizer
starts it (with or without a leading space, the first letter in either case; the passage is
what the with-context prompt holds more often than the no-context one), or is the model's
top token. The contrast's evidence is the passage: between two words neither of which it
holds, the contrast's preference says only which one the no-context model expects more
(asked who sang "Happy Birthday, Mr. President", the model's 'The song ... was sung by Anne
Frank.' became 'The answer is: "John F. Kennedy"' because the no-context model is surer of
" song" than of " answer"). And a shorter piece than the tokenizer's ("F" where it starts
"Francistown" with "Franc") begins the context's name at a split the model has not seen, so
the model, which spells the rest, has no name to continue ("Fantekwel is the capital of
Botswana.").

So the contrast acts only where the with-context model's choice is one the context argues
against: at the memorized name (" Kathmandu" is likelier without the passage) it still picks
the context's name (" Pok"), but it never decides whether an answer goes on, its form words,
or how a name is spelt. Log-likelihood scoring teacher-forces the candidates and is not
affected.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import torch

from knowflow.evaluation.generate import StopTable


def passage_starts(tokenizer, prompts: Sequence[Sequence[int]],
                   base_prompts: Sequence[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """(rows, vocab) bool: the tokens that start a word of each row's passage the way the
    tokenizer starts it, with or without a leading space and with its first letter in either
    case. A passage word is a word the with-context prompt holds more often than the
    no-context one (whitespace-separated, edge punctuation stripped; hyphenated parts count
    as words too), so the instruction's example and the chat template are not passage words."""
    out = torch.zeros(len(prompts), vocab_size, dtype=torch.bool)
    first: dict[str, int | None] = {}

    def start(form: str) -> int | None:
        if form not in first:
            ids = tokenizer.encode(form, add_special_tokens=False)
            first[form] = ids[0] if ids and ids[0] < vocab_size else None
        return first[form]

    for row, (ctx, base) in enumerate(zip(prompts, base_prompts, strict=True)):
        held = Counter(_text_words(tokenizer.decode(list(base))))
        for word, n in Counter(_text_words(tokenizer.decode(list(ctx)))).items():
            if n <= held[word]:
                continue
            for w in {word, word[0].upper() + word[1:], word[0].lower() + word[1:]}:
                for form in (w, " " + w):
                    if (t := start(form)) is not None:
                        out[row, t] = True
    return out


def _text_words(text: str) -> list[str]:
    """The words of a text: whitespace-separated chunks without their edge punctuation, and
    the parts of a hyphenated one; each starts with a letter."""
    out = []
    for chunk in text.split():
        word = _EDGES.sub("", chunk)
        out += [w for w in {word, *_HYPHENS.split(word)} if w[:1].isalpha()]
    return out


_EDGES = re.compile(r"^[\W_]+|[\W_]+$")
_HYPHENS = re.compile(r"[-\u2010-\u2014]")


def guarded_argmax(z_ctx: torch.Tensor, z_base: torch.Tensor, scores: torch.Tensor,
                   last: torch.Tensor, table: StopTable, copies: torch.Tensor | None = None,
                   starts: torch.Tensor | None = None) -> torch.Tensor:
    """Each live row's token, (live,), from the with-context and no-context logits `z_ctx`,
    `z_base`, the method's `scores` (all (live, vocab)), each row's previous token `last`
    (live,; -1: none), `copies` (live, vocab), the tokens that repeat a lower-case word of
    each row's no-context prompt or a capitalised one its context repeats
    (`generate.prompt_words`; None: no prompt known), and `starts` (live, vocab), the tokens
    that start a word of each row's passage (`passage_starts`; None: no passage known)."""
    device = scores.device
    form = (table.stops | table.blank | table.closed).to(device)    # (vocab,)
    piece, end = table.word_piece.to(device), table.word_end.to(device)
    top = z_ctx.argmax(-1)                                          # (live,)
    mid_word = (last >= 0) & end[last.clamp(min=0)]                 # (live,)
    lp = torch.log_softmax(z_ctx.float(), -1).gather(-1, top[:, None])[:, 0]    # (live,)
    lq = torch.log_softmax(z_base.float(), -1).gather(-1, top[:, None])[:, 0]   # (live,)
    own = form[top] | (mid_word & piece[top]) | (lp >= lq)          # (live,) the model's call
    blocked = form[None, :] | (mid_word[:, None] & piece[None, :])  # (live, vocab)
    if copies is not None:
        copies = copies.to(device)                                  # (live, vocab)
        own = own | copies.gather(-1, top[:, None])[:, 0]
        blocked = blocked | copies
    if starts is not None:  # a token with a letter must start a passage word, or be the top
        foreign = (table.word >= 0).to(device)[None, :] & ~starts.to(device)  # (live, vocab)
        foreign = foreign.scatter(-1, top[:, None], False)
        blocked = blocked | foreign
    chosen = scores.masked_fill(blocked, float("-inf")).argmax(-1)  # (live,)
    return torch.where(own, top, chosen)
