"""`--data` in other people's layouts: parquet, `datasets` save_to_disk folders, JSON/JSONL and
CSV; NQ-Swap, ConflictQA and MemoTrap columns recognised; `--fields` for renamed columns; one
clear error for a missing column, a wrong type or an empty file.

The fixtures under tests/data/layouts/ were written by hand from each data set's published
column schema (nothing is downloaded); parquet and save_to_disk copies are made from them.
"""

import json
from pathlib import Path

import pytest

from knowflow.data.loaders import json_records, load_items
from knowflow.data.tables import parse_fields
from knowflow.errors import ConfigError, DataError

LAYOUTS = Path(__file__).parent / "layouts"
NQ_FIELDS = "context=sub_context,question=question,answer=sub_answer,memory_answer=org_answer"


def _rows(name: str) -> list[dict]:
    return [rec for _, rec in json_records(LAYOUTS / name)]


def _parquet(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _disk(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    import datasets
    path = tmp_path / name
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def _check_nq(items, suite: str) -> None:
    assert [i.counterfactual_answer for i in items] == ["Jane Austen", "Winnipeg",
                                                         "Claude Monet"]
    assert [i.parametric_answer for i in items] == ["Mary Shelley", "Ottawa",
                                                     "Leonardo da Vinci"]
    assert items[0].counterfactual_aliases == ("Austen",)
    assert items[2].parametric_aliases == ("Leonardo",)
    assert items[1].context.startswith("<P> Winnipeg is the capital")
    assert items[0].question == "who wrote the novel frankenstein"
    assert {i.suite for i in items} == {suite}


def test_nq_swap_jsonl_recognised():
    _check_nq(load_items(LAYOUTS / "nq_swap.jsonl"), "nq_swap")


def test_nq_swap_parquet_recognised(tmp_path):
    _check_nq(load_items(_parquet(tmp_path, "nqswap.parquet", _rows("nq_swap.jsonl"))),
              "nqswap")


def test_nq_swap_save_to_disk_recognised(tmp_path):
    _check_nq(load_items(_disk(tmp_path, "nqswap-dev", _rows("nq_swap.jsonl"))), "nqswap-dev")


def test_dataset_dict_folder_asks_for_a_split(tmp_path):
    import datasets
    path = tmp_path / "nqswap"
    datasets.DatasetDict({"dev": datasets.Dataset.from_list(_rows("nq_swap.jsonl"))}
                         ).save_to_disk(str(path))
    with pytest.raises(DataError, match="splits dev; give one split's folder"):
        load_items(path)
    _check_nq(load_items(path / "dev"), "dev")


def test_conflictqa_json_recognised():
    items = load_items(LAYOUTS / "conflictqa.json")
    assert [(i.counterfactual_answer, i.parametric_answer) for i in items] == \
        [("composer", "politician"), ("Pakistan", "India")]
    assert items[1].context == "Ahmadabad is a large city in Pakistan."


def test_memotrap_csv_and_parquet(tmp_path):
    from_csv = load_items(LAYOUTS / "memotrap.csv")
    assert [(i.counterfactual_answer, i.parametric_answer) for i in from_csv] == \
        [("early", "never"), ("deeds", "words")]
    rows = [{"prompt": "Write a quote that ends in the word \"early\": Better late than",
             "classes": [" early", " never"], "answer_index": 0}]
    from_parquet = load_items(_parquet(tmp_path, "memotrap.parquet", rows))
    assert from_parquet[0].task == "complete" and from_parquet[0].question == "Better late than"
    assert from_parquet[0].counterfactual_answer == "early"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "disk", "csv"])
def test_renamed_columns_with_fields(tmp_path, fmt):
    rows = [{"passage": "Lyon is the capital of France.", "q": "Capital of France?",
             "new": "Lyon", "old": "Paris", "key": "x1"}]
    if fmt == "jsonl":
        path = tmp_path / "renamed.jsonl"
        path.write_text(json.dumps(rows[0]) + "\n")
    elif fmt == "csv":
        path = tmp_path / "renamed.csv"
        path.write_text("passage,q,new,old,key\nLyon is the capital of France.,"
                        "Capital of France?,Lyon,Paris,x1\n")
    elif fmt == "parquet":
        path = _parquet(tmp_path, "renamed.parquet", rows)
    else:
        path = _disk(tmp_path, "renamed", rows)
    fields = parse_fields("context=passage,question=q,answer=new,memory_answer=old,id=key")
    (item,) = load_items(path, fields)
    assert (item.id, item.context, item.question) == ("x1", rows[0]["passage"], rows[0]["q"])
    assert (item.counterfactual_answer, item.parametric_answer) == ("Lyon", "Paris")


