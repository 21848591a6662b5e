"""report.tables: numbers rounded as documented, HTML escaped, nested keys dotted, wide row
tables transposed and long lists summarized."""

import re

from knowflow.report.tables import key_values, rows_table, summary_tables


def _rows(table: str) -> list[list[str]]:
    return [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr)
            for tr in re.findall(r"<tr>(.*?)</tr>", table)]


def test_key_values_escape_round_and_flatten():
    page = key_values({"<b>": "a & b", "pi": 3.14159, "n": 7, "nested": {"x": 1e-4, "y": None}})
    assert _rows(page) == [["&lt;b&gt;", "a &amp; b"], ["pi", "3.142"], ["n", "7"],
                           ["nested · x", "1.0e-04"], ["nested · y", "–"]]
    assert "<b>" not in page


def test_rows_table_is_transposed_only_when_wider_than_long():
    wide = rows_table({"a": {"x": 0.5, "y": 1, "z": True}, "b": {"x": 0.25, "y": 2}}, "arm")
    assert _rows(wide) == [["arm", "a", "b"], ["x", "0.500", "0.250"], ["y", "1", "2"],
                           ["z", "yes", "–"]]
    long = rows_table({"a": {"x": 0.5}, "b": {"x": 0.25}, "c": {"x": 2 / 3}})
    assert _rows(long) == [["", "x"], ["a", "0.500"], ["b", "0.250"], ["c", "0.667"]]


def test_per_seed_lists_get_a_table_of_their_own():
    page = rows_table({"mixed": {"fall": 0.3, "seeds": [0, 1], "fall_seeds": [0.25, 0.35]}})
    first, second = re.findall(r"<table>.*?</table>", page)
    assert _rows(first) == [["", "fall"], ["mixed", "0.300"]]
    assert _rows(second) == [["", "fall"], ["mixed · seed 0", "0.250"],
                             ["mixed · seed 1", "0.350"]]


def test_summary_tables_escape_section_names_and_summarize_long_lists():
    page = summary_tables({"note": "x<y", "<arm>": {"acc": 0.5, "names": list("abcdefghij")}})
    assert "x&lt;y" in page and "<arm>" not in page and "&lt;arm&gt;" in page
    assert "10 items: a, b, …" in page
