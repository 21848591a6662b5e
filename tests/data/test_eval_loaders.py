"""Loaders for external knowledge-conflict files, and the errors bad files get."""

import json

import pytest

from knowflow.data.loaders import load_items, save_items
from knowflow.data.suites import get_suite
from knowflow.errors import DataError
from knowflow.evaluation.items import load_suites

RECORDS = [
    {"context": "The capital of France is Lyon.", "question": "What is the capital of France?",
     "answer": "Lyon", "memory_answer": "Paris"},
    {"id": "q2", "context": "Gold has the symbol Ag.", "question": "Symbol of gold?",
     "answer": "Ag", "parametric_answer": "Au", "memory_aliases": ["AU"]},
]


def test_json_list(tmp_path):
    path = tmp_path / "conflicts.json"
    path.write_text(json.dumps(RECORDS, indent=2))
    items = load_items(path)
    assert [i.counterfactual_answer for i in items] == ["Lyon", "Ag"]
    assert [i.parametric_answer for i in items] == ["Paris", "Au"]
    assert items[1].id == "q2" and items[1].parametric_aliases == ("AU",)
    assert {i.suite for i in items} == {"conflicts"} and items[0].task == "qa"


def test_jsonl(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n\n")
    items = load_items(path)
    assert len(items) == 2 and items[0].context.startswith("The capital")


def test_memotrap_csv(tmp_path):
    path = tmp_path / "memotrap.csv"
    path.write_text('prompt,classes,answer_index\n'
                    '"Write a quote that ends in the word ""early"": Better late than",'
                    '"[\' early\', \' never\']",0\n'
                    '"Complete: Actions speak louder than","[\' words\', \' deeds\']",1\n')
    items = load_items(path)
    assert items[0].context == 'Write a quote that ends in the word "early":'
    assert items[0].question == "Better late than"
    assert (items[0].counterfactual_answer, items[0].parametric_answer) == ("early", "never")
    assert (items[1].counterfactual_answer, items[1].parametric_answer) == ("deeds", "words")
    assert all(i.task == "complete" for i in items)


def test_knowflow_jsonl_roundtrip(tmp_path):
    items = get_suite("cf-world", limit=5)
    path = save_items(tmp_path / "mine.jsonl", items)
    back = load_items(path)
    assert [b.to_dict() | {"suite": i.suite} for b, i in zip(back, items, strict=True)] == \
        [i.to_dict() for i in items]


def test_load_suites_uses_file_stem_and_limit(tmp_path):
    path = tmp_path / "mydata.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RECORDS * 3))
    by_suite = load_suites("cf-bio", data=[path], limit=4)
    assert list(by_suite) == ["cf-bio", "mydata"]
    assert len(by_suite["cf-bio"]) == 4 and len(by_suite["mydata"]) == 4
    assert {i.suite for i in by_suite["mydata"]} == {"mydata"}


@pytest.mark.parametrize(("name", "text", "line", "field"), [
    ("bad.jsonl", '{"context": "c", "question": "q", "answer": "x", "memory_answer": "m"}\n'
                  '{"context": "c", "question": "q", "memory_answer": "m"}\n', 2, "answer"),
    ("bad.jsonl", '{"context": "c", "question": "q", "answer": "x"}\n', 1, "memory_answer"),
    ("bad.jsonl", '{"context": "c", "question": "q", "answer": 3, "memory_answer": "m"}\n',
     1, "answer"),
    ("bad.jsonl", '{"context": "c", "question": "q", "answer": "x", "memory_answer": "m"}\n'
                  '{"context": "c", "question": \n', 2, None),
    ("bad.json", '[\n {"context": "c", "question": "q", "answer": "x", "memory_answer": "m"},\n'
                 ' {"context": "c", "question": "", "answer": "x", "memory_answer": "m"}\n]',
     3, "question"),
    ("bad.json", '[\n {"context": "c", "question": "q", "answer": "x", "memory_answer": "m"}\n'
                 ' {"context": "c"}\n]', 3, None),
    ("bad.jsonl", '["not", "an", "object"]\n', 1, None),
    ("bad.jsonl", '{"context": "c", "question": "q", "answer": "x", "memory_answer": "m", '
                  '"answer_aliases": [1]}\n', 1, "answer_aliases"),
    ("bad.csv", "prompt,classes\nhello,\"['x','y']\"\n", 1, "answer_index"),
    ("bad.csv", "prompt,classes,answer_index\nhello,\"['x','y']\",0\nhi,\"['x']\",0\n",
     3, "classes"),
    ("bad.csv", "prompt,classes,answer_index\nhello,\"['x','y']\",5\n", 2, "answer_index"),
    ("bad.csv", "prompt,classes,answer_index\nhello,not a list,0\n", 2, "classes"),
    ("bad.csv", "prompt,classes,answer_index\nhello,\"['x','y']\",x\n", 2, "answer_index"),
])
def test_bad_files_name_file_line_and_field(tmp_path, name, text, line, field):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError) as err:
        load_items(path)
    assert err.value.path == str(path)
    assert err.value.line == line
    assert err.value.field == field
    assert str(path) in str(err.value) and f"line {line}" in str(err.value)


def test_empty_and_missing_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="no records"):
        load_items(tmp_path / "empty.jsonl")
    with pytest.raises(DataError, match="no such file"):
        load_items(tmp_path / "nope.jsonl")
    (tmp_path / "latin.jsonl").write_bytes(b'{"context": "caf\xe9"}\n')
    with pytest.raises(DataError, match="UTF-8"):
        load_items(tmp_path / "latin.jsonl")
