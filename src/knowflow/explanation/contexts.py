"""Training contexts for the learned estimator (`knowflow explain fit`): never the evaluation
items.

Every statement is about a made-up person (`data.people.make_names`: names no model has seen
with any fact) and one of six attributes whose values come from the out-of-context-reasoning
families (`data/files/ocr_families.json`: cities, languages, professions, sports, colours,
music). Two kinds of context, as explain meets them:

* needle-style: 5-10 statements, one per person, one of them about the queried person and
  attribute;
* multi-document: 2-5 documents (paragraphs, separated by a blank line) of 3-8 statements
  each, the queried statement in one of them.

The question asks for the queried attribute; `counterfactual_answer` holds the value the
context states (the model has no memory of it), `meta["needle"]` its sentence index.

A share `world` of the contexts is drawn instead from real facts in knowflow's tables that no
needle suite states (`WORLD`: birth years and occupations of `bio.tsv`, the event years of
`numeric.tsv`, the city -> language and country -> calling-code pairs of the OCR families), as
the needle suites are built: every statement of a document one relation, the model remembers
the facts, and the queried statement either agrees with memory or moves the answer to another
of the relation's answers (half each). Needle-style contexts hold 5-10 statements of one
relation; multi-document ones 2-6 documents of 3-12 statements, one relation each. No
relation of `data.needle.STATEMENTS` is used, so no training statement or question is one of
an evaluation item's (tests/explanation/test_contexts.py checks it).
"""

from __future__ import annotations

import random
from functools import cache

from knowflow.data.facts import ConflictItem, read_table
from knowflow.data.people import known_words, load_families, make_names
from knowflow.data.suites import get_suite
from knowflow.explanation.splitter import split_sentences

# attribute -> (statement, question, (family, 0: the pair's fact / 1: its implication))
ATTRIBUTES = {
    "city": ("{name} lives in {value}.", "In which city does {name} live?",
             ("city_language", 0)),
    "language": ("{name} speaks {value}.", "What language does {name} speak?",
                 ("city_language", 1)),
    "job": ("{name} works as a {value}.", "What is {name}'s job?", ("profession_color", 0)),
    "color": ("{name}'s favorite color is {value}.", "What is {name}'s favorite color?",
              ("profession_color", 1)),
    "sport": ("{name} plays {value}.", "Which sport does {name} play?", ("sport_music", 0)),
    "music": ("{name} listens to {value}.", "What music does {name} listen to?",
              ("sport_music", 1)),
}
NEEDLE_SIZES = (5, 10)
DOCUMENTS = (2, 5)
DOCUMENT_SIZES = (3, 8)
DESCRIPTION = ("made-up people (data.people names) with six attributes from the OCR families "
               "(city, language, job, color, sport, music); needle-style contexts of 5-10 "
               "statements and multi-document contexts of 2-5 paragraphs of 3-8 statements; "
               "the question asks for one stated attribute; a share `world` of them real facts no "
               "needle suite states (birth years, occupations, event years, city languages, "
               "calling codes): same-relation documents, the queried one agreeing with memory or "
               "moved to another answer")
WORLD_DOCUMENTS = (2, 6)
WORLD_DOCUMENT_SIZES = (3, 12)


def _values() -> dict[str, list[str]]:
    fams = load_families()
    return {attr: sorted({pair[slot] for pair in fams[fam].pairs})
            for attr, (_, _, (fam, slot)) in ATTRIBUTES.items()}


@cache
def world_facts() -> dict[str, tuple[tuple[str, str, str, str], ...]]:
    """relation -> ((subject, answer, statement, question), ...): real facts of knowflow's
    tables that no needle suite states; no value holds a period (see the module docstring)."""
    out: dict[str, list[tuple[str, str, str, str]]] = {"born": [], "occupation": [],
                                                        "event_year": []}
    for row in read_table("bio.tsv"):
        out["born"].append((row["name"], row["born"], "{subject} was born in {answer}.",
                            "In what year was {subject} born?"))
        out["occupation"].append((row["name"], row["occupation"],
                                  "{subject}'s occupation was {answer}.",
                                  "What was {subject}'s occupation?"))
    for row in read_table("numeric.tsv"):
        if row["kind"] == "year":
            out["event_year"].append((row["subject"], row["value"],
                                      row["statement"].replace("{value}", "{answer}"),
                                      row["question"]))
    fams = load_families()
    for fam, relation, statement, question in (
            ("city_language", "city_language", "People in {subject} speak {answer}.",
             "What language do people in {subject} speak?"),
            ("country_code", "calling_code", "The calling code of {subject} is {answer}.",
             "What is the calling code of {subject}?")):
        out[relation] = [(a, b, statement, question) for a, b in fams[fam].pairs]
    return {rel: tuple(f for f in facts if "." not in f[0] + f[1]) for rel, facts in out.items()}


