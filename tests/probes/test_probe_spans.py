"""Subject / relation / context localization on tricky tokenizations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import byte_bpe, metaspace_bpe
from knowflow.errors import DataError, KnowflowError
from knowflow.probes.examples import ProbeExample, builtin_facts, load_examples
from knowflow.probes.spans import Located, locate

TOKENIZERS = {"byte": lambda: byte_bpe(), "byte+bos": lambda: byte_bpe(bos=True),
              "metaspace+bos": metaspace_bpe}


def _text(tok, loc: Located, positions) -> str:
    return tok.decode([loc.input_ids[i] for i in positions]).strip()


@pytest.mark.parametrize("name", list(TOKENIZERS))
@pytest.mark.parametrize("prompt,subject", [
    ("The Eiffel Tower is located in the city of", "The Eiffel Tower"),  # at the start
    ("The capital of France is", "France"),                              # leading space
    ("The founder of Coca-Cola's company was", "Coca-Cola"),             # punctuation
    ("The largest city of São Paulo state is", "São Paulo"),             # non-ASCII
    ("Where is Mount Fuji? Mount Fuji is in", "Mount Fuji"),             # first occurrence
])
def test_subject_tokens_decode_to_the_subject(name, prompt, subject):
    tok = TOKENIZERS[name]()
    loc = locate(tok, ProbeExample(prompt=prompt, subject=subject))
    assert loc.subject == tuple(range(loc.subject[0], loc.subject[-1] + 1))  # contiguous
    # the subject tokens cover the subject, and minimally: dropping the first or the last
    # loses part of it (a token may straddle the boundary, as "a's" in a SentencePiece vocab)
    assert subject in _text(tok, loc, loc.subject)
    assert subject not in _text(tok, loc, loc.subject[1:])
    assert subject not in _text(tok, loc, loc.subject[:-1])
    assert all(i not in loc.subject for i in loc.special)
    if name.startswith("byte"):  # byte-level BPE splits at the word: an exact match
        assert _text(tok, loc, loc.subject) == subject


def test_bos_is_special_and_excluded_from_source_sets():
    tok = byte_bpe(bos=True)
    loc = locate(tok, ProbeExample(prompt="The capital of France is", subject="France",
                                   relation="The capital of"))
    assert loc.special == (0,) and loc.input_ids[0] == tok.bos_token_id
    non_subject = loc.positions("non_subject")
    assert 0 not in non_subject and loc.last not in non_subject
    assert set(non_subject) | set(loc.subject) | {0, loc.last} == set(range(loc.last + 1))
    assert _text(tok, loc, loc.relation) == "The capital of"
    assert loc.positions("relation") == tuple(i for i in loc.relation if i != loc.last)
    assert loc.positions("pos:1,-1") == (1, loc.last)
    with pytest.raises(KnowflowError, match="outside the prompt"):
        loc.positions("pos:99")
    with pytest.raises(KnowflowError, match="unknown source"):
        loc.positions("verb")


def test_context_span():
    tok = byte_bpe()
    prompt = "Context: the capital of France is Lyon. Question: what is the capital of France?"
    start = prompt.index("the capital")
    end = prompt.index(" Question")
    loc = locate(tok, ProbeExample(prompt=prompt, context=(start, end)))
    assert _text(tok, loc, loc.context) == prompt[start:end]


def test_offsets_fallback_without_offset_mapping():
    """A tokenizer that cannot return offsets falls back to decoding growing prefixes."""
    fast = byte_bpe()

    class NoOffsets:
        all_special_ids = fast.all_special_ids

        def __call__(self, text, return_offsets_mapping=False):
            if return_offsets_mapping:
                raise NotImplementedError
            return fast(text)

        def decode(self, ids, **kw):
            return fast.decode(ids, **kw)

    ex = ProbeExample(prompt="The Eiffel Tower is located in the city of",
                      subject="Eiffel Tower")
    assert locate(NoOffsets(), ex) == locate(fast, ex)


WORDS = ["the", "capital", "of", "France", "is", "Paris", "Tower", "city", "Rome", "Apple"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=2, max_size=9), st.data())
def test_any_word_span_is_found(words, data):
    """For a prompt of words and any contiguous run of them as the subject, the subject
    tokens decode to exactly the subject (byte-level BPE never merges across words)."""
    i = data.draw(st.integers(0, len(words) - 1))
    j = data.draw(st.integers(i + 1, len(words)))
    prompt, subject = " ".join(words), " ".join(words[i:j])
    prefix = " ".join(words[:i]) + (" " if i else "")
    start = prefix.__len__()
    tok = byte_bpe(bos=True)
    ex = ProbeExample(prompt=prompt, subject=subject)
    if prompt.find(subject) != start:  # an earlier occurrence is the one located
        start = prompt.find(subject)
    loc = locate(tok, ex)
    assert _text(tok, loc, loc.subject) == subject
    assert tok.decode([loc.input_ids[k] for k in range(1, loc.subject[0])]).strip() == \
        prompt[:start].strip()


def test_subject_not_in_prompt(tmp_path):
    with pytest.raises(KnowflowError, match="does not occur"):
        locate(byte_bpe(), ProbeExample(prompt="The capital of France is", subject="Spain"))
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "The capital of France is", "subject": "France"})
                    + "\n" + json.dumps({"prompt": "The capital of Italy is",
                                         "subject": "Spain"}) + "\n")
    with pytest.raises(DataError) as err:
        load_examples(path)
    assert err.value.line == 2 and err.value.field == "subject"
    assert "does not occur in the prompt" in str(err.value)


@pytest.mark.parametrize("row,field", [
    ({"subject": "x"}, "prompt"), ({"prompt": "a b", "attributes": "ab"}, "attributes"),
    ({"prompt": "a b", "context": [1, 9]}, "context"), ({"prompt": "a b", "wat": 1}, "wat"),
    ({"prompt": "a b", "context": "zz"}, "context")])
def test_bad_records_name_the_field(tmp_path, row, field):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError) as err:
        load_examples(path)
    assert err.value.field == field and err.value.line == 1


def test_builtin_facts_are_well_formed():
    facts = builtin_facts()
    assert len(facts) >= 40
    assert len({f.id for f in facts}) == len(facts)
    for fact in facts:
        assert fact.subject in fact.prompt and fact.relation in fact.prompt
        assert fact.answer and fact.attributes
        loc = locate(byte_bpe(), fact)
        assert loc.subject and loc.relation
