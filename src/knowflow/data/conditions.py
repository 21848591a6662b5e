"""The extra contexts of the three context conditions: agreeing and irrelevant.

An item's own context conflicts with memory ("conflicting"). The "agreeing" context states the
memorized (true) fact; the "irrelevant" context is another item's context about another subject
of the same relation, so the right answer stays the memorized one. Both are stored in
`item.meta` (`agreeing_context`; `irrelevant_context`, `irrelevant_answer` and
`irrelevant_aliases`, the answer that passage asserts), computed once over a whole suite or file
before any `--limit` sample, so a sampled item still draws from every other item.

Agreeing contexts come from the suites' own templates filled with the true answer
(`suites.py`), from an `agreeing_context` field of a loaded record, or otherwise by replacing
the counterfactual answer with the memorized one where the context names it as a whole word.
An irrelevant donor never names this item's subject, either answer or their aliases; the donor
is drawn with `random.Random(f"{seed}:{item.id}:irrelevant")`, so it is the same on every
machine. An item with no eligible donor has no irrelevant context (and is left out of that
condition).
"""

from __future__ import annotations

import dataclasses
import random
import re
import unicodedata

from knowflow.data.facts import ConflictItem

AGREEING = "agreeing_context"


def text_key(text: str) -> str:
    """A comparison key: accents, case and punctuation removed, words single-spaced."""
    if text.isascii():  # NFKD changes nothing and casefold is lower: skip the per-character pass
        return _NOT_WORD.sub(" ", text.lower()).strip()
    text = unicodedata.normalize("NFKD", text).casefold()
    return _NOT_WORD.sub(" ", "".join(c for c in text if not unicodedata.combining(c))).strip()


_NOT_WORD = re.compile(r"[^0-9a-z]+")
_FEW = 32  # phrases to avoid up to which each is searched for; beyond, the context's n-grams


def _spaced(key: str) -> str:
    """A `text_key` with a space at each end, so `in` matches whole words only."""
    return f" {key} "


def names(text_k: str, phrase: str) -> bool:
    """Whether text (given by its `text_key`) contains `phrase` as whole words."""
    p = text_key(phrase)
    return bool(p) and _spaced(p) in _spaced(text_k)


def _forbidden(item: ConflictItem) -> list[str]:
    """What an irrelevant context must never name: the subject, both answers, their aliases."""
    return [s for s in (item.subject, item.counterfactual_answer, item.parametric_answer,
                        *item.counterfactual_aliases, *item.parametric_aliases) if s]


def substituted_agreeing(item: ConflictItem) -> str | None:
    """The context with its counterfactual answer replaced by the memorized one (whole words,
    case-insensitive); None where the context does not name the counterfactual answer."""
    cf = item.counterfactual_answer.strip()
    if not cf or not item.context:
        return None
    pattern = re.compile(rf"(?<!\w){re.escape(cf)}(?!\w)", re.IGNORECASE)
    if not pattern.search(item.context):
        return None
    return pattern.sub(lambda _: item.parametric_answer.strip(), item.context)


def with_condition_contexts(items: list[ConflictItem], seed: int = 0) -> list[ConflictItem]:
    """`items` with agreeing and irrelevant contexts added to their `meta` (see module doc)."""
    spaced = [_spaced(text_key(it.context)) for it in items]   # keyed once, not per pair
    context_words = [k.split() for k in spaced]
    by_relation: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        if it.context:
            by_relation.setdefault(it.relation, []).append(i)

    def donor_of(it: ConflictItem) -> ConflictItem | None:
        """`names`, pair by pair, with each phrase keyed once."""
        keys = {k for k in map(text_key, _forbidden(it)) if k}
        if len(keys) <= _FEW:
            avoid = [_spaced(k) for k in keys]

            def clear(j: int) -> bool:
                return not any(a in spaced[j] for a in avoid)
        else:  # many aliases: look the context's word n-grams up, linear in the aliases
            longest = max(k.count(" ") + 1 for k in keys)

            def clear(j: int) -> bool:
                ws = context_words[j]
                return not any(" ".join(ws[i:i + n]) in keys
                               for n in range(1, min(longest, len(ws)) + 1)
                               for i in range(len(ws) - n + 1))
        donors = [j for j in by_relation.get(it.relation, [])
                  if items[j].id != it.id and clear(j)]
        return items[random.Random(f"{seed}:{it.id}:irrelevant").choice(donors)] \
            if donors else None

    out = []
    for it in items:
        meta = dict(it.meta)
        if AGREEING not in meta:
            agreeing = substituted_agreeing(it)
            if agreeing is not None:
                meta[AGREEING] = agreeing
        donor = donor_of(it) if "irrelevant_context" not in meta else None  # saved: kept
        if donor is not None:
            meta.update(irrelevant_context=donor.context,
                        irrelevant_answer=donor.counterfactual_answer,
                        irrelevant_aliases=list(donor.counterfactual_aliases))
        out.append(dataclasses.replace(it, meta=meta))
    return out


def condition_item(item: ConflictItem, condition: str) -> ConflictItem | None:
    """The item as shown under `condition`; None where it has no such context.

    Answers are kept except under "irrelevant", where the context's answer becomes the one the
    borrowed passage asserts (so "follows the context" keeps its meaning); the memorized answer
    is always the item's own."""
    if condition == "conflicting":
        return item
    if condition == "agreeing":
        ctx = item.meta.get(AGREEING)
        return None if not ctx else dataclasses.replace(item, context=ctx)
    if condition == "irrelevant":
        ctx = item.meta.get("irrelevant_context")
        if not ctx:
            return None
        return dataclasses.replace(
            item, context=ctx, counterfactual_answer=item.meta["irrelevant_answer"],
            counterfactual_aliases=tuple(item.meta.get("irrelevant_aliases", ())))
    raise ValueError(f"unknown condition {condition!r}")
