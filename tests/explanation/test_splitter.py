"""The offline sentence splitter: abbreviations, initials, decimals, quotes, paragraphs."""

import pytest

from knowflow.explanation.splitter import join_kept, split_sentences


def texts(text):
    return [s.text for s in split_sentences(text)]


@pytest.mark.parametrize("text, expected", [
    ("Dr. Smith lives in Washington, D.C. now. He moved there in 2001.",
     ["Dr. Smith lives in Washington, D.C. now.", "He moved there in 2001."]),
    ("The U.S. Senate met. It voted e.g. on taxes. Mr. and Mrs. Li agreed.",
     ["The U.S. Senate met.", "It voted e.g. on taxes.", "Mr. and Mrs. Li agreed."]),
    ("J. K. Rowling wrote it. She lives in Edinburgh.",
     ["J. K. Rowling wrote it.", "She lives in Edinburgh."]),
])
def test_abbreviations_and_initials_do_not_end_a_sentence(text, expected):
    assert texts(text) == expected


def test_decimals_and_numbers_stay_whole():
    assert texts("Pi is about 3.14159 and e is 2.718. The price rose 2.5% to $10.75 today.") \
        == ["Pi is about 3.14159 and e is 2.718.", "The price rose 2.5% to $10.75 today."]


def test_quotes():
    assert texts('He said "Stop." Then he left. "Why?" she asked. \u201cFine!\u201d It ended.') \
        == ['He said "Stop."', "Then he left.", '"Why?" she asked.', "\u201cFine!\u201d",
            "It ended."]


def test_question_marks_exclamations_and_paragraphs():
    assert texts("Is it? Yes! it is\n\nnew paragraph here") == \
        ["Is it?", "Yes! it is", "new paragraph here"]


def test_spans_point_into_the_text_and_join_kept_rebuilds_it():
    text = "  First one.  Second one.\nThird one.  "
    sents = split_sentences(text)
    assert [text[s.start:s.end] for s in sents] == [s.text for s in sents]
    assert join_kept(text, sents, [True] * 3) == text.strip()
    assert join_kept(text, sents, [True, False, True]) == "First one.  Third one."
    assert join_kept(text, sents, [False] * 3) == ""


def test_empty_and_unpunctuated():
    assert texts("") == [] and texts("   ") == []
    assert texts("no final stop") == ["no final stop"]
