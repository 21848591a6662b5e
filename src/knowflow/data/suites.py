"""Built-in knowledge-conflict suites, generated from the shipped facts tables.

Each suite is a generator `(seed) -> list[ConflictItem]` registered by name, as
lm-evaluation-harness registers tasks. The context moves a fact to another real answer of the
same kind (a capital to another city, a founder to another founder, a life story to another
person, a saying to a different last word); the question asks for the fact. Template choice and
the counterfactual answer are drawn from `random.Random(f"{seed}:{suite}:{key}")`, so the same
seed gives the same items on every machine, and adding rows never reshuffles the others.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from knowflow.data.conditions import AGREEING, with_condition_contexts
from knowflow.data.conditions import text_key as _key
from knowflow.data.facts import ConflictItem, read_table, split_aliases, templates
from knowflow.data.needle import needle_items
from knowflow.data.numeric import numeric_items
from knowflow.data.phrasing import phrasing_items
from knowflow.errors import KnowflowError

SuiteFn = Callable[[int], list[ConflictItem]]
_SUITES: dict[str, tuple[SuiteFn, str]] = {}


def register_suite(name: str, description: str) -> Callable[[SuiteFn], SuiteFn]:
    def deco(fn: SuiteFn) -> SuiteFn:
        _SUITES[name] = (fn, description)
        return fn
    return deco


def list_suites() -> dict[str, str]:
    """Suite name -> one-line description."""
    return {name: desc for name, (_, desc) in _SUITES.items()}


def get_suite(name: str, seed: int = 0, limit: int | None = None) -> list[ConflictItem]:
    """The items of suite `name`; with `limit`, a seeded sample of that many (all relations).
    Each item carries its agreeing and irrelevant contexts (`data.conditions`), drawn from
    the whole suite before sampling."""
    if name not in _SUITES:
        raise KnowflowError(f"unknown suite {name!r} (known: {', '.join(_SUITES)})")
    return sample(with_condition_contexts(_SUITES[name][0](seed), seed), limit, seed, name)


def sample(items: list[ConflictItem], limit: int | None, seed: int, name: str
           ) -> list[ConflictItem]:
    """A seeded sample of `limit` items in their original order (all items without a limit)."""
    if limit is None or limit >= len(items):
        return items
    if limit < 1:
        raise KnowflowError(f"--limit must be at least 1, got {limit}")
    order = list(range(len(items)))
    random.Random(f"{seed}:{name}:limit").shuffle(order)
    return [items[i] for i in sorted(order[:limit])]


def _pick_other(rng: random.Random, pool: list[str], avoid: list[str]) -> str:
    """A value from `pool` sharing no word-level overlap with any string in `avoid`."""
    bad = {_key(a) for a in avoid if a}
    ok = [p for p in pool if _key(p) not in bad and
          not any(f" {_key(p)} " in f" {b} " or f" {b} " in f" {_key(p)} " for b in bad)]
    return rng.choice(sorted(set(ok)))


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _agreeing(template: str, fields: dict, true_answer: str) -> dict:
    """The item's agreeing context: its own template filled with the true answer."""
    return {AGREEING: _upper_first(template.format(**{**fields, "answer": true_answer}))}


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


@register_suite("cf-capitals", "every sovereign country whose capital is not named like the "
                               "country; the context moves its capital to another real city")
def capitals_suite(seed: int) -> list[ConflictItem]:
    rows = read_table("capitals.tsv")
    tpl = templates()["capitals"]
    all_capitals = [r["capital"] for r in rows]
    items = []
    for row in rows:
        if _key(row["capital"]) == _key(row["country"]):
            continue  # city-states (Singapore, Monaco, ...): the question names the answer
        rng = random.Random(f"{seed}:cf-capitals:{row['country']}")
        avoid = [row["capital"], row["country"], *split_aliases(row["aliases"])]
        # no second well-known city: move the capital to another country's capital
        answer = row["other_city"] or _pick_other(rng, all_capitals, avoid)
        fields = {"country": row["country"], "answer": answer}
        context = rng.choice(tpl["context"])
        items.append(ConflictItem(
            id=f"cf-capitals-{len(items):04d}", suite="cf-capitals",
            context=context.format(**fields),
            question=rng.choice(tpl["question"]).format(**fields),
            counterfactual_answer=answer, parametric_answer=row["capital"],
            parametric_aliases=split_aliases(row["aliases"]), relation="capital_of",
            subject=row["country"],
            meta=_agreeing(context, fields, row["capital"])))
    return items


@register_suite("cf-phrasing", "the cf-capitals facts asked in 4 phrasings (name alone, full "
                               "sentence, 'Y is where', 'According to the passage'), the answer "
                               "early or late in the context (data/phrasing.py)")
