"""Token positions of the subject, the relation and the context in a tokenized prompt.

Character spans come from the example; token spans from the tokenizer's offset mapping. A
token belongs to a span when one of its non-whitespace characters lies inside it, so a
leading-space token (" France") belongs to the subject "France", a subject split into several
tokens gets all of them, and special tokens (a BOS the tokenizer adds) belong to no span.
Tokenizers without offsets fall back to decoding growing prefixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from knowflow.errors import KnowflowError
from knowflow.probes.examples import ProbeExample, find_text

# The source sets a knockout can block (besides explicit "pos:i,j,..." lists).
SOURCE_NAMES = ("subject", "non_subject", "last", "relation", "subject_first", "subject_last",
                "first", "context", "all_but_last")


@dataclass(frozen=True)
class Located:
    """A tokenized prompt with the token positions of its parts."""

    input_ids: tuple[int, ...]
    subject: tuple[int, ...] = ()
    relation: tuple[int, ...] = ()
    context: tuple[int, ...] = ()
    special: tuple[int, ...] = ()

    @property
    def last(self) -> int:
        return len(self.input_ids) - 1

    def positions(self, source: str) -> tuple[int, ...]:
        """Token positions of a source set: a name in SOURCE_NAMES or "pos:i,j" (negatives
        count from the end)."""
        last, special = self.last, set(self.special)
        if source == "subject":
            return self.subject
        if source == "subject_first":
            return self.subject[:1]
        if source == "subject_last":
            return self.subject[-1:]
        if source == "last":
            return (last,)
        if source == "first":
            return (0,)
        if source == "non_subject":
            skip = set(self.subject) | special | {last}
            return tuple(i for i in range(len(self.input_ids)) if i not in skip)
        if source == "all_but_last":
            return tuple(i for i in range(last) if i not in special)
        if source == "relation":
            return tuple(i for i in self.relation if i != last)
        if source == "context":
            return self.context
        if source.startswith("pos:"):
            out = []
            for item in source[4:].split(","):
                try:
                    i = int(item)
                except ValueError:
                    raise KnowflowError(f"bad position {item!r} in source {source!r}") from None
                i = i + len(self.input_ids) if i < 0 else i
                if not 0 <= i <= last:
                    raise KnowflowError(f"position {item} is outside the prompt "
                                        f"({len(self.input_ids)} tokens) in source {source!r}")
                out.append(i)
            return tuple(sorted(set(out)))
        raise KnowflowError(f"unknown source set {source!r} (known: "
                            f"{', '.join(SOURCE_NAMES)}, or pos:i,j,...)")


def check_source(source: str) -> None:
    if source not in SOURCE_NAMES and not re.fullmatch(r"pos:-?\d+(,-?\d+)*", source):
        raise KnowflowError(f"unknown source set {source!r} (known: "
                            f"{', '.join(SOURCE_NAMES)}, or pos:i,j,...)")


def _offsets(tokenizer, prompt: str) -> tuple[list[int], list[tuple[int, int]], set[int]]:
    """(input_ids, character offsets, special-token positions) of `prompt`."""
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    try:
        enc = tokenizer(prompt, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    except (NotImplementedError, ValueError, TypeError, KeyError):
        ids = list(tokenizer(prompt)["input_ids"])
        offsets, end = [], 0
        for i in range(len(ids)):  # decode growing prefixes: ends of each token
            text = tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
            new_end = end if ids[i] in special_ids else min(len(prompt), len(text))
            offsets.append((end, new_end))
            end = new_end
    special = {i for i, t in enumerate(ids) if t in special_ids and offsets[i][0] ==
               offsets[i][1]}
    return ids, offsets, special


def tokens_in_span(prompt: str, offsets: list[tuple[int, int]], start: int, end: int,
                   special: set[int] = frozenset()) -> tuple[int, ...]:
    """Positions of the tokens with a non-whitespace character in [start, end)."""
    out = []
    for i, (a, b) in enumerate(offsets):
        if i in special or a >= b:
            continue
        first = a
        while first < b and prompt[first].isspace():
            first += 1
        if first == b:  # a whitespace-only token belongs to a span it lies inside
            if start < a and b <= end:
                out.append(i)
        elif max(first, start) < min(b, end):
            out.append(i)
    return tuple(out)


def locate(tokenizer, example: ProbeExample) -> Located:
    """Tokenize the prompt and find the subject, relation and context tokens in it."""
    ids, offsets, special = _offsets(tokenizer, example.prompt)
    if not ids:
        raise KnowflowError(f"prompt {example.prompt!r} tokenizes to nothing")
    parts: dict[str, tuple[int, ...]] = {}
    for name in ("subject", "relation"):
        text = getattr(example, name)
        if text is None:
            parts[name] = ()
            continue
        span = find_text(example.prompt, text)
        if span is None:
            raise KnowflowError(f"example {example.id!r}: {name} {text!r} does not occur in "
                                f"the prompt {example.prompt!r}")
        parts[name] = tokens_in_span(example.prompt, offsets, *span, special)
        if not parts[name]:
            raise KnowflowError(f"example {example.id!r}: no token covers the {name} {text!r}")
    context = (tokens_in_span(example.prompt, offsets, *example.context, special)
               if example.context else ())
    return Located(input_ids=tuple(ids), subject=parts["subject"], relation=parts["relation"],
                   context=context, special=tuple(sorted(special)))
