"""RAG-shaped explain items: retrieved passages, the answer in one of them.

An item asks one question of a needle relation (`data.needle.STATEMENTS`: capitals,
landmarks, founders, inventors, authors, rivers, painters, currencies). Its context is
`passages` passages (paragraphs separated by a blank line) of 3-8 sentences, each about one
subject: one sentence states the subject's answer for the relation, the others describe
the subject in general terms (knowflow's own filler sentences below, which state no fact).
The *answer passage* is about the queried subject; half the items state its true answer
(`agree`), half move it to another answer of the relation (`cf`), as the needle suites do.
The other passages are distractors of the same relation (other subjects, their true
answers; none names the queried subject or either of its answers); a relation with too few
subjects for the count is completed with subjects of the other relations, and the item's
`meta["same_relation"]` says how many distractors share the relation. The answer sentence's
index is `meta["needle"]`, its passage `meta["answer_passage"]`.

At about 105 tokens a passage, 10, 20, 40 and 68 passages make prompts of about 1k, 2k, 4k
and 7.5k tokens with SmolLM2's chat template (`PASSAGES`: 68, not 80, keeps every prompt
within its 8,192-token window; 2 passages: about 256).

`hotpot_layout` writes items in HotpotQA's distractor layout (`context` as [title,
[sentences]] pairs, `supporting_facts` as [title, sentence index]); `hotpot_items` reads
that layout back as items (a file of that layout from elsewhere reads the same way: its
paragraphs joined by blank lines, the first supporting fact as the answer sentence).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from knowflow.data.facts import ConflictItem, read_table, split_aliases, templates
from knowflow.data.needle import STATEMENTS
from knowflow.explanation.splitter import split_sentences

PASSAGES = {256: 2, 1024: 10, 2048: 20, 4096: 40, 8192: 68}
SENTENCES = (3, 8)
FILLERS = (
    "Many reference works describe {S} at some length, and most of them agree on the main "
    "points of its history.",
    "Historians who have studied {S} have written a number of long articles about how it "
    "changed over the years.",
    "Photographs of {S} appear in several books, and some of them are more than a hundred "
    "years old.",
    "Students who read about {S} for the first time are often surprised by how much has been "
    "written about it.",
    "A short entry about {S} can be found in most encyclopedias, usually with a map or a "
    "picture beside it.",
    "Local guides tell visitors many stories about {S}, though not every one of them can be "
    "checked against the records.",
    "Several documentaries have covered {S}, each of them taking a slightly different view of "
    "its past.",
    "Libraries keep collections of letters and reports that mention {S}, and researchers "
    "still consult them today.",
    "Over the decades, {S} has been the subject of public lectures, school projects and "
    "radio programmes.",
    "Newspaper articles about {S} appear from time to time, most often on the anniversaries "
    "of important events.",
)


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def relation_facts() -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    """relation -> [(subject, answer, aliases)] of the needle relations (no value with a
    period: the splitter would cut there)."""
    out: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for row in read_table("capitals.tsv"):
        if row["capital"].lower() != row["country"].lower():
            out.setdefault("capital_of", []).append(
                (row["country"], row["capital"], split_aliases(row["aliases"])))
    for row in read_table("world.tsv"):
        if row["relation"] in STATEMENTS:
            out.setdefault(row["relation"], []).append(
                (row["subject"], row["object"], split_aliases(row["aliases"])))
    return {rel: [f for f in facts if "." not in f[0] + f[1]] for rel, facts in out.items()}


def _statement(relation: str, subject: str, answer: str) -> str:
    return _upper(STATEMENTS[relation].format(subject=subject, Subject=_upper(subject),
                                              answer=answer))


def _question(relation: str, rng: random.Random, subject: str) -> str:
    tpl = templates()
    options = tpl["capitals"]["question"] if relation == "capital_of" else \
        tpl["world"][relation]["question"]
    return rng.choice(options).format(country=subject, subject=subject)


def _words(fact: tuple[str, str, tuple[str, ...]]) -> set[str]:
    return {w.lower() for w in (fact[0], fact[1], *fact[2]) if w}


def _passage(rng: random.Random, relation: str, subject: str, answer: str
             ) -> tuple[list[str], int]:
    """(sentences, the index of the one stating the answer)."""
    size = rng.randint(*SENTENCES)
    fillers = [f.format(S=subject) for f in rng.sample(FILLERS, size - 1)]
    at = rng.randrange(size)
    fillers.insert(at, _statement(relation, subject, answer))
    return [_upper(s) for s in fillers], at


def rag_items(n: int, passages: int, seed: int = 0) -> list[ConflictItem]:
    """`n` items of `passages` passages each (see the module docstring); items alternate
    agree and cf, relations in turn; the same arguments give the same items."""
    facts = relation_facts()
    relations = sorted(facts)
    items = []
    for i in range(n):
        rng = random.Random(f"rag:{seed}:{passages}:{i}")
        relation = relations[i % len(relations)] if passages <= 20 else "capital_of"
        subject, true, aliases = rng.choice(facts[relation])
        agree = i % 2 == 0
        others = [f for f in facts[relation] if f[0] != subject and f[1] != true]
        shown, shown_aliases = true, aliases
        if not agree:
            _, shown, shown_aliases = rng.choice(others)
        banned = {subject.lower(), true.lower(), shown.lower(), *(a.lower() for a in aliases)}
        pool = [(relation, f) for f in facts[relation] if not _words(f) & banned]
        same = min(len(pool), passages - 1)
        chosen = rng.sample(pool, same)
        rest = [(rel, f) for rel in relations if rel != relation for f in facts[rel]
                if not _words(f) & banned]
        chosen += rng.sample(rest, passages - 1 - same)
        home = rng.randrange(passages)
        chosen.insert(home, (relation, (subject, shown, shown_aliases)))
        docs, needle, count, titles = [], 0, 0, []
        for p, (rel, (subj, ans, _)) in enumerate(chosen):
            sentences, at = _passage(rng, rel, subj, ans)
            if p == home:
                needle = count + at
            docs.append(sentences)
            titles.append(subj)
            count += len(sentences)
        context = "\n\n".join(" ".join(s) for s in docs)
        items.append(ConflictItem(
            id=f"rag{passages}-{i:03d}", suite="explain-rag", context=context,
            question=_question(relation, rng, subject), counterfactual_answer=shown,
            parametric_answer=true, counterfactual_aliases=shown_aliases,
            parametric_aliases=aliases, relation=relation, subject=subject,
            meta={"needle": needle, "n_sentences": count, "documents": passages,
                  "answer_passage": home, "same_relation": same, "agree": agree,
                  "titles": titles, "passages": docs}))
    assert all(len(split_sentences(it.context)) == it.meta["n_sentences"] for it in items)
    return items


def hotpot_layout(items: list[ConflictItem]) -> list[dict]:
    """The items in HotpotQA's distractor layout (one dict per item)."""
    rows = []
    for it in items:
        home = it.meta["answer_passage"]
        before = sum(len(p) for p in it.meta["passages"][:home])
        rows.append({"_id": f"hp-{it.id}", "question": it.question,
                     "answer": it.counterfactual_answer,
                     "type": "bridge", "level": "easy",
                     "supporting_facts": [[it.meta["titles"][home], it.meta["needle"] - before]],
                     "context": [[t, p] for t, p in zip(it.meta["titles"], it.meta["passages"],
                                                       strict=True)]})
    return rows


