"""The one answer-text rule (data/answer_text.py): answers and aliases read in NFC without
zero-width or control characters, answers with no word to match refused by file, line and
field, aliases kept once in linear time; lone surrogate escapes and tables knowflow does not
read refused by what they are (io.json_records, io.csv_rows)."""

import json

import pytest

from knowflow.data.answer_text import answer_problem, clean_answer, unique_aliases, words
from knowflow.data.conditions import with_condition_contexts
from knowflow.data.facts import ConflictItem
from knowflow.data.instruction_rows import load_instructions
from knowflow.data.loaders import load_items, load_items_checked
from knowflow.errors import DataError
from knowflow.evaluation.normalize import alternatives, score_output

ITEM = {"context": "Zorb is the capital of Land.", "question": "What is the capital of Land?",
        "answer": "Zorb", "memory_answer": "Paris"}


def _refused(load, path, text: str | bytes) -> DataError:
    """The DataError `load(path)` raises once `path` holds `text`."""
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as err:
        load(path)
    return err.value


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_clean_answer_is_nfc_without_zero_width_or_control_characters():
    assert clean_answer("Zu\u0308rich") == "Z\u00fcrich"
    assert clean_answer("\ufeffPa\u200bri\u200c\u200ds\u2060") == "Paris"
    assert clean_answer("New\tYork\x00\x07\n") == "New York"
    assert clean_answer(" \u200b ") == ""


def test_words_ignore_zero_width_characters_and_agree_on_ascii_and_unicode():
    assert words("Par\u200bis") == ("paris",)
    assert words("It's THE Big-Apple!") == ("it", "big", "apple")  # a final 's goes
    assert words("It\u2019s THE Big-Appl\u00e9!") == ("it", "big", "apple")
    assert words("Zu\u0308rich") == words("Z\u00fcrich") == ("zurich",)
    assert score_output("It is Pa\u200bris.", alternatives("Paris"), alternatives("Rome")) == \
        (True, False)


@pytest.mark.parametrize("text", ["", "\u200b", "???", "The", "an", "...!", "a (the)"])
def test_answers_with_no_word_have_a_problem(text):
    assert answer_problem(clean_answer(text)) is not None


@pytest.mark.parametrize("text", ["A1", "3.5", "東京", "the Hague", "l'été"])
def test_answers_with_a_word_have_none(text):
    assert answer_problem(clean_answer(text)) is None


@pytest.mark.parametrize(("field", "value", "message"), [
    ("answer", "\u200b", "empty (or only zero-width"),
    ("memory_answer", "\x07\u2060", "empty"),
])
def test_an_answer_that_normalises_to_nothing_is_refused_by_line_and_field(
        tmp_path, field, value, message):
    path = _jsonl(tmp_path / "items.jsonl", [ITEM, {**ITEM, field: value}])
    with pytest.raises(DataError) as err:
        load_items(path)
    assert message in str(err.value)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), 2, field)


def test_knowflow_schema_and_memotrap_answers_follow_the_same_rule(tmp_path):
    own = _jsonl(tmp_path / "own.jsonl", [{
        "context": "c", "question": "q", "counterfactual_answer": "Zorb",
        "parametric_answer": "\u200b\x07"}])
    with pytest.raises(DataError, match="line 1: field 'parametric_answer'"):
        load_items(own)
    memotrap = tmp_path / "memotrap.csv"
    memotrap.write_text('prompt,classes,answer_index\n"Say: it ends","[\' end.\', \'\u200b\']",0\n')
    with pytest.raises(DataError, match="line 2: field 'classes': empty"):
        load_items(memotrap)


def test_nfc_and_nfd_spellings_of_one_word_are_one_answer(tmp_path, caplog):
    path = _jsonl(tmp_path / "items.jsonl", [
        {**ITEM, "answer": "Z\u00fcrich", "memory_answer": "Zu\u0308rich"},
        {**ITEM, "answer": "Zo\u200brb", "memory_answer": "Zorb"},
        {**ITEM, "answer": "Ze\u0301nith\x00"}])
    items, counts = load_items_checked(path)
    assert counts["n_skipped_same_answers"] == 2
    assert [(it.counterfactual_answer, it.parametric_answer) for it in items] == \
        [("Z\u00e9nith", "Paris")]
    assert "skipped 2 item(s) whose answer equals the memory answer" in caplog.text


