"""The one reader of JSON, JSONL and CSV (`knowflow.store.readers`): a byte-order mark and CRLF are
accepted, CSV cells longer than csv's default limit are read, and every decoding problem is a
`DataError` naming the file and the line."""

import json

import pytest

from knowflow.data.loaders import load_items
from knowflow.errors import DataError
from knowflow.store.readers import CSV_FIELD_LIMIT, csv_rows, json_records, read_json, read_jsonl

ITEM = {"context": "Zorb is the capital of Land.", "question": "What is the capital of Land?",
        "answer": "Zorb", "memory_answer": "Paris"}
BOM = "\ufeff"


def _write(path, text: str):
    path.write_bytes(text.encode("utf-8"))
    return path


def test_a_byte_order_mark_and_crlf_are_read(tmp_path):
    jsonl = _write(tmp_path / "a.jsonl", BOM + json.dumps(ITEM) + "\r\n" + json.dumps(ITEM)
                   + "\r\n")
    assert [line for line, _ in json_records(jsonl)] == [1, 2]
    listed = _write(tmp_path / "a.json", BOM + "[\r\n" + json.dumps(ITEM) + "\r\n]\r\n")
    assert [rec for _, rec in json_records(listed)] == [ITEM]
    table = _write(tmp_path / "a.csv", BOM + "context,question,answer,memory_answer\r\n"
                   '"Zorb is the capital of Land.",What is the capital of Land?,Zorb,Paris\r\n')
    header, rows = csv_rows(table)
    assert header == list(ITEM) and [rec for _, rec in rows] == [ITEM]  # no "\ufeffcontext"
    assert read_json(_write(tmp_path / "c.json", BOM + '{"a": 1}')) == {"a": 1}
    assert read_jsonl(_write(tmp_path / "m.jsonl", BOM + '{"a": 1}\r\n')) == [{"a": 1}]
    for path in (jsonl, listed, table):
        assert [it.counterfactual_answer for it in load_items(path)][0] == "Zorb"


def test_a_csv_cell_longer_than_csvs_default_limit_is_read(tmp_path):
    long = "word " * 60_000  # 300,000 characters: csv's default limit is 131,072
    table = _write(tmp_path / "long.csv", "context,question,answer,memory_answer\n"
                   f'"{long}",q?,Zorb,Paris\n')
    (_, rec), = csv_rows(table)[1]
    assert rec["context"] == long and CSV_FIELD_LIMIT > 10**9


@pytest.mark.parametrize("text,line,message", [
    ("a,b\n1,2\n3,4,5\n", 3, "3 cells, but the header has 2 columns"),  # an unquoted comma
    ("a,b\n1\n", 2, "1 cells, but the header has 2 columns"),         # a missing cell
    ('a,b\n"x\ny",2\n5\n', 4, "1 cells"),  # a quoted newline: the next row starts on line 4
    ("answer,context,answer\nx,y,z\n", 1, "column 'answer' appears twice"),
])
def test_csv_rows_are_checked_against_the_header(tmp_path, text, line, message):
    path = _write(tmp_path / "t.csv", text)
    with pytest.raises(DataError, match=message) as err:
        list(csv_rows(path)[1])
    assert err.value.line == line


@pytest.mark.parametrize("name,text,line,message", [
    ("big.jsonl", '{"a": 1}\n{"answer": ' + "9" * 5000 + "}\n", 2, "a number of 5000 digits"),
    ("big.json", '[{"a": 1},\n {"answer": ' + "7" * 4500 + "}]", 2, "4500 digits"),
    ("deep.jsonl", '{"a": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n", 2, "nested too deeply"),
    ("nan.jsonl", '{"a": NaN}\n', 1, "NaN is not a JSON number"),
    ("inf.jsonl", '{"a": 1}\n\n{"a": -Infinity}\n', 3, "-Infinity is not a JSON number"),
    ("bad.jsonl", '{"a": 1}\n{"a": \n', 2, "invalid JSON"),
])
def test_every_decoding_error_names_the_line(tmp_path, name, text, line, message):
    path = _write(tmp_path / name, text)
    with pytest.raises(DataError, match=message) as err:
        list(json_records(path))
    assert err.value.line == line and str(path) in str(err.value)


def test_knowflows_own_files_keep_infinity_and_name_damage(tmp_path):
    """Files knowflow wrote may hold Infinity (a loss); damage there is still one line."""
    assert read_jsonl(_write(tmp_path / "m.jsonl", '{"loss": Infinity}\n')) == [
        {"loss": float("inf")}]
    with pytest.raises(DataError, match="damaged JSON .*digits") as err:
        read_json(_write(tmp_path / "c.json", '{\n"seed": ' + "1" * 5000 + "}"))
    assert err.value.line == 2