def hotpot_items(path: str | Path) -> list[ConflictItem]:
    """Items from a file in HotpotQA's distractor layout (a JSON list): each paragraph's
    sentences joined by spaces, paragraphs by blank lines; `meta["needle"]` is the sentence
    (as knowflow's splitter counts them) that holds the first supporting fact."""
    items = []
    for row in json.loads(Path(path).read_text(encoding="utf-8")):
        paragraphs = [" ".join(s.strip() for s in sents) for _, sents in row["context"]]
        context = "\n\n".join(paragraphs)
        title, index = row["supporting_facts"][0]
        para = next(k for k, (t, _) in enumerate(row["context"]) if t == title)
        sentences = row["context"][para][1]
        start = sum(len(p) + 2 for p in paragraphs[:para]) + \
            sum(len(s.strip()) + 1 for s in sentences[:index])
        needle = next(j for j, s in enumerate(split_sentences(context))
                      if s.start <= start < s.end)
        items.append(ConflictItem(
            id=str(row["_id"]), suite="hotpotqa", context=context, question=row["question"],
            counterfactual_answer=row["answer"], parametric_answer="",
            meta={"needle": needle, "n_sentences": len(split_sentences(context)),
                  "documents": len(paragraphs)}))
    return items


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description="write RAG items in HotpotQA's distractor layout")
    ap.add_argument("out", type=Path)
    ap.add_argument("--items", type=int, default=4)
    ap.add_argument("--passages", type=int, default=10)
    ap.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    rows = hotpot_layout(rag_items(args.items, args.passages, args.seed))
    args.out.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