def test_case_only_pairs_are_kept_for_log_likelihood(tmp_path):
    """Today's rule for case, unchanged: the loader keeps the pair; generation skips it."""
    path = _jsonl(tmp_path / "items.jsonl", [ITEM, {**ITEM, "memory_answer": "ZORB"}])
    items, counts = load_items_checked(path)
    assert len(items) == 2 and counts["n_skipped_same_answers"] == 0
    assert set(alternatives(items[1].counterfactual_answer)) & \
        set(alternatives(items[1].parametric_answer))


def test_aliases_are_cleaned_and_kept_once():
    aliases = ["Zo\u200brb", "zorb", "Zorb", "???", "\u200b", "Z\u00fcrich", "Zu\u0308rich",
               "zorb"]
    assert unique_aliases("Zorb", aliases) == ("zorb", "Z\u00fcrich")


def test_a_hundred_thousand_aliases_load_and_score(tmp_path):
    """The de-duplication is a set: linear. Kept in a list, as before, 100,000 aliases took
    about 5 * 10**9 tuple comparisons (many minutes); here they load in about a second."""
    n = 100_000
    names = [f"Zorb {i}" for i in range(n)]
    path = _jsonl(tmp_path / "many.jsonl", [
        {**ITEM, "answer_aliases": [*names, *names[:1000], "Zorb"]},
        {**ITEM, "context": "Kem is the capital of Nod.", "answer": "Kem"},
        {**ITEM, "context": "Zorb 7 is a town.", "answer": "Vel"}])
    items = load_items(path)
    assert items[0].counterfactual_aliases == tuple(names)
    alts = alternatives(items[0].counterfactual_answer, items[0].counterfactual_aliases)
    assert len(alts) == n + 1 and alts[1] == ("zorb", "0")
    assert score_output("It is Zorb 99999.", alts, alternatives("Paris")) == (True, False)
    # the irrelevant context never names one of the aliases ("Zorb 7")
    assert items[0].meta["irrelevant_context"] == "Kem is the capital of Nod."


def test_many_aliases_keep_every_donor_that_names_none():
    base = dict(suite="s", question="q", parametric_answer="Paris")
    first = ConflictItem(id="0", context="Zorb is here.", counterfactual_answer="Zorb",
                         counterfactual_aliases=tuple(f"Alias {i}" for i in range(40)), **base)
    named = ConflictItem(id="1", context="Alias 39 lives.", counterfactual_answer="Kem", **base)
    clear = ConflictItem(id="2", context="Alias 400 lives.", counterfactual_answer="Vel", **base)
    out = with_condition_contexts([first, named, clear])
    assert out[0].meta["irrelevant_context"] == "Alias 400 lives."


def test_lone_surrogate_escapes_name_line_and_field(tmp_path):
    err = _refused(load_items, tmp_path / "items.jsonl", json.dumps(ITEM) + '\n{"context": '
                   '"c", "question": "q\\ud800", "answer": "a1", "memory_answer": "b"}\n')
    assert "lone surrogate" in str(err) and (err.line, err.field) == (2, "question")
    listed = '[\n' + json.dumps(ITEM) + ',\n' + json.dumps(
        {**ITEM, "meta": {"notes": ["x", "\\udfff"]}}).replace("\\\\", "\\") + "\n]"
    err = _refused(load_items, tmp_path / "items.json", listed)
    assert (err.line, err.field) == (3, "meta.notes[1]")
    err = _refused(load_instructions, tmp_path / "rows.jsonl",
                   '{"instruction": "a", "output": "\\udc00b"}\n')
    assert "line 1: field 'output': a lone surrogate" in str(err)


def test_a_surrogate_pair_is_one_character(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({**ITEM, "answer": "Zorb \U0001F600"}) + "\n")
    assert load_items(path)[0].counterfactual_answer == "Zorb \U0001F600"


TABLE = "context\tquestion\tanswer\tmemory_answer\nc\tq\ta1\tb\n"


@pytest.mark.parametrize(("name", "text", "message"), [
    ("items.tsv", TABLE, "line 1: tab-separated text (TSV), not JSON"),
    ("items.txt", TABLE, "tab-separated text (TSV)"),
    ("items.csv", TABLE, "line 1: a CSV file separated by tabs"),
    ("items.csv", TABLE.replace("\t", ";"), "line 1: a CSV file separated by semicolons"),
    ("items.jsonl", TABLE.replace("\t", ";"), "text separated by semicolons, not JSON"),
    ("items.jsonl", TABLE.replace("\t", ","), "text separated by commas, not JSON"),
    ("items.json", json.dumps({"data": [ITEM]}, indent=2),
     "a JSON object holding a list under 'data', not JSONL or a JSON list"),
    ("items.json", json.dumps({"version": 1, "data": [ITEM], "more": []}, indent=2),
     "one JSON object written over several lines"),
    ("items.json", json.dumps({"version": 1, "data": [ITEM]}),  # one line: read as JSONL
     "a JSON object holding a list under 'data', not JSONL or a JSON list"),
    ("items.jsonl", json.dumps(ITEM, indent=2), "one JSON object written over several lines"),
])
def test_tables_and_objects_knowflow_does_not_read_say_what_they_are(tmp_path, name, text,
                                                                    message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError) as err:
        load_items(path)
    assert message in str(err.value)
    assert "knowflow reads JSONL, a JSON list, CSV with commas, parquet" in str(err.value)
    assert err.value.line == 1


