"""Made-up people for out-of-context reasoning: no held-out implication ever reaches the training
text (checked over many configs), names collide with nothing, splits and items are consistent,
and impossible configs or malformed families files fail with an error naming the field."""

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowflow.data.people import (
    FAMILY_NAMES,
    OcrPeopleConfig,
    generate,
    known_words,
    load_families,
    make_names,
    render,
)
from knowflow.errors import ConfigError, DataError


@st.composite
def configs(draw):
    families = draw(st.lists(st.sampled_from(FAMILY_NAMES), min_size=1, max_size=5,
                             unique=True))
    k = draw(st.integers(2, 12))
    return OcrPeopleConfig(
        families=tuple(families), pairs_per_family=k,
        people_per_family=draw(st.integers(2 * k, 3 * k + 5)),
        train_fraction=draw(st.floats(0.05, 0.95)),
        fact_paraphrases=draw(st.integers(1, 4)),
        implication_paraphrases=draw(st.integers(1, 3)),
        eval_templates=draw(st.integers(0, 3)), seed=draw(st.integers(0, 10_000)))


@settings(max_examples=60, deadline=None)
@given(configs())
def test_held_out_implications_never_in_training_text(cfg):
    data = generate(cfg)
    text = "\n".join(data.train_texts)
    for person in data.people:
        family = data.family(person.family)
        own = [t for t in data.train_texts if person.name in t]
        facts = {render(family.fact_templates[i], person.name, person.fact)
                 for i in person.fact_templates}
        impls = {render(t, person.name, person.implication)
                 for t in family.implication_templates}
        assert facts <= set(own)  # every person's fact is trained
        if person.split == "test":
            assert set(own) == facts  # nothing else mentions a test person
            assert not any(s in text for s in impls)
            # not even the implication with another wording or a wrong answer
            for t in family.implication_templates:
                before = t.split("{answer}")[0].replace("{name}", person.name)
                assert before not in text
        else:
            assert set(own) - facts  # a train person's implication is shown
            assert set(own) - facts <= impls
    # the eval items follow the people, and the correct answer is among the candidates
    people = {p.name: p for p in data.people}
    for item in data.eval_items:
        person = people[item.person]
        assert item.split == person.split and item.family == person.family
        assert item.candidates[item.correct] == item.answer
        assert item.sentence().startswith(item.prompt + " ")
        trained = person.implication_templates if item.kind == "implication" else \
            person.fact_templates
        assert (item.sentence() in data.train_texts) == (item.template in trained)


@settings(max_examples=30, deadline=None)
@given(configs())
def test_split_is_by_person_and_covers_every_pair(cfg):
    data = generate(cfg)
    for family in data.families:
        people = [p for p in data.people if p.family == family.name]
        assert len(people) == cfg.people_per_family
        for fact, implication in family.pairs:
            group = [p for p in people if p.fact == fact]
            assert all(p.implication == implication for p in group)
            splits = {p.split for p in group}
            assert splits == {"train", "test"}  # every pair has a shown and a held-out person


def test_default_split_is_twenty_percent_and_deterministic():
    cfg = OcrPeopleConfig()
    data = generate(cfg)
    share = sum(p.split == "train" for p in data.people) / len(data.people)
    assert share == pytest.approx(0.2)
    assert generate(cfg) == data
    assert generate(OcrPeopleConfig(seed=1)).people != data.people


def test_counterfactual_family_is_a_wrong_mapping_of_its_own_candidates():
    data = generate(OcrPeopleConfig())
    true = dict(load_families()["cf_city_language"].pairs)
    cf = data.family("cf_city_language")
    assert set(cf.candidates) == {true[f] for f in cf.facts}
    assert all(true[f] != c for f, c in cf.pairs)
    assert data.family("city_language").pairs == load_families()["city_language"].pairs[:6]
    for item in data.eval_items:
        if item.family == "cf_city_language" and item.kind == "implication":
            person = next(p for p in data.people if p.name == item.person)
            assert item.prior_answer == true[person.fact] != item.answer
            assert item.prior_answer in item.candidates
        else:
            assert item.prior_answer == ""


