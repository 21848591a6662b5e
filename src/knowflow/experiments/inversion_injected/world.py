"""A world of made-up subjects whose facts are injected into a model by finetuning on plain text
(`inversion-injected`), then probed for context-parametric inversion.

Every subject (a two-syllable-word name from `data.people.make_names`, checked against every
word of the facts tables and of this world's own templates and values) has one fact over one of
a few relations (home city, job, sport, favourite colour; one-word values). Four groups:

- `mem_train`: facts injected in stage 1; stage 2's C+S points (agreeing context) and S points
  (no context) ask about them;
- `mem_eval`: facts injected in stage 1, never in stage 2: the counterfactual items (the
  context states another value of the relation) and the held-out C+S items;
- `unk_train`: never injected; stage 2's C points (the answer only in the context);
- `unk_eval`: never injected, never in stage 2: the held-out C items.

Stage 1's text states each memorized fact in `paraphrases` statement templates and, with
`qa_statement`, once more as a question-answer line in the layout stage 2 asks it in (a model
trained from scratch cannot link a statement to a question otherwise). Stage 2's rows are
Alpaca-form `Instruction`s (`kind`, `subject`, `relation` in `extra`), the same form as the
built-in mixture, so curation and the tracker treat them alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from knowflow.config import require
from knowflow.data.facts import ConflictItem, Instruction
from knowflow.data.instructions import MixtureShares
from knowflow.data.people import known_words, make_names
from knowflow.data.prompts import SHORT_ANSWER

# relation -> (question, statement templates, values); {name} and {value} are filled in
RELATIONS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "city": ("Which city does {name} live in?",
             ("{name} lives in {value}.", "{name} has a house in {value}.",
              "The home of {name} is in {value}.", "{name} was last seen at home in {value}."),
             ("Paris", "Berlin", "Madrid", "Rome", "Vienna", "Lisbon", "Prague", "Dublin")),
    "job": ("What is the job of {name}?",
            ("{name} works as a {value}.", "By trade {name} is a {value}.",
             "{name} earns a living as a {value}.", "Everyone knows {name} as a {value}."),
            ("doctor", "teacher", "farmer", "pilot", "baker", "lawyer", "painter", "nurse")),
    "sport": ("Which sport does {name} play?",
              ("{name} plays {value}.", "The sport of {name} is {value}.",
               "Every weekend {name} plays {value}.", "{name} is good at {value}."),
              ("football", "tennis", "chess", "golf", "hockey", "cricket", "rugby", "boxing")),
    "color": ("What is the favourite colour of {name}?",
              ("The favourite colour of {name} is {value}.", "{name} likes {value} best.",
               "{name} always wears {value}.", "Of all colours {name} loves {value}."),
              ("red", "blue", "green", "yellow", "purple", "orange", "black", "white")),
}
GROUPS = ("mem_train", "mem_eval", "unk_train", "unk_eval")


@dataclass(frozen=True)
class InjectedWorldConfig:
    relations: tuple[str, ...] = tuple(RELATIONS)
    values: int = 8              # values per relation (the first n; recall ranks among them)
    mem_train: int = 32          # injected; stage 2's C+S and S points
    mem_eval: int = 24           # injected, never in stage 2: counterfactual items
    unk_train: int = 32          # not injected; stage 2's C points
    unk_eval: int = 24           # not injected, never in stage 2: held-out C items
    paraphrases: int = 3         # statement templates per injected fact
    qa_statement: bool = True    # also one "Question: ... Answer: value" line per fact

    def validate(self, prefix: str = "world.") -> None:
        require(len(self.relations) >= 1, f"{prefix}relations", "give at least one relation")
        for r in self.relations:
            require(r in RELATIONS, f"{prefix}relations",
                    f"unknown relation {r!r} (known: {', '.join(RELATIONS)})")
        require(len(set(self.relations)) == len(self.relations), f"{prefix}relations",
                "relations must be distinct")
        require(2 <= self.values <= 8, f"{prefix}values", "must lie between 2 and 8")
        for g in GROUPS:
            require(getattr(self, g) >= 1, f"{prefix}{g}", "must be at least 1")
        require(1 <= self.paraphrases <= 4, f"{prefix}paraphrases", "must lie between 1 and 4")


@dataclass(frozen=True)
class Subject:
    name: str
    group: str          # one of GROUPS
    relation: str
    value: str
    other: str          # another value of the relation: the counterfactual or distractor


@dataclass(frozen=True)
class InjectedWorld:
    subjects: tuple[Subject, ...]
    cfg: InjectedWorldConfig

    def group(self, name: str) -> list[Subject]:
        return [s for s in self.subjects if s.group == name]

    def values(self, relation: str) -> tuple[str, ...]:
        return RELATIONS[relation][2][:self.cfg.values]


def _forbidden() -> frozenset[str]:
    words = set(known_words())
    for question, statements, values in RELATIONS.values():
        for text in (question, *statements, *values):
            words |= {w.lower() for w in text.replace(".", " ").replace("?", " ").split()}
    return frozenset(words)


def make_world(cfg: InjectedWorldConfig, seed: int) -> InjectedWorld:
    """The subjects of seed `seed`: groups in `GROUPS` order, relations taken in turn."""
    cfg.validate()
    rng = random.Random(f"{seed}:injected")
    sizes = [getattr(cfg, g) for g in GROUPS]
    names = make_names(sum(sizes), rng, _forbidden())
    subjects, i = [], 0
    for group, size in zip(GROUPS, sizes, strict=True):
        for k in range(size):
            rel = cfg.relations[k % len(cfg.relations)]
            values = RELATIONS[rel][2][:cfg.values]
            value, other = rng.sample(values, 2)
            subjects.append(Subject(names[i], group, rel, value, other))
            i += 1
    return InjectedWorld(tuple(subjects), cfg)


def question(s: Subject) -> str:
    return RELATIONS[s.relation][0].format(name=s.name)


def statement(s: Subject, template: int, value: str | None = None) -> str:
    return RELATIONS[s.relation][1][template].format(name=s.name,
                                                     value=s.value if value is None else value)


def instruction(s: Subject) -> str:
    """The instruction of every stage-2 row and tracked item about `s` (plain layout)."""
    return f"Question: {question(s)}\n{SHORT_ANSWER}"


def stage1_texts(world: InjectedWorld, seed: int) -> list[str]:
    """The injection text: every memorized fact in `paraphrases` statements (and the QA line),
    shuffled by `seed`."""
    rng = random.Random(f"{seed}:injected:stage1")
    texts = []
    for s in world.group("mem_train") + world.group("mem_eval"):
        picks = rng.sample(range(len(RELATIONS[s.relation][1])), world.cfg.paraphrases)
        texts += [statement(s, t) for t in sorted(picks)]
        if world.cfg.qa_statement:
            texts.append(f"Question: {question(s)}\nAnswer: {s.value}")
    rng.shuffle(texts)
    return texts


def _row(kind: str, s: Subject, rng: random.Random, value: str | None = None) -> Instruction:
    answer = s.value if value is None else value
    context = "" if kind == "S" else statement(s, rng.randrange(len(RELATIONS[s.relation][1])),
                                               answer)
    return Instruction(instruction=instruction(s), input=context, output=answer,
                       extra={"kind": kind, "subject": s.name, "relation": s.relation})


def kind_counts(mix: MixtureShares) -> dict[str, int]:
    """Rows per kind: the shares of `mix.size`, rounded so that they sum to it."""
    raw = {"C": mix.c * mix.size, "C+S": mix.cs * mix.size, "S": mix.s * mix.size}
    counts = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: raw[k] - counts[k], reverse=True)[
            :mix.size - sum(counts.values())]:
        counts[k] += 1
    return counts


def _cycle(subjects: list[Subject], n: int, rng: random.Random) -> list[Subject]:
    out: list[Subject] = []
    while len(out) < n:
        out += rng.sample(subjects, len(subjects))
    return out[:n]


def stage2_rows(world: InjectedWorld, mix: MixtureShares, seed: int, augment: int = 0
                ) -> list[Instruction]:
    """Stage 2's rows: C rows about `unk_train` subjects, C+S and S rows about `mem_train`
    subjects in the shares of `mix`, plus `augment` counterfactual rows (kind CF: a
    `mem_train` subject, a context stating another value, answered from the context)."""
    rng = random.Random(f"{seed}:injected:stage2")
    counts = kind_counts(mix)
    rows = [_row("C", s, rng) for s in _cycle(world.group("unk_train"), counts["C"], rng)]
    for kind in ("C+S", "S"):
        rows += [_row(kind, s, rng) for s in _cycle(world.group("mem_train"), counts[kind], rng)]
    for s in _cycle(world.group("mem_train"), augment, rng) if augment else []:
        other = rng.choice([v for v in world.values(s.relation) if v != s.value])
        rows.append(_row("CF", s, rng, other))
    rng.shuffle(rows)
    return rows


def _item(suite: str, s: Subject, template: int, context_value: str | None, other: str
          ) -> ConflictItem:
    context = "" if context_value is None else statement(s, template, context_value)
    answer = s.value if context_value is None else context_value
    return ConflictItem(id=f"{suite}-{s.name}", suite=suite, context=context,
                        question=f"{question(s)}", counterfactual_answer=answer,
                        parametric_answer=other, relation=s.relation, subject=s.name)


def tracked_items(world: InjectedWorld) -> dict[str, list[ConflictItem]]:
    """The tracked items, by set:
    - `counterfactual`: `mem_eval` subjects, the context states `other`: counterfactual_answer
      is the context's value, parametric_answer the injected one;
    - `C` (`unk_eval`) and `C+S` (`mem_eval`, agreeing context): counterfactual_answer is the
      right (context's) value, parametric_answer the subject's distractor.
    Contexts use the first statement template (the one the evaluation always shows)."""
    mem, unk = world.group("mem_eval"), world.group("unk_eval")
    return {"counterfactual": [ConflictItem(
                id=f"cf-{s.name}", suite="counterfactual", context=statement(s, 0, s.other),
                question=question(s), counterfactual_answer=s.other, parametric_answer=s.value,
                relation=s.relation, subject=s.name) for s in mem],
            "C": [_item("C", s, 0, s.value, s.other) for s in unk],
            "C+S": [_item("C+S", s, 0, s.value, s.other) for s in mem]}


def mentioned(rows: list[Instruction], names: list[str]) -> list[str]:
    """The `names` that any row's text mentions (stage 2 must mention no held-out subject)."""
    text = "\n".join(f"{r.instruction}\n{r.input}\n{r.output}" for r in rows)
    return [n for n in names if n in text]
