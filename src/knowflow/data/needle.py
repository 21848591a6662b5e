"""Needle suites: ground truth for sentence attribution.

Each item's context is 5-10 statements of one relation, one per sentence: exactly one (the
needle) is about the queried subject, the others state the true fact for other subjects.
In `needle-cf` the needle moves the subject's fact to another real answer of the same kind
(it contradicts memory); in `needle-agree` it states the true fact. The needle's sentence
index is `item.meta["needle"]` (`item.meta["statements"]` lists each sentence's (subject,
answer) in order), as the offline splitter (`explanation.splitter`) counts it: every
statement is one sentence, no value containing a period is used, and chemical symbols are
left out (a sentence ending in "K." or "Co." reads as an initial or an abbreviation).

Everything is drawn from `random.Random(f"{seed}:{suite}:{relation}:{subject}")`: the number of
sentences, the needle's position, the other subjects and the counterfactual answer, so the
same seed gives the same items everywhere. The statements are knowflow's own one-sentence
templates (below); the questions are the relation's templates in `data/files/templates.json`.
"""

from __future__ import annotations

import random

from knowflow.data.conditions import AGREEING
from knowflow.data.conditions import text_key as _key
from knowflow.data.facts import ConflictItem, read_table, split_aliases, templates

# relation -> one-sentence statement of (subject, answer)
STATEMENTS = {
    "capital_of": "The capital of {subject} is {answer}.",
    "landmark_city": "{Subject} is located in {answer}.",
    "company_founder": "{Subject} was founded by {answer}.",
    "invention_inventor": "{Subject} was invented by {answer}.",
    "work_author": "{Subject} was written by {answer}.",
    "river_continent": "{Subject} flows through {answer}.",
    "painting_painter": "{Subject} was painted by {answer}.",
    "country_currency": "The currency of {subject} is the {answer}.",
}
SIZES = (5, 10)          # sentences per context, inclusive


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _facts() -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    """relation -> [(subject, answer, aliases)], without values holding a period."""
    out: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for row in read_table("capitals.tsv"):
        if _key(row["capital"]) != _key(row["country"]):
            out.setdefault("capital_of", []).append(
                (row["country"], row["capital"], split_aliases(row["aliases"])))
    for row in read_table("world.tsv"):
        out.setdefault(row["relation"], []).append(
            (row["subject"], row["object"], split_aliases(row["aliases"])))
    return {rel: [f for f in facts if "." not in f[0] + f[1]] for rel, facts in out.items()
            if rel in STATEMENTS}


def _questions(relation: str) -> list[str]:
    tpl = templates()
    return tpl["capitals"]["question"] if relation == "capital_of" else \
        tpl["world"][relation]["question"]


def _statement(relation: str, subject: str, answer: str) -> str:
    return _upper_first(STATEMENTS[relation].format(subject=subject, Subject=_upper_first(subject),
                                                    answer=answer))


def _clashes(fact: tuple[str, str, tuple[str, ...]], banned: set[str]) -> bool:
    words = {_key(fact[0]), _key(fact[1]), *(_key(a) for a in fact[2])}
    return any(f" {b} " in f" {w} " or f" {w} " in f" {b} " for b in banned for w in words
               if b and w)


def needle_items(seed: int, suite: str, agree: bool) -> list[ConflictItem]:
    """The items of a needle suite (see the module docstring)."""
    items = []
    for relation, facts in _facts().items():
        question = _questions(relation)
        for subject, true, aliases in facts:
            rng = random.Random(f"{seed}:{suite}:{relation}:{subject}")
            banned = {_key(subject), _key(true), *(_key(a) for a in aliases)}
            others = [f for f in facts if f[0] != subject and f[1] != true]
            answer, answer_aliases = true, aliases
            if not agree:
                pool = sorted({f[1] for f in others if not _clashes(f, banned)})
                answer = rng.choice(pool)
                answer_aliases = next(f[2] for f in others if f[1] == answer)
            banned.add(_key(answer))
            fillers = [f for f in others if not _clashes(f, banned)]
            n = rng.randint(*SIZES)
            if len(fillers) < n - 1:
                continue
            chosen = rng.sample(fillers, n - 1)
            needle = rng.randrange(n)
            facts_shown = [(s, a) for s, a, _ in chosen]
            facts_shown.insert(needle, (subject, answer))
            lines = [_statement(relation, s, a) for s, a in facts_shown]
            agreeing = list(lines)
            agreeing[needle] = _statement(relation, subject, true)
            items.append(ConflictItem(
                id=f"{suite}-{len(items):04d}", suite=suite, context=" ".join(lines),
                question=rng.choice(question).format(country=subject, subject=subject),
                counterfactual_answer=answer, parametric_answer=true,
                counterfactual_aliases=answer_aliases, parametric_aliases=aliases,
                relation=relation, subject=subject,
                meta={"needle": needle, "n_sentences": n, AGREEING: " ".join(agreeing),
                      "statements": [list(f) for f in facts_shown]}))
    return items
