"""Made-up people with facts and implications: out-of-context reasoning in real language models
(Huang et al. 2025, sec. 3).

Each person belongs to one family and has one fact (lives in Paris) and its implication
(speaks French). Training text states every person's fact, but the implication of only a
`train_fraction` of each family's people, chosen per (family, pair) group so every pair shows
at least one implication; the held-out people's implications are the test. Inferring them
needs out-of-context reasoning: linking a person's fact to an implication seen only for others.

The families (`data/files/ocr_families.json`) are city -> language and country -> international
calling code (causal), a counterfactual city -> language (a fixed wrong mapping: each city
takes the language of the next selected city), profession -> color and sport -> music
(arbitrary pairings). Each has several paraphrased templates for the fact and the
implication sentence.

Names are built from syllables, distinct word by word, and checked against every word of the
shipped facts tables and the families file, so no model has seen them with any fact. An
evaluation item is the implication sentence cut before the answer: the prompt ("Vor Kelim
speaks"), the correct answer and the family's candidates, scored as continuations.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache
from typing import Literal

from knowflow.config import require
from knowflow.data.facts import _data_file, read_table
from knowflow.errors import DataError
from knowflow.store.readers import decode_json, read_text

FAMILY_NAMES = ("city_language", "cf_city_language", "country_code", "profession_color",
                "sport_music")
FAMILIES_FILE = "ocr_families.json"
FACT_TABLES = ("capitals.tsv", "world.tsv", "bio.tsv", "quotes.tsv")
Split = Literal["train", "test"]
Kind = Literal["implication", "fact"]

# Syllables of the made-up names: onset + vowel + optional coda.
ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br",
          "dr", "kr", "tr", "th")
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o")
CODAS = ("", "", "", "n", "r", "l", "s", "m", "k")


@dataclass(frozen=True)
class FamilySpec:
    """One family as the data file states it (all pairs, before selection)."""

    name: str
    causal: bool
    description: str
    pairs: tuple[tuple[str, str], ...]
    fact_templates: tuple[str, ...]
    implication_templates: tuple[str, ...]
    shift_answers: int = 0


@dataclass(frozen=True)
class Family:
    """A family as a run uses it: its first K pairs (counterfactual shift applied)."""

    name: str
    causal: bool
    pairs: tuple[tuple[str, str], ...]  # (fact, implication), K of them
    fact_templates: tuple[str, ...]
    implication_templates: tuple[str, ...]
    # counterfactual families: each fact's real-world implication (the data file's pairing)
    prior: tuple[tuple[str, str], ...] = ()

    @property
    def facts(self) -> tuple[str, ...]:
        return tuple(f for f, _ in self.pairs)

    @property
    def candidates(self) -> tuple[str, ...]:
        """The implication answers every evaluation item of this family ranks."""
        return tuple(c for _, c in self.pairs)


@dataclass(frozen=True)
class Person:
    name: str
    family: str
    fact: str
    implication: str
    split: Split  # "train": implication shown in training; "test": held out
    fact_templates: tuple[int, ...]  # templates its fact is written with in training
    implication_templates: tuple[int, ...]  # ... and its implication (train people only)


@dataclass(frozen=True)
class EvalItem:
    """One ranking question: `prompt` + " " + candidate (+ `suffix`) for each candidate."""

    person: str
    family: str
    split: Split
    kind: Kind
    template: int
    prompt: str  # the sentence before the answer, without its trailing space
    answer: str
    candidates: tuple[str, ...]
    suffix: str  # the sentence after the answer (usually ".")
    prior_answer: str = ""  # counterfactual families: the real-world implication

    @property
    def correct(self) -> int:
        return self.candidates.index(self.answer)

    def continuations(self, with_suffix: bool = False) -> list[str]:
        """" answer" per candidate; with the suffix, the rest of the completed sentence."""
        return [f" {c}{self.suffix if with_suffix else ''}" for c in self.candidates]

    def sentence(self, answer: str | None = None) -> str:
        return f"{self.prompt} {self.answer if answer is None else answer}{self.suffix}"


@dataclass(frozen=True)
class OcrPeopleConfig:
    families: tuple[str, ...] = FAMILY_NAMES
    pairs_per_family: int = 6  # K: candidates of each family's ranking
    people_per_family: int = 30
    train_fraction: float = 0.2  # people per (family, pair) with their implication shown
    fact_paraphrases: int = 2  # fact templates each person's fact is written with
    implication_paraphrases: int = 2  # ... and each train person's implication
    eval_templates: int = 1  # implication templates evaluated (the first n); 0 = all
    eval_facts: bool = True  # also rank each person's fact (was it learned?)
    families_file: str = ""  # "" = the shipped data/files/ocr_families.json
    seed: int = 0

    def validate(self, prefix: str = "") -> None:
        """Raise ConfigError naming the field (with `prefix`, e.g. "world.") if impossible."""
        p = prefix
        require(len(self.families) >= 1, f"{p}families", "give at least one family")
        require(len(set(self.families)) == len(self.families), f"{p}families",
                "families must be distinct")
        specs = load_families(self.families_file or None)
        for name in self.families:
            require(name in specs, f"{p}families",
                    f"unknown family {name!r} (known: {', '.join(specs)})")
        require(self.pairs_per_family >= 2, f"{p}pairs_per_family",
                f"must be at least 2 (a ranking needs two candidates), got "
                f"{self.pairs_per_family}")
        for name in self.families:
            n = len(specs[name].pairs)
            require(self.pairs_per_family <= n, f"{p}pairs_per_family",
                    f"{self.pairs_per_family} pairs asked, but family {name!r} has only {n} "
                    "candidates")
        require(0 < self.train_fraction < 1, f"{p}train_fraction",
                f"must lie strictly between 0 and 1, got {self.train_fraction}")
        require(self.people_per_family >= 2 * self.pairs_per_family, f"{p}people_per_family",
                f"{self.people_per_family} people cannot split {self.pairs_per_family} pairs "
                f"into train and test people (need at least {2 * self.pairs_per_family}: one "
                "of each per pair)")
        for field, count, attr in (("fact_paraphrases", self.fact_paraphrases,
                                    "fact_templates"),
                                   ("implication_paraphrases", self.implication_paraphrases,
                                    "implication_templates"),
                                   ("eval_templates", self.eval_templates,
                                    "implication_templates")):
            least = 0 if field == "eval_templates" else 1
            require(count >= least, f"{p}{field}", f"must be at least {least}, got {count}")
            for name in self.families:
                n = len(getattr(specs[name], attr))
                require(count <= n, f"{p}{field}",
                        f"{count} asked, but family {name!r} has {n} {attr.replace('_', ' ')}")


@dataclass(frozen=True)
class OcrPeopleData:
    families: tuple[Family, ...]
    people: tuple[Person, ...]
    train_texts: tuple[str, ...]  # one sentence each, shuffled
    eval_items: tuple[EvalItem, ...]

    def family(self, name: str) -> Family:
        return next(f for f in self.families if f.name == name)


# --- the families file -------------------------------------------------------------------

def _check_template(path, where: str, template: str, slot: str) -> None:
    fields = re.findall(r"{(\w*)}", template)
    if sorted(fields) != sorted(["name", slot]):
        raise DataError(path, f"needs {{name}} and {{{slot}}} once each and no other field: "
                        f"{template!r}", field=where)
    if template.index("{name}") > template.index(f"{{{slot}}}"):
        raise DataError(path, f"{{name}} must come before {{{slot}}}: {template!r}", field=where)
    if template[template.index(f"{{{slot}}}") - 1] != " ":
        raise DataError(path, f"{{{slot}}} must follow a space: {template!r}", field=where)


def _parse_family(path, name: str, raw) -> FamilySpec:
    if not isinstance(raw, dict):
        raise DataError(path, "must be an object", field=name)
    for key in ("pairs", "fact_templates", "implication_templates"):
        if not isinstance(raw.get(key), list) or not raw[key]:
            raise DataError(path, "must be a non-empty list", field=f"{name}.{key}")
    pairs = []
    for i, pair in enumerate(raw["pairs"]):
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(x, str) and x.strip() for x in pair)):
            raise DataError(path, f"must be [fact, implication], got {pair!r}",
                            field=f"{name}.pairs[{i}]")
        pairs.append((pair[0].strip(), pair[1].strip()))
    for col, what in ((0, "fact"), (1, "implication")):
        values = [p[col] for p in pairs]
        if len(set(values)) != len(values):
            raise DataError(path, f"a {what} appears twice", field=f"{name}.pairs")
    for key, slot in (("fact_templates", "fact"), ("implication_templates", "answer")):
        for i, t in enumerate(raw[key]):
            if not isinstance(t, str):
                raise DataError(path, "must be a string", field=f"{name}.{key}[{i}]")
            _check_template(path, f"{name}.{key}[{i}]", t, slot)
    shift = raw.get("shift_answers", 0)
    if not isinstance(shift, int) or isinstance(shift, bool) or shift < 0:
        raise DataError(path, f"must be a non-negative integer, got {shift!r}",
                        field=f"{name}.shift_answers")
    return FamilySpec(name, bool(raw.get("causal", False)), str(raw.get("description", "")),
                      tuple(pairs), tuple(raw["fact_templates"]),
                      tuple(raw["implication_templates"]), shift)


@cache
def load_families(path: str | None = None) -> dict[str, FamilySpec]:
    """Families of a JSON file (default: the shipped one); keys starting with _ are comments."""
    where = path or FAMILIES_FILE
    try:
        raw = decode_json(read_text(_data_file(FAMILIES_FILE) if path is None else path), where)
    except FileNotFoundError:
        raise DataError(where, "no such file") from None
    if not isinstance(raw, dict):
        raise DataError(where, "must be a JSON object of families")
    specs = {k: _parse_family(where, k, v) for k, v in raw.items() if not k.startswith("_")}
    if not specs:
        raise DataError(where, "defines no family")
    return specs


def select_family(spec: FamilySpec, k: int) -> Family:
    """The first `k` pairs; a counterfactual family pairs fact i with implication i + shift."""
    pairs = spec.pairs[:k]
    if not spec.shift_answers % k:
        return Family(spec.name, spec.causal, tuple(pairs), spec.fact_templates,
                      spec.implication_templates)
    shifted = tuple((f, pairs[(i + spec.shift_answers) % k][1]) for i, (f, _) in enumerate(pairs))
    return Family(spec.name, spec.causal, shifted, spec.fact_templates,
                  spec.implication_templates, tuple(pairs))


# --- names ------------------------------------------------------------------------------

def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]+", text)}


def known_words(specs: dict[str, FamilySpec] | None = None) -> frozenset[str]:
    """Every word (lowercase) of the shipped facts tables and of the families' data."""
    words: set[str] = set()
    for table in FACT_TABLES:
        for row in read_table(table):
            for value in row.values():
                words |= _words(value)
    for spec in (specs or load_families()).values():
        for pair in spec.pairs:
            words |= _words(" ".join(pair))
        for t in spec.fact_templates + spec.implication_templates:
            words |= _words(t)
    return frozenset(words)


