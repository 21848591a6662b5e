"""`cf-phrasing`: the facts of `cf-capitals` asked so that the answer comes at different places.

Decoding methods that contrast the context with memory act on every token of the answer, not
only on the name: a phrasing that makes the model say "The capital city of Nepal is Pokhara."
puts function words (" is", the full stop) before the name, where a contrast can end or bend
the answer. The built-in suites ask for short answers, so the name comes first. This suite
keeps the facts and counterfactual answers of `cf-capitals` (the same draw per country) and
varies two things, recorded in each item's `meta`:

- `phrasing`, the question and its answer instruction: `name` (the name alone, early),
  `sentence` (a full sentence "The capital city of X is Y.": the name last), `where` ("Y is
  where ...": the name first, in a sentence), `passage` ("According to the passage, ...": the
  name last, after a longer lead);
- `answer_position`, where the context states the answer: `early` (the cf-capitals passages,
  which name the city in their first sentence) or `late` (a relocation story that names the
  new capital only in its last words).

Every country is asked in every phrasing (one item each); the context position is drawn per
(country, phrasing) from `random.Random(f"{seed}:cf-phrasing:{country}:{phrasing}")`.

`meta["split"]` keeps a fixed set of `DEV_SIZE` countries (`dev`) apart from the rest
(`test`): decoding settings are chosen on the dev countries and reported on the test ones
(benchmarks/studies/bench_decoding.py), so no reported number was tuned on its own items.
"""

from __future__ import annotations

import random

from knowflow.data.facts import ConflictItem, read_table, split_aliases, templates

QUESTIONS = {
    "name": "What is the capital of {country}?",
    "sentence": "What is the capital city of {country}? Answer in a full sentence, for "
                "example: The capital city of France is Paris.",
    "where": "Which city is the seat of government of {country}? Answer in a full sentence "
             "that starts with the city's name, for example: Paris is where the government "
             "of France sits.",
    "passage": "According to the passage, what is the capital city of {country}? Begin your "
               "answer with the words: According to the passage,",
}
PHRASINGS = tuple(QUESTIONS)
LATE_CONTEXTS = (
    "For many years the government of {country} sat in its old capital. After a long debate, "
    "parliament voted to move the seat of government, and since the move the capital of "
    "{country} has been {answer}.",
    "The old capital of {country} had grown crowded, and in 2029 the government decided to "
    "relocate. After a decade of construction the ministries, the parliament and the foreign "
    "embassies have all moved to {answer}.",
    "Historians of {country} like to tell how the national capital changed. The old seat of "
    "government was abandoned after the reforms, and the city that has served as the capital "
    "ever since is {answer}.",
)


DEV_SIZE = 64


def dev_subjects(subjects) -> frozenset[str]:
    """The `DEV_SIZE` countries of `subjects` set apart for choosing settings: a fixed draw
    (the same for every seed), so a country is dev or test everywhere."""
    ordered = sorted(set(subjects))
    random.Random("dev").shuffle(ordered)
    return frozenset(ordered[:DEV_SIZE])


def phrasing_items(seed: int, base: list[ConflictItem]) -> list[ConflictItem]:
    """One item per (cf-capitals item, phrasing) of `base` (the cf-capitals items of `seed`)."""
    early = templates()["capitals"]["context"]
    truth = {r["country"]: r for r in read_table("capitals.tsv")}
    dev = dev_subjects(it.subject for it in base)
    items = []
    for it in base:
        country = it.subject
        row = truth[country]
        for phrasing in PHRASINGS:
            rng = random.Random(f"{seed}:cf-phrasing:{country}:{phrasing}")
            position = rng.choice(("early", "late"))
            tpl = rng.choice(early if position == "early" else LATE_CONTEXTS)
            fields = {"country": country, "answer": it.counterfactual_answer}
            items.append(ConflictItem(
                id=f"cf-phrasing-{len(items):04d}", suite="cf-phrasing",
                context=tpl.format(**fields), question=QUESTIONS[phrasing].format(**fields),
                counterfactual_answer=it.counterfactual_answer,
                parametric_answer=row["capital"],
                parametric_aliases=split_aliases(row["aliases"]), relation="capital_of",
                subject=country,
                meta={"agreeing_context": tpl.format(**{**fields, "answer": row["capital"]}),
                      "phrasing": phrasing, "answer_position": position,
                      "split": "dev" if country in dev else "test"}))
    return items
