"""The tiny world: the subject split, the finetuning and evaluation sets, the tokenizer."""

import dataclasses

import pytest

from knowflow.experiments.inversion_tiny.model import build_tokenizer, encode_words
from knowflow.experiments.inversion_tiny.world import (
    GROUPS,
    Mixture,
    TinyWorldConfig,
    evaluation_sets,
    finetuning_set,
    make_world,
    no_context,
    pretraining_documents,
)

CFG = TinyWorldConfig(n_relations=2, n_values=8, mem_train=10, mem_eval=6, unk_train=10,
                      unk_eval=6, scratch=6, context_facts=3)


def _subjects(tokens) -> set[str]:
    return {t for t in tokens if t.startswith("s") and t[1:].isdigit()}


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_groups_are_disjoint_and_complete(seed):
    world = make_world(CFG, seed)
    seen = [s for g in GROUPS for s in world.groups[g]]
    assert len(seen) == len(set(seen)) == sum(getattr(CFG, g) for g in GROUPS)


@pytest.mark.parametrize("mixture", [Mixture(200, 0.25, 0.7, 0.05, 0), Mixture(60, 1, 0, 0, 0),
                                     Mixture(100, 0.2, 0.5, 0.3, 40)])
def test_evaluation_subjects_never_reach_finetuning(mixture):
    world = make_world(CFG, 3)
    train = finetuning_set(world, mixture, seed=3)
    allowed = set(world.groups["mem_train"]) | set(world.groups["unk_train"]) | set(
        world.groups["scratch"])
    held_out = set(world.groups["mem_eval"]) | set(world.groups["unk_eval"])
    for ex in train:
        assert _subjects(ex.tokens) <= allowed
        assert not _subjects(ex.tokens) & held_out
        assert not _subjects(no_context(ex).tokens) & held_out
    kinds = [ex.kind for ex in train]
    assert len(train) == mixture.size + mixture.aug
    assert kinds.count("CF") == mixture.aug
    assert kinds.count("C") == round(mixture.size * mixture.c)
    evals = evaluation_sets(world, seed=3)
    for ex in evals["cf"] + evals["cs"] + evals["recall"]:
        assert ex.tokens[ex.subject] in world.groups["mem_eval"]
    for ex in evals["c"]:
        assert ex.tokens[ex.subject] in world.groups["unk_eval"]


def test_examples_say_what_their_kind_means():
    world = make_world(CFG, 0)
    evals = evaluation_sets(world, seed=0)
    for ex in evals["cf"]:
        s, r = ex.tokens[ex.subject], ex.tokens[ex.subject + 1]
        assert ex.memory == world.facts[s, r] and ex.answer != ex.memory
        ctx = ex.tokens[ex.context[0]:ex.context[1]]
        i = ctx.index(s)
        assert ctx[i:i + 3] == (s, r, ex.answer)  # the context states the conflicting value
        assert len(ctx) == 4 * CFG.context_facts
    for ex in evals["cs"]:
        assert ex.answer == ex.memory
    for ex in evals["recall"]:
        assert ex.context is None and ex.answer == ex.memory


def test_pretraining_text_holds_memorized_facts_only():
    import random

    world = make_world(CFG, 0)
    unknown = set(world.groups["unk_train"]) | set(world.groups["unk_eval"])
    docs = pretraining_documents(world, 200, 4, 0.5, random.Random(0), lookup_facts=3)
    assert len({len(d) for d in docs}) == 1
    for doc in docs:  # lookups about scratch subjects only: every other statement is true
        assert not _subjects(doc) & unknown
        for i in range(1, len(doc), 4):
            s, r, v = doc[i:i + 3]
            if s not in world.groups["scratch"]:
                assert world.facts[s, r] == v
        if doc[-4] in world.groups["scratch"]:  # a lookup: its last statement is a repeat
            assert doc[-4:-1] in (doc[-8:-5], doc[-12:-9])
    docs = pretraining_documents(world, 200, 4, 1.0, random.Random(0), lookup_facts=3,
                                 lookup_memorized=1.0)
    memorized = set(world.groups["mem_train"]) | set(world.groups["mem_eval"])
    assert all(d[-4:-1] in (d[-8:-5], d[-12:-9]) for d in docs)
    assert not _subjects(sum(docs, [])) & unknown
    # the rare duplicate subject within a lookup is replaced by a scratch subject
    assert sum(d[-4] in memorized for d in docs) > 0.9 * len(docs)
    assert {d[-4] for d in docs} <= memorized | set(world.groups["scratch"])