def test_fields_override_a_recognised_layout():
    """--fields picks the original (agreeing) context of NQ-Swap instead of the swapped one."""
    items = load_items(LAYOUTS / "nq_swap.jsonl",
                       parse_fields("context=org_context,answer=sub_answer,"
                                    "memory_answer=org_answer"))
    assert items[0].context.startswith("<P> Frankenstein is an 1818 novel written by English "
                                       "author Mary Shelley")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "disk", "csv"])
def test_unknown_columns_name_file_and_columns(tmp_path, fmt):
    rows = [{"passage": "p", "q": "q?", "new": "a"}]
    if fmt == "jsonl":
        path = tmp_path / "odd.jsonl"
        path.write_text(json.dumps(rows[0]) + "\n")
    elif fmt == "csv":
        path = tmp_path / "odd.csv"
        path.write_text("passage,q,new\np,q?,a\n")
    elif fmt == "parquet":
        path = _parquet(tmp_path, "odd.parquet", rows)
    else:
        path = _disk(tmp_path, "odd", rows)
    with pytest.raises(DataError) as err:
        load_items(path)
    text = str(err.value)
    assert str(path) in text and "columns found: passage, q, new" in text
    assert "--fields" in text and "\n" not in text


def test_fields_naming_a_missing_column(tmp_path):
    with pytest.raises(DataError) as err:
        load_items(LAYOUTS / "nq_swap.jsonl", parse_fields(NQ_FIELDS.replace(
            "sub_answer", "sub_answr")))
    assert "answer=sub_answr" in str(err.value)
    assert "columns found: question, org_context, org_answer, sub_context, sub_answer" in \
        str(err.value)


def test_fields_leaving_a_field_unmapped(tmp_path):
    path = tmp_path / "part.jsonl"
    path.write_text(json.dumps({"passage": "p", "question": "q?", "new": "a", "old": "b"}))
    with pytest.raises(DataError, match="no column for context; columns found: passage"):
        load_items(path, parse_fields("answer=new,memory_answer=old"))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_wrong_type_names_row_and_column(tmp_path, fmt):
    rows = _rows("nq_swap.jsonl")
    rows[1] = {**rows[1], "sub_answer": [], "org_answer": ["Ottawa"]}
    if fmt == "jsonl":
        path = tmp_path / "nq.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        where = f"{path}, line 2"
    else:
        path = _parquet(tmp_path, "nq.parquet", rows)
        where = f"{path}, row 2"
    with pytest.raises(DataError) as err:
        load_items(path)
    assert str(err.value).startswith(
        f"{where}: field 'sub_answer': expected a string or a list of strings, got an empty "
        "list")


def test_wrong_type_scalar(tmp_path):
    path = tmp_path / "cq.jsonl"
    rows = _rows("conflictqa.json")
    path.write_text(json.dumps({**rows[0], "counter_answer": True}))
    with pytest.raises(DataError, match=r"line 1: field 'counter_answer': expected a string "
                                        r"or a list of strings, got bool"):
        load_items(path)


def test_numeric_answers_are_read_as_text(tmp_path):
    """Real data has numbers for answers (ClashEval's doses and years, a parquet column of
    floats): read as the text a model would write, never refused."""
    path = tmp_path / "cq.jsonl"
    rows = _rows("conflictqa.json")
    path.write_text("\n".join(json.dumps({**r, "counter_answer": a, "memory_answer": m})
                              for r, a, m in zip(rows, (7, 1990.0), (2.5, 1989), strict=True)))
    items = load_items(path)
    assert [(it.counterfactual_answer, it.parametric_answer) for it in items] == \
        [("7", "2.5"), ("1990", "1989")]


def test_empty_files(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="columns found: \\(none\\)"):
        load_items(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("prompt,classes,answer_index\n")
    with pytest.raises(DataError, match="header.csv: no records"):
        load_items(tmp_path / "header.csv")
    empty = _parquet(tmp_path, "empty.parquet", [])
    with pytest.raises(DataError, match="empty.parquet: missing column"):
        load_items(empty)
    (tmp_path / "zero.parquet").write_bytes(b"")
    with pytest.raises(DataError, match="zero.parquet: not a readable parquet file"):
        load_items(tmp_path / "zero.parquet")


def test_empty_table_with_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(c, pa.string()) for c in ("context", "question", "answer",
                                                    "memory_answer")])
    pq.write_table(schema.empty_table(), tmp_path / "none.parquet")
    with pytest.raises(DataError, match="none.parquet: no records"):
        load_items(tmp_path / "none.parquet")


def test_plain_folder_is_no_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_items(tmp_path)


@pytest.mark.parametrize(("text", "message"), [
    ("context", "is not FIELD=COLUMN"), ("colour=red", "unknown field 'colour'"),
    ("answer=a,answer=b", "mapped twice"), ("answer=", "is not FIELD=COLUMN")])
def test_parse_fields_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_fields(text)