def test_names_are_new_words_and_never_collide():
    data = generate(OcrPeopleConfig(people_per_family=60, pairs_per_family=12))
    words = [w for p in data.people for w in p.name.split()]
    assert len(words) == len({w.lower() for w in words}) == 2 * len(data.people)
    known = known_words()
    assert {"paris", "french", "einstein", "tennis"} <= known
    assert not {w.lower() for w in words} & known
    # a forbidden word is never drawn, even when the generator keeps proposing it
    rng = random.Random(0)
    first = make_names(1, random.Random(0))[0].split()[0].lower()
    names = make_names(50, rng, forbidden={first})
    assert first not in {w.lower() for n in names for w in n.split()}
    assert all(re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", n) for n in names)


@pytest.mark.parametrize("changes, field", [
    ({"train_fraction": 0.0}, "world.train_fraction"),
    ({"train_fraction": 1.0}, "world.train_fraction"),
    ({"people_per_family": 11, "pairs_per_family": 6}, "world.people_per_family"),
    ({"families": ()}, "world.families"),
    ({"families": ("city_language", "nope")}, "world.families"),
    ({"families": ("sport_music", "sport_music")}, "world.families"),
    ({"pairs_per_family": 0}, "world.pairs_per_family"),
    ({"people_per_family": 0}, "world.people_per_family"),
    ({"pairs_per_family": 13, "people_per_family": 40}, "world.pairs_per_family"),
    ({"fact_paraphrases": 5}, "world.fact_paraphrases"),
    ({"implication_paraphrases": 0}, "world.implication_paraphrases"),
    ({"eval_templates": 4}, "world.eval_templates"),
])
def test_impossible_configs_name_the_field(changes, field):
    with pytest.raises(ConfigError) as exc:
        OcrPeopleConfig(**changes).validate("world.")
    assert exc.value.field == field
    assert "\n" not in str(exc.value)


def _family(**over):
    fam = {"pairs": [["Aa", "Bb"], ["Cc", "Dd"]], "fact_templates": ["{name} is in {fact}."],
           "implication_templates": ["{name} likes {answer}."]}
    return {**fam, **over}


@pytest.mark.parametrize("family, field", [
    (_family(pairs=[]), "f.pairs"),
    (_family(pairs=[["Aa"]]), "f.pairs[0]"),
    (_family(pairs=[["Aa", "Bb"], ["Aa", "Dd"]]), "f.pairs"),
    (_family(fact_templates=["{fact} is where {name} lives."]), "f.fact_templates[0]"),
    (_family(implication_templates=["{name} likes{answer}."]), "f.implication_templates[0]"),
    (_family(implication_templates=["{name} likes {answer} and {color}."]),
     "f.implication_templates[0]"),
    (_family(shift_answers=-1), "f.shift_answers"),
])
def test_malformed_families_file(tmp_path, family, field):
    path = tmp_path / "fam.json"
    path.write_text(json.dumps({"f": family}))
    with pytest.raises(DataError) as exc:
        load_families(str(path))
    assert exc.value.field == field and str(path) in str(exc.value)


def test_custom_families_file(tmp_path):
    path = tmp_path / "fam.json"
    path.write_text(json.dumps({"f": _family(), "_doc": "comment"}))
    cfg = OcrPeopleConfig(families=("f",), pairs_per_family=2, people_per_family=4,
                          fact_paraphrases=1, implication_paraphrases=1, families_file=str(path))
    data = generate(cfg)
    assert data.family("f").candidates == ("Bb", "Dd")
    with pytest.raises(ConfigError, match="pairs_per_family"):
        OcrPeopleConfig(families=("f",), pairs_per_family=3, people_per_family=6,
                        families_file=str(path)).validate()
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(DataError, match="line 1"):
        load_families(str(tmp_path / "bad.json"))
