"""The explanation tests' one tiny model: a random Llama over the byte tokenizer."""

import pytest

from helpers import byte_tokenizer


@pytest.fixture(scope="module")
def lm(make_tiny_llama):
    """(model, tokenizer), one per test module."""
    tok = byte_tokenizer()
    return make_tiny_llama(tok), tok
