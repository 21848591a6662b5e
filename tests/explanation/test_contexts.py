"""The learned estimator's training contexts: never an evaluation item, and their labels (the
queried sentence, the answer it states) right."""

from knowflow.data.suites import get_suite
from knowflow.explanation.contexts import long_items, training_items
from knowflow.explanation.splitter import split_sentences


def _sentences(items) -> set[str]:
    return {s.text for it in items for s in split_sentences(it.context)}


def test_training_contexts_share_no_sentence_or_question_with_the_evaluation_items():
    train = training_items(120, seed=3, world=0.6)
    assert sum(bool(it.meta.get("world")) for it in train) > 40       # both kinds are drawn
    assert sum(not it.meta.get("world") for it in train) > 20
    evaluation = get_suite("needle-cf", 0) + get_suite("needle-agree", 0) + long_items(4, 40)
    assert not _sentences(train) & _sentences(evaluation)
    assert not {it.question for it in train} & {it.question for it in evaluation}


def test_each_training_context_names_its_queried_sentence_and_answer():
    items = training_items(80, seed=4, multi_document=0.5, world=1.0)
    kinds = {(it.meta["documents"] > 1, it.meta["agrees"]) for it in items}
    assert kinds == {(False, False), (False, True), (True, False), (True, True)}
    for it in items:
        sents = split_sentences(it.context)
        assert len(sents) == it.meta["n_sentences"]
        assert len(it.context.split("\n\n")) == it.meta["documents"]
        needle = sents[it.meta["needle"]].text
        assert it.counterfactual_answer in needle
        # the stated answer is in no other sentence: the needle is the one answer sentence
        assert sum(it.counterfactual_answer in s.text for s in sents) == 1
        assert (it.counterfactual_answer == it.parametric_answer) == it.meta["agrees"]


def test_the_same_seed_gives_the_same_contexts():
    assert training_items(30, seed=5, world=0.5) == training_items(30, seed=5, world=0.5)
    assert training_items(30, seed=5, world=0.5) != training_items(30, seed=6, world=0.5)


def test_a_long_item_is_the_same_whichever_count_is_asked():
    """An id names one context: the first 3 of 7 long items are the 3 long items."""
    few, many = long_items(3, 40), long_items(7, 40)
    assert [(it.id, it.context, it.meta) for it in few] == \
        [(it.id, it.context, it.meta) for it in many[:3]]
    assert len({it.id for it in many}) == 7
    for it in many:
        assert len(split_sentences(it.context)) == 40
        needle = split_sentences(it.context)[it.meta["needle"]].text
        assert it.counterfactual_answer.lower() in needle.lower()
