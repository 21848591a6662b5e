"""A synthetic knowledge world for training small transformers from scratch, with exact ground
truth: which facts a model was shown in pretraining, and which contexts conflict with them.

Subjects (`s017`), relations (`r2`) and attribute values (`v41`) are single words; every
(subject, relation) pair has one true value. Subjects fall into disjoint groups:

- `mem_train`: memorized (their facts are in the pretraining text) and used in finetuning
  (C+S, S and counterfactual-augmentation examples);
- `mem_eval`: memorized, never in finetuning: the counterfactual evaluation set (a context
  that contradicts memory), held-out C+S items, and recall without context;
- `unk_train`: never in pretraining, used for context-critical (C) finetuning examples;
- `unk_eval`: never in pretraining nor finetuning: held-out C items;
- `scratch`: only in the pretraining lookup documents and as context distractors, each time
  with random values (they teach reading a list of facts, never a fixed fact).

Pretraining text (packed as documents of `facts_per_doc` statements `s r v .`):
fact documents state memorized facts; lookup documents end with random statements (about
scratch or memorized subjects) and then repeat one, so predicting its value means reading it
back, even where it contradicts what the model memorized. Some lookups about a memorized
subject end instead in a quiz line, `question s r v` with the *memorized* v: the word
`question` then asks for memory, whatever the text said, so the pretrained model answers the
finetuning layout from memory (counterfactual accuracy starts near 0) while it can read
statements back in the pretraining layout.

Finetuning prompts use a layout never seen in pretraining:
`<bos> context s' r' v' . [distractors] question s r` -> `v`, or without context
`<bos> question s r` -> `v`. The model predicts the answer as the next token after `r`.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from knowflow.config import option, require
from knowflow.data.instructions import MixtureShares

BOS, PAD, UNK, EOS = "<bos>", "<pad>", "<unk>", "<eos>"
STOP, CONTEXT, QUESTION = ".", "context", "question"
SPECIALS = (PAD, UNK, BOS, EOS)
FORMAT_WORDS = (STOP, CONTEXT, QUESTION)
GROUPS = ("mem_train", "mem_eval", "unk_train", "unk_eval", "scratch")


@dataclass(frozen=True)
class TinyWorldConfig:
    n_relations: int = option(2, ge=1)
    n_values: int = option(40, ge=2)
    mem_train: int = option(120, ge=1)  # memorized subjects used in finetuning
    mem_eval: int = option(60, ge=1)  # memorized subjects for counterfactual / held-out evaluation
    unk_train: int = option(120, ge=1)  # unknown subjects for C examples
    unk_eval: int = option(60, ge=1)  # unknown subjects for held-out C evaluation
    scratch: int = 60  # subjects of the lookup documents
    # statements in a finetuning context (1 = the target only)
    context_facts: int = option(1, ge=1)


@dataclass(frozen=True)
class Example:
    """One prompt and its one-token answer; `context` and `subject` are token positions."""

    kind: str
    tokens: tuple[str, ...]  # the prompt, <bos> included, answer excluded
    answer: str
    memory: str  # the subject's true value (the parametric answer)
    context: tuple[int, int] | None  # [start, end) of the context statements
    subject: int  # position of the question's subject token


@dataclass(frozen=True)
class World:
    cfg: TinyWorldConfig
    seed: int
    groups: dict[str, tuple[str, ...]]
    relations: tuple[str, ...]
    values: tuple[str, ...]
    facts: dict[tuple[str, str], str] = field(repr=False)

    @property
    def vocab(self) -> list[str]:
        """Every word the world uses; specials first, so their ids are fixed."""
        subjects = [s for g in GROUPS for s in self.groups[g]]
        return [*SPECIALS, *FORMAT_WORDS, *self.relations, *self.values, *sorted(subjects)]

    def memorized_facts(self) -> list[tuple[str, str, str]]:
        """(s, r, v) for every fact stated in the pretraining text."""
        return [(s, r, self.facts[s, r]) for g in ("mem_train", "mem_eval")
                for s in self.groups[g] for r in self.relations]


def make_world(cfg: TinyWorldConfig, seed: int) -> World:
    """Draw the subject split and one true value per (subject, relation)."""
    rng = random.Random(f"tiny-world-{seed}")
    sizes = {g: getattr(cfg, g) for g in GROUPS}
    names = [f"s{i:03d}" for i in range(sum(sizes.values()))]
    rng.shuffle(names)
    groups, start = {}, 0
    for g in GROUPS:
        groups[g] = tuple(names[start:start + sizes[g]])
        start += sizes[g]
    relations = tuple(f"r{i}" for i in range(cfg.n_relations))
    values = tuple(f"v{i:02d}" for i in range(cfg.n_values))
    facts = {(s, r): rng.choice(values) for g in GROUPS if g != "scratch"
             for s in groups[g] for r in relations}
    return World(cfg, seed, groups, relations, values, facts)


def _statement(s: str, r: str, v: str) -> list[str]:
    return [s, r, v, STOP]


def pretraining_documents(world: World, n_docs: int, facts_per_doc: int, lookup_share: float,
                          rng: random.Random, lookup_facts: int = 2,
                          lookup_memorized: float = 0.0, lookup_reliability: float = 1.0,
                          quiz_share: float = 0.0) -> list[list[str]]:
    """`n_docs` documents of `facts_per_doc` statements each: fact documents (memorized facts)
    and, a `lookup_share` of them, lookup documents, which end with `lookup_facts - 1` random
    statements and then one of those repeated (the rest of a lookup document is memorized
    facts, so every document has the same length). A lookup statement's subject is a memorized
    subject (`mem_train` or `mem_eval`) with probability `lookup_memorized`, else a scratch
    subject; its value is random either way, so a lookup about a memorized subject usually
    contradicts memory and teaches, in the pretraining layout, that a value stated in the text
    overrides a stored one. (With lookups about `mem_train` subjects only, a model learns that
    per subject and never overrides memory for `mem_eval` subjects.) The repeat keeps the
    stated value with probability `lookup_reliability` (else another value), which sets how
    far the model trusts a text it reads, as delta_C does in the theory model. With
    probability `quiz_share` a lookup whose repeated statement is about a memorized subject
    ends in the quiz line `question s r m` (m: the memorized value, no stop) instead."""
    facts = world.memorized_facts()
    memorized = world.groups["mem_train"] + world.groups["mem_eval"]
    docs = []
    for _ in range(n_docs):
        doc = [BOS]
        n_lookup = lookup_facts if rng.random() < lookup_share else 0
        for fact in rng.sample(facts, facts_per_doc - n_lookup):
            doc += _statement(*fact)
        if n_lookup:
            subjects = [rng.choice(memorized) if rng.random() < lookup_memorized
                        else rng.choice(world.groups["scratch"]) for _ in range(n_lookup - 1)]
            while len(set(subjects)) < len(subjects):  # distinct subjects within a lookup
                subjects = [s if s not in subjects[:i] else rng.choice(world.groups["scratch"])
                            for i, s in enumerate(subjects)]
            stated = [(s, rng.choice(world.relations), rng.choice(world.values))
                      for s in subjects]
            for fact in stated:
                doc += _statement(*fact)
            s, r, v = rng.choice(stated)
            if quiz_share > 0 and (s, r) in world.facts and rng.random() < quiz_share:
                # a quiz line asks the stored fact, whatever the text said
                doc += [QUESTION, s, r, world.facts[s, r]]
                docs.append(doc)
                continue
            if rng.random() >= lookup_reliability:  # an unreliable text: the repeat differs
                v = _other_value(world, v, rng)
            doc += _statement(s, r, v)
        docs.append(doc)
    return docs


def _other_value(world: World, value: str, rng: random.Random) -> str:
    while True:
        other = rng.choice(world.values)
        if other != value:
            return other


def make_example(world: World, kind: str, s: str, r: str, rng: random.Random) -> Example:
    """A finetuning or evaluation prompt of `kind` about (s, r)."""
    memory = world.facts[s, r]
    if kind == "C" and s in world.groups["unk_train"]:
        # a finetuning C example states a fresh value each time, so the answer can only come
        # from the context (an unknown subject has no fact to memorize across epochs)
        memory = rng.choice(world.values)
    if kind == "S":
        tokens = (BOS, QUESTION, s, r)
        return Example(kind, tokens, memory, memory, None, 2)
    answer = _other_value(world, memory, rng) if kind == "CF" else memory
    statements = [(s, r, answer)]
    others = rng.sample(world.groups["scratch"], world.cfg.context_facts - 1)
    statements += [(o, rng.choice(world.relations), rng.choice(world.values)) for o in others]
    rng.shuffle(statements)
    tokens = [BOS, CONTEXT]
    for st in statements:
        tokens += _statement(*st)
    span = (2, len(tokens))
    tokens += [QUESTION, s, r]
    return Example(kind, tuple(tokens), answer, memory, span, len(tokens) - 2)


def no_context(ex: Example) -> Example:
    """The same question without its context (what filtering scores)."""
    s, r = ex.tokens[-2], ex.tokens[-1]
    return Example(ex.kind, (BOS, QUESTION, s, r), ex.answer, ex.memory, None, 2)


@dataclass(frozen=True)
class Mixture(MixtureShares):
    """Finetuning set composition (`schema.MixtureShares`): `size` examples split into C, C+S
    and S by the shares `c`, `cs`, `s`, plus `aug` counterfactual-augmentation examples
    (memorized subjects, conflicting context). `c_reliability` is the share of C examples
    whose answer is the value their context states (the rest answer another value): how far a
    context can be trusted in the finetuning data, the finetuning-time delta_C of the theory
    model."""

    size: int = 4800
    c: float = 0.05
    cs: float = 0.75
    s: float = 0.2
    aug: int = 0
    c_reliability: float = 1.0

    def validate(self, prefix: str = "mixture.") -> None:
        super().validate(prefix)
        require(self.aug >= 0, f"{prefix}aug", "must not be negative")
        require(0 < self.c_reliability <= 1, f"{prefix}c_reliability", "must lie in (0, 1]")


def finetuning_set(world: World, mix: Mixture, seed: int) -> list[Example]:
    """Examples from `mem_train` and `unk_train` subjects only (never the eval groups)."""
    rng = random.Random(f"tiny-sft-{world.seed}-{seed}")
    noise = random.Random(f"tiny-sft-noise-{world.seed}-{seed}")  # apart: same set at 1.0
    n_c = round(mix.size * mix.c)
    n_s = round(mix.size * mix.s)
    n_cs = mix.size - n_c - n_s if mix.cs > 0 else 0
    pairs = {g: [(s, r) for s in world.groups[g] for r in world.relations]
             for g in ("mem_train", "unk_train")}
    out = []
    for kind, n, group in (("C", n_c, "unk_train"), ("C+S", n_cs, "mem_train"),
                           ("S", n_s, "mem_train"), ("CF", mix.aug, "mem_train")):
        for i in range(n):
            if i % len(pairs[group]) == 0:
                rng.shuffle(pairs[group])
            s, r = pairs[group][i % len(pairs[group])]
            ex = make_example(world, kind, s, r, rng)
            if kind == "C" and noise.random() >= mix.c_reliability:  # an unreliable context
                ex = dataclasses.replace(ex, answer=_other_value(world, ex.answer, noise))
            out.append(ex)
    rng.shuffle(out)
    return out


def evaluation_sets(world: World, seed: int) -> dict[str, list[Example]]:
    """Fixed held-out sets: `cf` (mem_eval subjects, conflicting context), `cs` (mem_eval,
    agreeing context), `c` (unk_eval, answer only in the context), `recall` (mem_eval, no
    context). One example per (subject, relation)."""
    rng = random.Random(f"tiny-eval-{world.seed}-{seed}")
    mem = [(s, r) for s in world.groups["mem_eval"] for r in world.relations]
    unk = [(s, r) for s in world.groups["unk_eval"] for r in world.relations]
    return {"cf": [make_example(world, "CF", s, r, rng) for s, r in mem],
            "cs": [make_example(world, "C+S", s, r, rng) for s, r in mem],
            "c": [make_example(world, "C", s, r, rng) for s, r in unk],
            "recall": [make_example(world, "S", s, r, rng) for s, r in mem]}
