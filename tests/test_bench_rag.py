"""bench_rag's items: passages of 3-8 sentences, the answer in one of them, distractors of
the same relation naming neither of the item's answers; HotpotQA's distractor layout
written and read back to the same contexts and answer sentences (the repository's sample
file included)."""

import json
from pathlib import Path

from helpers import load_benchmark
from knowflow.explanation.splitter import split_sentences

LAYOUT = Path(__file__).parent / "data" / "layouts" / "hotpotqa_distractor.json"


def test_items_hold_the_answer_in_one_passage_among_same_relation_distractors():
    rag = load_benchmark("peers/rag_items")
    items = rag.rag_items(6, 10, seed=3)
    assert [it.meta["agree"] for it in items] == [True, False] * 3
    for it in items:
        passages = it.context.split("\n\n")
        assert len(passages) == 10
        assert all(3 <= len(split_sentences(p)) <= 8 for p in passages)
        needle = split_sentences(it.context)[it.meta["needle"]].text
        assert it.counterfactual_answer in needle and it.subject.lower() in needle.lower()
        home = passages[it.meta["answer_passage"]]
        assert needle in home
        others = [p for k, p in enumerate(passages) if k != it.meta["answer_passage"]]
        for answer in {it.counterfactual_answer, it.parametric_answer}:
            assert not any(answer.lower() in p.lower() for p in others)
        assert it.meta["same_relation"] == 9
    assert rag.rag_items(6, 10, seed=3)[4].context == items[4].context      # seeded


def test_hotpot_layout_reads_back_to_the_same_items(tmp_path):
    rag = load_benchmark("peers/rag_items")
    items = rag.rag_items(3, 10, seed=4)
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(rag.hotpot_layout(items)))
    back = rag.hotpot_items(path)
    assert [b.context for b in back] == [it.context for it in items]
    assert [b.meta["needle"] for b in back] == [it.meta["needle"] for it in items]
    sample = rag.hotpot_items(LAYOUT)
    rows = json.loads(LAYOUT.read_text())
    for item, row in zip(sample, rows, strict=True):
        title, index = row["supporting_facts"][0]
        fact = dict((t, s) for t, s in row["context"])[title][index]
        assert split_sentences(item.context)[item.meta["needle"]].text == fact
        assert row["answer"] in fact


def test_the_summary_keeps_a_length_where_contextcites_default_batch_did_not_run(capsys):
    """A length measured without ContextCite's default batch (costly at long contexts) is
    still a row of the table, with the ratio to ContextCite-batched, and a curve point."""
    bench = load_benchmark("peers/bench_rag")

    def row(i, tokens, methods):
        return {"id": f"r{i}", "tokens_asked": tokens, "tokens": tokens, "forward_cpu": 1.0,
                **{m: {"cpu": cpu, "lds": 0.8, "peak_mb": 10.0} for m, cpu in methods.items()}}
    bench.summarize([row(0, 256, {"explain": 2.0, "contextcite-batched": 8.0,
                                  "contextcite": 9.0}),
                     row(1, 1024, {"explain": 4.0, "contextcite-batched": 20.0})])
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()]
    assert ["1024", "1", "one", "forward", "pass", "1.00"] in lines
    assert any(parts[:1] == ["explain"] and parts[-1] == "5.00x" for parts in lines), out
    assert "tokens^0.50" in out          # explain: 2 -> 4 CPU s over 256 -> 1024 tokens
