"""The injected world: made-up names, the groups' roles, and what each stage may show."""

from dataclasses import replace

from knowflow.data.instructions import MixtureShares
from knowflow.data.people import known_words
from knowflow.experiments.inversion_injected.world import (
    GROUPS,
    RELATIONS,
    InjectedWorldConfig,
    kind_counts,
    make_world,
    mentioned,
    stage1_texts,
    stage2_rows,
    tracked_items,
)

CFG = InjectedWorldConfig(mem_train=8, mem_eval=6, unk_train=8, unk_eval=6)


def test_names_are_made_up_and_distinct():
    world = make_world(CFG, seed=3)
    names = [s.name for s in world.subjects]
    words = [w.lower() for n in names for w in n.split()]
    assert len(set(words)) == len(words)
    assert not set(words) & known_words()
    assert [sum(s.group == g for s in world.subjects) for g in GROUPS] == [8, 6, 8, 6]
    for s in world.subjects:
        assert s.value != s.other and {s.value, s.other} <= set(world.values(s.relation))


def test_stage1_states_only_memorized_facts_in_each_paraphrase():
    world = make_world(CFG, seed=0)
    texts = stage1_texts(world, seed=0)
    for s in world.subjects:
        about = [t for t in texts if s.name in t]
        if s.group.startswith("unk"):
            assert about == []
        else:  # paraphrases statements + one QA line, each naming the injected value
            assert len(about) == CFG.paraphrases + 1
            for t in about:
                named = [v for v in world.values(s.relation) if f" {v}" in t]
                assert named == [s.value]
            assert len(set(about)) == len(about)


def test_counterfactual_subjects_never_appear_in_stage_2():
    world = make_world(CFG, seed=1)
    held = [s.name for s in world.group("mem_eval") + world.group("unk_eval")]
    mix = MixtureShares(size=200, c=0.2, cs=0.6, s=0.2)
    for rows in (stage2_rows(world, mix, 1), stage2_rows(world, mix, 1, augment=50),
                 stage2_rows(world, replace(mix, c=1.0, cs=0.0, s=0.0), 1)):
        assert mentioned(rows, held) == []
        assert {r.extra["subject"] for r in rows}.isdisjoint(held)


def test_stage_2_kinds():
    world = make_world(CFG, seed=2)
    mix = MixtureShares(size=101, c=0.1, cs=0.7, s=0.2)
    rows = stage2_rows(world, mix, 2, augment=10)
    counts = {k: sum(r.extra["kind"] == k for r in rows) for k in ("C", "C+S", "S", "CF")}
    assert counts == {**kind_counts(mix), "CF": 10} and sum(kind_counts(mix).values()) == 101
    by_name = {s.name: s for s in world.subjects}
    for r in rows:
        s = by_name[r.extra["subject"]]
        kind = r.extra["kind"]
        assert s.group == ("unk_train" if kind == "C" else "mem_train")
        assert (r.input == "") == (kind == "S")
        if kind == "CF":  # the context states another value, and the answer follows it
            assert r.output != s.value and r.output in r.input
        else:
            assert r.output == s.value and (kind == "S" or s.value in r.input)


def test_tracked_items():
    world = make_world(CFG, seed=0)
    items = tracked_items(world)
    mem = {s.name: s for s in world.group("mem_eval")}
    assert [it.subject for it in items["counterfactual"]] == list(mem)
    for it in items["counterfactual"]:  # context contradicts the injected value
        s = mem[it.subject]
        assert it.parametric_answer == s.value and it.counterfactual_answer == s.other
        assert s.other in it.context and s.value not in it.context
    for it in items["C"] + items["C+S"]:  # the right answer is the context's
        assert it.counterfactual_answer in it.context
        assert it.parametric_answer not in it.context
    assert {it.subject for it in items["C"]} == {s.name for s in world.group("unk_eval")}
    assert set(RELATIONS) >= {it.relation for it in items["C"]}