def test_instruction_files_get_the_same_format_messages(tmp_path):
    wrapped = json.dumps({"data": [{"instruction": "a", "output": "b"}]}, indent=2)
    assert "a JSON object holding a list under 'data'" in str(
        _refused(load_instructions, tmp_path / "rows.json", wrapped))
    assert "tab-separated" in str(
        _refused(load_instructions, tmp_path / "rows.tsv", "instruction\toutput\na\tb\n"))


def test_an_xlsx_workbook_is_named(tmp_path):
    err = _refused(load_items, tmp_path / "items.xlsx", b"PK\x03\x04" + b"\x00" * 40)
    assert "an Excel workbook (.xlsx), not text" in str(err)


def test_a_broken_jsonl_file_keeps_its_line_message(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text('{"context": "c",\n "question": "q"\n')
    with pytest.raises(DataError, match="line 1: invalid JSON"):
        load_items(path)


def test_parquet_answers_follow_the_same_rule(tmp_path):
    """A table (parquet, save_to_disk, the Hub) reaches the same reader: NQ-Swap's answer lists
    cleaned, an answer left empty refused by row and column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(answers, memories):
        return pa.table({"sub_context": ["c1", "c2"], "question": ["q1", "q2"],
                         "sub_answer": answers, "org_answer": memories})

    path = tmp_path / "nq.parquet"
    pq.write_table(table([["Z\u00fcrich"], ["Zo\u200brb", "zorb", "Zorb"]],
                         [["Zu\u0308rich"], ["Paris"]]), path)
    items, counts = load_items_checked(path)
    assert counts["preset"] == "nq-swap" and counts["n_skipped_same_answers"] == 1
    assert [(it.counterfactual_answer, it.counterfactual_aliases) for it in items] == \
        [("Zorb", ("zorb",))]
    pq.write_table(table([["Rome"], ["\u200b"]], [["Paris"], ["Paris"]]), path)
    err = _refused(load_items, path, path.read_bytes())
    assert f"{path}, row 2: field 'answer': empty" in str(err)


def test_an_answer_with_no_word_is_kept_for_loglik_and_left_out_by_generation(
        tmp_path, tiny_model_dir):
    """'The', '???' or a letter 'A' is a continuation log-likelihood scores; generation, whose
    outputs could never name it, leaves the item out as it does equal answers."""
    from knowflow.evaluation.normalize import alternatives

    path = _jsonl(tmp_path / "items.jsonl", [ITEM, {**ITEM, "answer": "???"},
                                             {**ITEM, "memory_answer": "The"}])
    items = load_items(path)
    assert [it.counterfactual_answer for it in items][1] == "???"
    assert [it.parametric_answer for it in items][2] == "The"
    assert alternatives("???") == [] and alternatives("The") == []
    import knowflow

    res = knowflow.evaluate(str(tiny_model_dir), str(path), scoring="both", max_new_tokens=2,
                            known_filter=False)
    (suite,) = res.summary.values() if len(res.summary) == 1 else \
        [v for k, v in res.summary.items() if k == "items"]
    assert suite["generate"]["n"] == 1 and suite["generate"]["n_skipped_equal_answers"] == 2
    assert suite["loglik"]["n"] == 3


def test_a_name_in_the_possessive_still_names_it():
    """"Michelangelo's most famous work is ..." names Michelangelo (it was once scored as
    garbled); an apostrophe inside a name is only removed."""
    from knowflow.evaluation.normalize import answers_present

    sets = [alternatives("Michelangelo"), alternatives("Leonardo da Vinci")]
    assert answers_present("Michelangelo's most famous work is David.", sets) == [True, False]
    assert answers_present("MICHELANGELO\u2019S David", sets) == [True, False]
    assert answers_present("Michelangelos David", sets) == [False, False]
    assert words("O'Brien's book") == ("obrien", "book")
    assert words("the students' books") == ("students", "books")