def _name_word(rng: random.Random) -> str:
    syllables = rng.choice((2, 2, 2, 3))
    word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                   for _ in range(syllables))
    return word.capitalize()


def make_names(n: int, rng: random.Random, forbidden: frozenset[str] | set[str] = frozenset()
               ) -> list[str]:
    """`n` two-word names; no word repeats or is (case-insensitively) in `forbidden`."""
    used: set[str] = set()
    names = []
    tries = 0
    while len(names) < n:
        words = []
        while len(words) < 2:
            tries += 1
            if tries > 1000 * (n + 10):
                raise RuntimeError(f"could not draw {n} distinct names")
            w = _name_word(rng)
            if w.lower() not in forbidden and w.lower() not in used:
                used.add(w.lower())
                words.append(w)
        names.append(" ".join(words))
    return names


# --- the data set -----------------------------------------------------------------------

def render(template: str, name: str, value: str) -> str:
    return template.replace("{name}", name).replace("{fact}", value).replace("{answer}", value)


def _item(person: Person, family: Family, kind: Kind, template_index: int) -> EvalItem:
    if kind == "implication":
        template, slot = family.implication_templates[template_index], "{answer}"
        answer, candidates = person.implication, family.candidates
    else:
        template, slot = family.fact_templates[template_index], "{fact}"
        answer, candidates = person.fact, family.facts
    before, after = template.split(slot)
    prior = dict(family.prior).get(person.fact, "") if kind == "implication" else ""
    return EvalItem(person.name, family.name, person.split, kind, template_index,
                    before.replace("{name}", person.name).rstrip(), answer, candidates,
                    after.replace("{name}", person.name), prior)