def phrasing_suite(seed: int) -> list[ConflictItem]:
    return phrasing_items(seed, capitals_suite(seed))


@register_suite("cf-world", "world facts across 8 relations (landmarks, founders, inventors, "
                            "authors, symbols, rivers, painters, currencies)")
def world_suite(seed: int) -> list[ConflictItem]:
    rows = read_table("world.tsv")
    tpl = templates()["world"]
    objects: dict[str, list[str]] = {}
    aliases: dict[tuple[str, str], tuple[str, ...]] = {}
    for row in rows:
        objects.setdefault(row["relation"], []).append(row["object"])
        aliases[row["relation"], row["object"]] = split_aliases(row["aliases"])
    items = []
    for row in rows:
        rel = row["relation"]
        rng = random.Random(f"{seed}:cf-world:{rel}:{row['subject']}")
        answer = _pick_other(rng, objects[rel], [row["object"], row["subject"],
                                                 *split_aliases(row["aliases"])])
        fields = {"subject": row["subject"], "Subject": _upper_first(row["subject"]),
                  "answer": answer}
        context = rng.choice(tpl[rel]["context"])
        items.append(ConflictItem(
            id=f"cf-world-{len(items):04d}", suite="cf-world",
            context=_upper_first(context.format(**fields)),
            question=rng.choice(tpl[rel]["question"]).format(**fields),
            counterfactual_answer=answer, parametric_answer=row["object"],
            counterfactual_aliases=aliases[rel, answer],
            parametric_aliases=split_aliases(row["aliases"]), relation=rel,
            subject=row["subject"], meta=_agreeing(context, fields, row["object"])))
    return items


@register_suite("cf-bio", "biographies of well-known people with the name swapped for "
                          "another person's")
def bio_suite(seed: int) -> list[ConflictItem]:
    rows = read_table("bio.tsv")
    tpl = templates()["bio"]
    names = [r["name"] for r in rows]
    by_name = {r["name"]: r for r in rows}
    items = []
    for row in rows:
        rng = random.Random(f"{seed}:cf-bio:{row['name']}")
        answer = _pick_other(rng, names, [row["name"], *split_aliases(row["aliases"])])
        fields = {**row, "answer": answer, "article": _article(row["nationality"])}
        context = rng.choice(tpl["context"])
        items.append(ConflictItem(
            id=f"cf-bio-{len(items):04d}", suite="cf-bio",
            context=_upper_first(context.format(**fields)),
            question=rng.choice(tpl["question"]).format(**fields),
            counterfactual_answer=answer, parametric_answer=row["name"],
            counterfactual_aliases=split_aliases(by_name[answer]["aliases"]),
            parametric_aliases=split_aliases(row["aliases"]), relation="known_for",
            meta=_agreeing(context, fields, row["name"])))
    return items


@register_suite("cf-quotes", "well-known sayings with an instruction to end them with a "
                             "different word (MemoTrap style)")
def quotes_suite(seed: int) -> list[ConflictItem]:
    rows = read_table("quotes.tsv")
    tpl = templates()["quotes"]
    last_words = [r["saying"].rsplit(" ", 1)[1] for r in rows]
    items = []
    for row in rows:
        saying = row["saying"]
        prefix, last = saying.rsplit(" ", 1)
        rng = random.Random(f"{seed}:cf-quotes:{saying}")
        # the new last word must not occur anywhere in the saying itself
        answer = _pick_other(rng, last_words, saying.split())
        fields = {"answer": answer, "prefix": prefix}
        context = rng.choice(tpl["context"])
        items.append(ConflictItem(
            id=f"cf-quotes-{len(items):04d}", suite="cf-quotes",
            context=context.format(**fields),
            question=rng.choice(tpl["question"]).format(**fields),
            counterfactual_answer=answer, parametric_answer=last, task="complete",
            relation="saying_ends_with", meta=_agreeing(context, fields, last)))
    return items


@register_suite("needle-cf", "5-10 same-relation statements; one (the needle, meta['needle']) "
                             "moves the queried fact to another answer")
def needle_cf_suite(seed: int) -> list[ConflictItem]:
    return needle_items(seed, "needle-cf", agree=False)


@register_suite("needle-agree", "5-10 same-relation statements; one (the needle, "
                                "meta['needle']) states the queried fact as it is")
def needle_agree_suite(seed: int) -> list[ConflictItem]:
    return needle_items(seed, "needle-agree", agree=True)


@register_suite("cf-numeric", "numeric facts (years, counts, distances, populations) with the "
                              "context's value moved at 4 graded strengths (data/numeric.py)")
def numeric_suite(seed: int) -> list[ConflictItem]:
    return numeric_items(seed)
