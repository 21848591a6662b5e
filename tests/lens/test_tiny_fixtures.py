"""The tiny builders of tests/tiny_fixtures.py build what they say."""

from tiny_fixtures import byte_bpe, tiny_llama


def test_fixtures_build():
    tok = byte_bpe()
    assert tok.decode(tok("The capital of France")["input_ids"]) == "The capital of France"
    assert tiny_llama(len(tok)).config.vocab_size == len(tok)