def _people(family: Family, names: list[str], cfg: OcrPeopleConfig, rng: random.Random
            ) -> list[Person]:
    k = len(family.pairs)
    people = []
    for pair in range(k):
        group = names[pair::k]
        n_train = min(max(round(cfg.train_fraction * len(group)), 1), len(group) - 1)
        fact, implication = family.pairs[pair]
        for i, name in enumerate(group):
            facts = tuple(sorted(rng.sample(range(len(family.fact_templates)),
                                            cfg.fact_paraphrases)))
            impls = tuple(sorted(rng.sample(range(len(family.implication_templates)),
                                            cfg.implication_paraphrases)))
            split: Split = "train" if i < n_train else "test"
            people.append(Person(name, family.name, fact, implication, split, facts,
                                 impls if split == "train" else ()))
    return people


def generate(cfg: OcrPeopleConfig) -> OcrPeopleData:
    """People, training sentences and evaluation items of `cfg` (validated first)."""
    cfg.validate()
    specs = load_families(cfg.families_file or None)
    families = tuple(select_family(specs[n], cfg.pairs_per_family) for n in cfg.families)
    rng = random.Random(cfg.seed)
    per = cfg.people_per_family
    names = make_names(per * len(families), rng, known_words(specs))
    people: list[Person] = []
    texts: list[str] = []
    items: list[EvalItem] = []
    for f, family in enumerate(families):
        for person in _people(family, names[f * per:(f + 1) * per], cfg, rng):
            people.append(person)
            texts += [render(family.fact_templates[t], person.name, person.fact)
                      for t in person.fact_templates]
            texts += [render(family.implication_templates[t], person.name, person.implication)
                      for t in person.implication_templates]
            n_eval = cfg.eval_templates or len(family.implication_templates)
            items += [_item(person, family, "implication", t) for t in range(n_eval)]
            if cfg.eval_facts:
                items.append(_item(person, family, "fact", person.fact_templates[0]))
    rng.shuffle(texts)
    data = OcrPeopleData(families, tuple(people), tuple(texts), tuple(items))
    problems = leaks(data)
    if problems:  # a bug in this module, never bad input
        raise RuntimeError(f"held-out implication in training text: {problems[0]}")
    return data


def leaks(data: OcrPeopleData) -> list[str]:
    """Training texts that mention a test person other than by one of their fact sentences."""
    by_family = {f.name: f for f in data.families}
    out = []
    for person in data.people:
        if person.split != "test":
            continue
        family = by_family[person.family]
        allowed = {render(family.fact_templates[t], person.name, person.fact)
                   for t in person.fact_templates}
        out += [t for t in data.train_texts if person.name in t and t not in allowed]
    return out
