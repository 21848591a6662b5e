"""Built-in knowledge-conflict suites: size, content, determinism, template variety."""

import pytest

from knowflow.data.suites import get_suite, list_suites
from knowflow.errors import KnowflowError
from knowflow.evaluation.normalize import alternatives, answers_present, words

SUITES = ("cf-capitals", "cf-world", "cf-bio", "cf-quotes")


def test_registry_lists_the_four_suites():
    assert set(SUITES) <= set(list_suites())
    with pytest.raises(KnowflowError, match="unknown suite"):
        get_suite("cf-nope")


@pytest.mark.parametrize("name", SUITES)
def test_items_are_well_formed(name):
    items = get_suite(name)
    assert len({i.id for i in items}) == len(items)
    for it in items:
        assert it.suite == name and it.context and it.question
        cf = alternatives(it.counterfactual_answer, it.counterfactual_aliases)
        par = alternatives(it.parametric_answer, it.parametric_aliases)
        subject = alternatives(it.subject) if it.subject else []
        # the context asserts the counterfactual answer and never the memorized one (a
        # mention inside the subject, as "Sydney" in "the Sydney Opera House", is not one)
        assert answers_present(it.context, [cf, par, subject])[:2] == [True, False], it
        # the two answers are different things
        assert not set(cf) & set(par), it


def test_sizes():
    assert len(get_suite("cf-capitals")) >= 185
    world = get_suite("cf-world")
    assert len({i.relation for i in world}) >= 6
    assert len(get_suite("cf-bio")) >= 100
    assert len({i.parametric_answer for i in get_suite("cf-bio")}) >= 100
    assert len(get_suite("cf-quotes")) >= 100


@pytest.mark.parametrize("name", SUITES)
def test_same_seed_same_items_other_seed_other_items(name):
    assert get_suite(name, seed=3) == get_suite(name, seed=3)
    assert get_suite(name, seed=3) != get_suite(name, seed=4)
    sample = get_suite(name, seed=1, limit=10)
    assert len(sample) == 10 and sample == get_suite(name, seed=1, limit=10)


def test_answer_appears_at_varied_positions():
    """Several templates per relation put the answer early, in the middle, and late."""
    for name in ("cf-capitals", "cf-world", "cf-bio"):
        where = set()
        for it in get_suite(name):
            ctx = words(it.context)
            ans = words(it.counterfactual_answer)
            start = next(i for i in range(len(ctx)) if ctx[i:i + len(ans)] == ans)
            where.add(min(2, 3 * start // len(ctx)))  # first, middle, last third
        assert where == {0, 1, 2}, name


def test_quotes_ask_for_a_new_last_word():
    for it in get_suite("cf-quotes"):
        assert it.task == "complete"
        assert f'"{it.counterfactual_answer}"' in it.context
        assert it.counterfactual_answer.lower() not in it.question.lower().split()


def test_bio_swaps_the_name():
    for it in get_suite("cf-bio"):
        assert it.counterfactual_answer in it.context
        assert it.parametric_answer not in it.context
