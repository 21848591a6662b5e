"""The `cf-numeric` suite: numeric facts with counterfactual contexts at graded distances from
the true value (conflict strength, after ClashEval, Wu et al. 2024).

`data/files/numeric.tsv` holds well-known numeric facts (years of events, counts, distances,
populations), each with a question and a one-sentence statement template. Every fact gives one
item per strength, so each strength holds the same facts: the context states the fact with the
value moved by that strength's step, and the share of answers that follow it can be compared
across strengths. Quantities are multiplied (x1.1, x2, x10, x100; rounded, and always moved by
at least 1, upwards so a count never becomes a fraction); years move by 1, 10, 100 or 1000
years, up or down as `random.Random(f"{seed}:cf-numeric:{subject}:{strength}")` draws, the
other way when that would leave years 1-2024. The item's `meta` holds the strength's label
(`strength`), its rank (`strength_level`, 1 = closest to the truth) and the true value.

Values of 10,000 and more are written with thousands separators and accepted without them
(`384,400` or `384400`); values below 20 are also accepted as words ("eight").
"""

from __future__ import annotations

import random

from knowflow.data.conditions import AGREEING
from knowflow.data.facts import ConflictItem, read_table

SUITE = "cf-numeric"
# (label, factor for quantities, offset in years), closest to the truth first
STRENGTHS = (("x1.1 / 1 year", 1.1, 1), ("x2 / 10 years", 2.0, 10),
             ("x10 / 100 years", 10.0, 100), ("x100 / 1000 years", 100.0, 1000))
LAST_YEAR = 2024
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen")


def written(n: int) -> str:
    """How a value is stated: thousands separators from 10,000 on."""
    return f"{n:,}" if n >= 10_000 else str(n)


def aliases(n: int) -> tuple[str, ...]:
    """Other accepted forms of a value: without separators, and as a word below 20."""
    out = [str(n)] if n >= 10_000 else []
    if 0 <= n < len(_WORDS):
        out.append(_WORDS[n])
    return tuple(out)


def moved(kind: str, value: int, level: int, rng: random.Random) -> int:
    """The value moved by strength `level` (0-based): years by the offset, else by the factor."""
    _, factor, offset = STRENGTHS[level]
    if kind == "year":
        sign = rng.choice((-1, 1))
        new = value + sign * offset
        return new if 1 <= new <= LAST_YEAR else value - sign * offset
    return max(round(value * factor), value + 1)


def numeric_items(seed: int) -> list[ConflictItem]:
    """One item per (fact, strength), in table order, strengths nested."""
    items = []
    for row in read_table("numeric.tsv"):
        value = int(row["value"])
        for level, (label, _, _) in enumerate(STRENGTHS):
            rng = random.Random(f"{seed}:{SUITE}:{row['subject']}:{label}")
            new = moved(row["kind"], value, level, rng)
            items.append(ConflictItem(
                id=f"{SUITE}-{len(items):04d}", suite=SUITE,
                context=row["statement"].format(value=written(new)),
                question=row["question"], counterfactual_answer=written(new),
                parametric_answer=written(value), counterfactual_aliases=aliases(new),
                parametric_aliases=aliases(value), relation=row["kind"],
                subject=row["subject"],
                meta={"strength": label, "strength_level": level + 1, "true_value": value,
                      "context_value": new,
                      AGREEING: row["statement"].format(value=written(value))}))
    return items
