"""Data-quality warnings that do not stop a run: duplicated keys, items whose two answers
coincide, examples too long. Each is one warning line with a count, and the count is in
summary.json."""

import json

from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.data.quality import duplicate_key_lines
from knowflow.store.readers import read_json

runner = CliRunner()


def _items(n: int) -> list[dict]:
    return [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the "
             f"capital of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"}
            for i in range(n)]


def test_duplicate_key_lines_of_jsonl_and_json_lists(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"a": 1}\n{"a": 1, "a": 2}\n\n{"b": {"c": 1, "c": 2}}\n{"broken\n')
    assert duplicate_key_lines(jsonl) == [2, 4]
    listed = tmp_path / "b.json"
    listed.write_text('[{"a": 1, "a": 2}, {"b": 1}, {"c": 1, "c": 1}]')
    assert len(duplicate_key_lines(listed)) == 2


def test_eval_skips_same_answer_items_and_counts_them_with_duplicate_keys(tmp_path,
                                                                          tiny_model_dir,
                                                                          caplog):
    rows = _items(5)
    rows[1]["memory_answer"] = " Zorb1 "  # the same answer as written: skipped by the loader
    rows[3]["memory_answer"] = "zorb3."   # equal only after generation's normalisation
    lines = [json.dumps(r) for r in rows]
    lines[2] = lines[2][:-1] + ', "answer": "Zorb2"}'  # a key given twice
    data = tmp_path / "items.jsonl"
    data.write_text("\n".join(lines) + "\n")
    res = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--data", str(data),
                              "--out", str(tmp_path / "out"), "--scoring", "both",
                              "--max-new-tokens", "3", "--no-known-filter"])
    assert res.exit_code == 0, res.output
    out = caplog.messages  # one warning line each (the CLI renders log records)
    assert sum("skipped 1 item(s) whose answer equals the memory answer" in m for m in out) == 1
    assert sum("1 record(s) give a key twice (lines 3)" in m for m in out) == 1
    summary = read_json(tmp_path / "out" / "summary.json")["items"]
    # log-likelihood scores the case/punctuation pair as given; generation cannot tell it apart
    assert summary["loglik"]["n"] == 4 and summary["loglik"]["n_skipped_equal_answers"] == 0
    assert summary["generate"]["n"] == 3 and summary["generate"]["n_skipped_equal_answers"] == 1
    for metrics in summary.values():
        assert metrics["n_skipped_same_answers"] == 1 and metrics["n_duplicate_keys"] == 1


def test_sft_counts_duplicate_keys_and_examples_too_long(tmp_path, tiny_model_dir, caplog):
    rows = [{"instruction": f"Question: Where does Vol{i} live?", "input": f"Vol{i} lives in "
             f"Kem{i}." + (" It is far." * 40 if i < 2 else ""), "output": f"Kem{i}"}
            for i in range(8)]
    lines = [json.dumps(r) for r in rows]
    lines[5] = lines[5][:-1] + ', "output": "Kem5"}'
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(lines) + "\n")
    res = runner.invoke(app, ["sft", "--model", str(tiny_model_dir), "--data", str(data),
                              "--steps", "1", "--batch-size", "2", "--no-track",
                              "--max-length", "200", "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    out = caplog.messages  # one warning line each (the CLI renders log records)
    assert sum("1 record(s) give a key twice (lines 6)" in m for m in out) == 1
    assert sum("2 of 8 examples are longer than sft.max_length=200" in m for m in out) == 1
    (run,) = (tmp_path / "runs" / "sft").iterdir()
    summary = read_json(run / "summary.json")
    assert summary["n_duplicate_keys"] == 1 and summary["n_dropped_too_long"] == 2
