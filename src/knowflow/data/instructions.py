"""knowflow's built-in instruction mixture (nothing is downloaded): context-QA examples of the
three kinds of Goyal et al. (ICLR 2025), made from the shipped facts tables.

- **C+S**: a real fact (a capital, a landmark's city, a book's author, ...) with a context that
  agrees with it: the answer is both in the context and in the model's memory.
- **C**: a made-up subject (syllable names no model has seen) with a real-looking answer: the
  context alone gives the answer (context-critical).
- **S**: a real fact asked without a context.

The subjects of the `cf-capitals` and `cf-world` suites are split once per seed: the held-out
share is what `heldout_items` returns for counterfactual tracking, and the mixture never
mentions those subjects. Rows are Alpaca-form (`instruction`, `input`, `output`) with extra
fields `kind`, `subject`, `relation`, used by curation and augmentation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from knowflow.config import option, require
from knowflow.data.facts import ConflictItem, Instruction, read_table, templates
from knowflow.data.people import known_words, make_names
from knowflow.data.prompts import SHORT_ANSWER
from knowflow.data.suites import get_suite

# The example kinds (Goyal et al. 2025), named the same in every experiment, tracker and report:
# `C` (the answer is only in the context), `C+S` (a memorized subject; the context agrees with
# memory), `S` (no context; memory only) and `CF` (a memorized subject; the context contradicts
# memory: the counterfactual items that measure context reliance, and the augmentation examples
# that train it). A per-kind quantity is suffixed with the kind (`loss_C+S`).
KINDS = ("C", "C+S", "S", "CF")
TRACKED_SUITES = ("cf-capitals", "cf-world")
# How a made-up subject of each relation is named ({w}: a made-up word).
_MADE_UP = {"capital_of": "{W}", "landmark_city": "the {W} Tower",
            "company_founder": "{W} Systems", "invention_inventor": "the {w}ograph",
            "work_author": "The {W} Chronicles", "river_continent": "the {W} River",
            "painting_painter": "The {W} Garden", "country_currency": "{W}"}


MAX_MIXTURE = 1_000_000  # rows of a generated mixture (the built-in one makes 40,000 in 0.8 s)


@dataclass(frozen=True)
class MixtureShares:
    """A finetuning mixture, one concept for every experiment that finetunes on one: `size`
    examples split into the kinds C, C+S and S by the shares `c`, `cs` and `s` (which sum to
    1). The tiny world's `Mixture` and the instruction `MixtureConfig` extend it with their own
    fields; the theory model (`cpi-toy`) counts its point sets instead."""

    size: int = 800
    c: float = 0.25
    cs: float = 0.5
    s: float = 0.25

    def validate(self, prefix: str = "mixture.") -> None:
        require(self.size >= 1, f"{prefix}size", "must be at least 1")
        require(self.size <= MAX_MIXTURE, f"{prefix}size",
                f"must be at most {MAX_MIXTURE}, got {self.size}")
        for name in ("c", "cs", "s"):
            value = getattr(self, name)
            require(0 <= value <= 1, f"{prefix}{name}", f"a share must lie in [0, 1], got {value}")
        total = self.c + self.cs + self.s
        require(abs(total - 1) <= 1e-6, f"{prefix}c",
                f"the shares c + cs + s sum to {total:g}, not 1; make them sum to 1")


@dataclass(frozen=True)
class MixtureConfig(MixtureShares):
    """The built-in instruction mixture (`MixtureShares`: size and the C/C+S/S shares)."""

    heldout_share: float = 0.5       # subjects kept for counterfactual evaluation
    seed: int = option(0, flag="seed")  # set with the finetuning's --seed

    def validate(self, prefix: str = "mixture.") -> None:
        super().validate(prefix)
        require(0 < self.heldout_share < 1, f"{prefix}heldout_share", "must lie in (0, 1)")


@dataclass(frozen=True)
class Fact:
    relation: str
    subject: str
    answer: str


def _facts() -> list[Fact]:
    out = [Fact("capital_of", r["country"], r["capital"]) for r in read_table("capitals.tsv")]
    out += [Fact(r["relation"], r["subject"], r["object"]) for r in read_table("world.tsv")]
    return out


def heldout_subjects(cfg: MixtureConfig) -> frozenset[str]:
    """Subjects reserved for counterfactual evaluation under `cfg.seed`."""
    subjects = sorted({f.subject for f in _facts()})
    random.Random(f"{cfg.seed}:mixture:split").shuffle(subjects)
    return frozenset(subjects[:round(len(subjects) * cfg.heldout_share)])


def heldout_items(cfg: MixtureConfig, suites: tuple[str, ...] = TRACKED_SUITES,
                  limit: int | None = None) -> dict[str, list[ConflictItem]]:
    """Counterfactual items whose subjects the mixture never shows, by suite (a seeded
    sample of `limit` per suite); items about no fact of the mixture's tables (e.g. the
    sayings of `cf-quotes`) are all held out."""
    held = heldout_subjects(cfg)
    table_subjects = {f.subject for f in _facts()}
    out = {}
    for name in suites:
        items = [it for it in get_suite(name, seed=cfg.seed)
                 if it.subject in held or it.subject not in table_subjects]
        rng = random.Random(f"{cfg.seed}:{name}:tracked")
        if limit is not None and limit < len(items):
            keep = sorted(rng.sample(range(len(items)), limit))
            items = [items[i] for i in keep]
        out[name] = items
    return out


def _context_and_question(fact: Fact, answer: str, rng: random.Random) -> tuple[str, str]:
    if fact.relation == "capital_of":
        tpl = templates()["capitals"]
        fields = {"country": fact.subject, "answer": answer}
    else:
        tpl = templates()["world"][fact.relation]
        fields = {"subject": fact.subject, "Subject": fact.subject[:1].upper() +
                  fact.subject[1:], "answer": answer}
    context = rng.choice(tpl["context"]).format(**fields)
    return context[:1].upper() + context[1:], rng.choice(tpl["question"]).format(**fields)


def _row(kind: str, fact: Fact, rng: random.Random) -> Instruction:
    context, question = _context_and_question(fact, fact.answer, rng)
    return Instruction(instruction=f"Question: {question}\n{SHORT_ANSWER}",
                       input="" if kind == "S" else context, output=fact.answer,
                       extra={"kind": kind, "subject": fact.subject, "relation": fact.relation})


def _counts(cfg: MixtureConfig) -> dict[str, int]:
    total = cfg.c + cfg.cs + cfg.s
    raw = {"C": cfg.c / total, "C+S": cfg.cs / total, "S": cfg.s / total}
    counts = {k: int(v * cfg.size) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: raw[k] * cfg.size - counts[k], reverse=True):
        if sum(counts.values()) >= cfg.size:
            break
        counts[k] += 1
    return counts


def _made_up_facts(n: int, known: list[Fact], rng: random.Random) -> list[Fact]:
    """`n` facts about made-up subjects, answers drawn from the real answers of the relation
    (capitals get made-up cities too)."""
    relations = sorted(_MADE_UP)
    words = " ".join(make_names(n, rng, known_words())).split()
    by_rel: dict[str, list[str]] = {}
    for f in known:
        by_rel.setdefault(f.relation, []).append(f.answer)
    out = []
    for i in range(n):
        rel = relations[i % len(relations)]
        word = words[2 * i]
        subject = _MADE_UP[rel].format(W=word, w=word.lower())
        answer = words[2 * i + 1] if rel == "capital_of" else rng.choice(sorted(by_rel[rel]))
        out.append(Fact(rel, subject, answer))
    return out


def builtin_mixture(cfg: MixtureConfig = MixtureConfig()) -> list[Instruction]:
    """The mixture: `cfg.size` rows in the shares of C, C+S and S, shuffled by `cfg.seed`."""
    cfg.validate()
    held = heldout_subjects(cfg)
    real = [f for f in _facts() if f.subject not in held]
    rng = random.Random(f"{cfg.seed}:mixture")
    counts = _counts(cfg)
    rows = [_row("C", f, rng) for f in _made_up_facts(counts["C"], real, rng)]
    for kind in ("C+S", "S"):
        order = []
        while len(order) < counts[kind]:
            order += rng.sample(real, len(real))
        rows += [_row(kind, f, rng) for f in order[:counts[kind]]]
    rng.shuffle(rows)
    return rows


def heldout_rows(cfg: MixtureConfig, n: int) -> list[Instruction]:
    """In-distribution test rows the mixture never shows: `n` C rows (made-up subjects not in
    the mixture) and `n` C+S rows (held-out real subjects, agreeing context), C first."""
    held = heldout_subjects(cfg)
    facts = [f for f in _facts() if f.subject in held]
    trained = {r.extra["subject"] for r in builtin_mixture(cfg)}
    real = [f for f in _facts() if f.subject not in held]
    rng = random.Random(f"{cfg.seed}:mixture:heldout-rows")
    made_up = [f for f in _made_up_facts(2 * n, real, rng) if f.subject not in trained]
    rows = [_row("C", f, rng) for f in made_up[:n]]
    return rows + [_row("C+S", f, rng) for f in rng.sample(facts, min(n, len(facts)))]