def test_tokenizer_round_trips_and_reloads(tmp_path):
    from transformers import AutoTokenizer

    world = make_world(CFG, 0)
    tok = build_tokenizer(world.vocab)
    ex = evaluation_sets(world, seed=0)["cf"][0]
    text = " ".join(ex.tokens)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == encode_words(tok, ex.tokens)
    assert tok.unk_token_id not in ids
    assert tok.convert_ids_to_tokens(ids) == list(ex.tokens)
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(list(range(len(world.vocab)))) == world.vocab
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again(text, add_special_tokens=False)["input_ids"] == ids
    assert again.pad_token_id == tok.pad_token_id == 0


def test_same_seed_same_world_other_seed_other_world():
    a, b = make_world(CFG, 5), make_world(CFG, 5)
    assert a.groups == b.groups and a.facts == b.facts
    c = make_world(dataclasses.replace(CFG), 6)
    assert c.groups != a.groups


def test_quiz_lines_ask_memory_and_keep_the_length():
    import random

    world = make_world(CFG, 0)
    docs = pretraining_documents(world, 300, 3, 1.0, random.Random(0), lookup_facts=2,
                                 lookup_memorized=1.0, quiz_share=0.5)
    assert len({len(d) for d in docs}) == 1
    quiz = [d for d in docs if d[-4] == "question"]
    assert 0.3 * len(docs) < len(quiz) < 0.7 * len(docs)
    for d in quiz:  # the quiz asks the lookup's subject and answers from memory
        assert d[-3:-1] == d[-8:-6] and d[-1] == world.facts[d[-3], d[-2]]
    plain = pretraining_documents(world, 50, 3, 1.0, random.Random(0), lookup_facts=2,
                                  lookup_memorized=1.0)
    assert plain == pretraining_documents(world, 50, 3, 1.0, random.Random(0), lookup_facts=2,
                                          lookup_memorized=1.0, quiz_share=0.0)
    assert not any("question" in d for d in plain)


def _stated(ex) -> str:
    """The value the context states for the question's (subject, relation)."""
    s, r = ex.tokens[ex.subject], ex.tokens[ex.subject + 1]
    ctx = ex.tokens[ex.context[0]:ex.context[1]]
    i = next(j for j in range(0, len(ctx), 4) if ctx[j:j + 2] == (s, r))
    return ctx[i + 2]


def test_c_reliability_makes_that_share_of_c_answers_differ_from_the_context():
    world = make_world(CFG, 2)
    reliable = finetuning_set(world, Mixture(400, 0.5, 0.4, 0.1, 0), seed=2)
    noisy = finetuning_set(world, Mixture(400, 0.5, 0.4, 0.1, 0, c_reliability=0.7), seed=2)
    # the same prompts: only C answers change, and only where the draw says so
    assert [ex.tokens for ex in reliable] == [ex.tokens for ex in noisy]
    assert all(ex.answer == _stated(ex) for ex in reliable if ex.kind != "S")
    changed = [b for a, b in zip(reliable, noisy, strict=True) if a.answer != b.answer]
    assert {ex.kind for ex in changed} == {"C"}
    assert all(ex.answer != _stated(ex) for ex in changed)
    n_c = sum(ex.kind == "C" for ex in noisy)
    assert 0.2 < len(changed) / n_c < 0.4  # 200 C examples, 30% expected