def _world_item(rng: random.Random, i: int, multi: bool) -> ConflictItem:
    """One context of real facts (see the module docstring)."""
    facts = world_facts()
    relation = rng.choice(sorted(facts))
    sizes = [rng.randint(*WORLD_DOCUMENT_SIZES) for _ in range(rng.randint(*WORLD_DOCUMENTS))] \
        if multi else [rng.randint(*NEEDLE_SIZES)]
    home = rng.randrange(len(sizes))
    subject, true, statement, question = rng.choice(facts[relation])
    answers = sorted({f[1] for f in facts[relation]} - {true})
    agree = rng.random() < 0.5
    shown = true if agree else rng.choice(answers)
    used_subjects = {subject}
    docs, needle, at = [], 0, 0
    for d, size in enumerate(sizes):
        rel = relation if d == home else rng.choice(sorted(facts))
        pool = [f for f in facts[rel] if f[0] not in used_subjects and f[1] not in (true, shown)]
        chosen = rng.sample(pool, min(size - (d == home), len(pool)))
        used_subjects |= {f[0] for f in chosen}
        lines = [f[2].format(subject=f[0], answer=f[1]) for f in chosen]
        if d == home:
            spot = rng.randrange(len(lines) + 1)
            lines.insert(spot, statement.format(subject=subject, answer=shown))
            needle = at + spot
        docs.append(" ".join(line[:1].upper() + line[1:] for line in lines))
        at += len(lines)
    return ConflictItem(
        id=f"fit-{i:04d}", suite="explain-fit", context="\n\n".join(docs),
        question=question.format(subject=subject), counterfactual_answer=shown,
        parametric_answer=true, relation=relation, subject=subject,
        meta={"needle": needle, "n_sentences": at, "documents": len(sizes), "world": True,
              "agrees": agree})


def training_items(n: int, seed: int = 0, multi_document: float = 0.5, world: float = 0.0
                   ) -> list[ConflictItem]:
    """`n` training contexts, a share `multi_document` of them multi-document and a share
    `world` of real facts (see the module docstring); the same seed gives the same
    contexts."""
    rng = random.Random(f"explain-fit:{seed}")
    values = _values()
    forbidden = known_words()
    items = []
    for i in range(n):
        multi = rng.random() < multi_document
        if world and rng.random() < world:
            items.append(_world_item(rng, i, multi))
            continue
        if multi:
            sizes = [rng.randint(*DOCUMENT_SIZES) for _ in range(rng.randint(*DOCUMENTS))]
        else:
            sizes = [rng.randint(*NEEDLE_SIZES)]
        total = sum(sizes)
        names = make_names(total, rng, forbidden)
        facts = []
        for name in names:
            attr = rng.choice(sorted(ATTRIBUTES))
            facts.append((name, attr, rng.choice(values[attr])))
        needle = rng.randrange(total)
        name, attr, value = facts[needle]
        lines = [ATTRIBUTES[a][0].format(name=p, value=v) for p, a, v in facts]
        docs, at = [], 0
        for size in sizes:
            docs.append(" ".join(lines[at:at + size]))
            at += size
        items.append(ConflictItem(
            id=f"fit-{i:04d}", suite="explain-fit", context="\n\n".join(docs),
            question=ATTRIBUTES[attr][1].format(name=name), counterfactual_answer=value,
            parametric_answer="", relation=attr, subject=name,
            meta={"needle": needle, "n_sentences": total, "documents": len(sizes)}))
    return items


def long_items(n: int, n_sentences: int, seed: int = 0, per_document: tuple[int, int] = (8, 12)
               ) -> list[ConflictItem]:
    """`n` long multi-document items of exactly `n_sentences` sentences with one answer
    sentence (for benchmarks and the cost curve, never for fitting): each is a `needle-cf`
    item whose needle statement is moved into documents of `per_document` statements drawn
    from other needle items' contexts (true statements of other subjects, none naming the
    item's subject or answers); `meta["needle"]` is its sentence index. Each item's draws are
    seeded by its own id, so `long_items(k, S)` is the first k of `long_items(n, S)` for any
    n >= k: an id names one context."""
    base = get_suite("needle-cf", seed, None)
    pool = sorted({s.text for it in base for j, s in enumerate(split_sentences(it.context))
                   if j != it.meta["needle"]})
    order = list(base)
    random.Random(f"explain-long:{seed}").shuffle(order)
    items = []
    for it in order[:n]:
        rng = random.Random(f"explain-long:{seed}:{n_sentences}:{it.id}")
        banned = [w.lower() for w in (it.subject, it.counterfactual_answer,
                                      it.parametric_answer) if w]
        fillers = [s for s in pool if not any(b in s.lower() for b in banned)]
        lines = rng.sample(fillers, n_sentences - 1)
        needle = rng.randrange(n_sentences)
        lines.insert(needle, split_sentences(it.context)[it.meta["needle"]].text)
        docs, at = [], 0
        while at < len(lines):
            size = rng.randint(*per_document)
            docs.append(" ".join(lines[at:at + size]))
            at += size
        items.append(ConflictItem(
            id=f"long{n_sentences}-{it.id}", suite="explain-long", context="\n\n".join(docs),
            question=it.question, counterfactual_answer=it.counterfactual_answer,
            parametric_answer=it.parametric_answer,
            counterfactual_aliases=it.counterfactual_aliases,
            parametric_aliases=it.parametric_aliases, relation=it.relation,
            subject=it.subject, meta={"needle": needle, "n_sentences": n_sentences,
                                      "documents": len(docs)}))
    return items
