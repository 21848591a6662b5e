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
"""

from __future__ import annotations

import random

from knowflow.data.facts import ConflictItem
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
               "the question asks for one stated attribute")


def _values() -> dict[str, list[str]]:
    fams = load_families()
    return {attr: sorted({pair[slot] for pair in fams[fam].pairs})
            for attr, (_, _, (fam, slot)) in ATTRIBUTES.items()}


def training_items(n: int, seed: int = 0, multi_document: float = 0.5
                   ) -> list[ConflictItem]:
    """`n` training contexts, a share `multi_document` of them multi-document (see the module
    docstring); the same seed gives the same contexts."""
    rng = random.Random(f"explain-fit:{seed}")
    values = _values()
    forbidden = known_words()
    items = []
    for i in range(n):
        multi = rng.random() < multi_document
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
    item's subject or answers); `meta["needle"]` is its sentence index."""
    base = get_suite("needle-cf", seed, None)
    pool = sorted({s.text for it in base for j, s in enumerate(split_sentences(it.context))
                   if j != it.meta["needle"]})
    rng = random.Random(f"explain-long:{seed}:{n_sentences}")
    items = []
    for it in rng.sample(base, n):
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
