"""Fixtures and hooks shared by every test directory. Plain helpers (tokenizers, the tiny
Llama factory, reference checks, tiny-world sizes) live in helpers.py: import them from there,
never from conftest."""

import os

# Tests never touch the network: huggingface_hub and transformers read this at import (before
# any test module imports them), and every subprocess a test starts inherits it. A test that
# needs the online code path patches it (tests/lens/test_load_hub.py).
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

from helpers import byte_tokenizer, save_model_folder, tiny_llama

# Property tests draw the same examples on every run, so CI results do not depend on luck.
settings.register_profile("knowflow", derandomize=True)
settings.load_profile("knowflow")


@pytest.fixture(autouse=True)
def _one_thread():
    """Small models run fastest (and most reproducibly) on one thread."""
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def make_tiny_llama():
    """The one tiny random Llama factory (`helpers.tiny_llama`):
    `make_tiny_llama(tokenizer, layers=2, seed=0, ...)`, a fresh model on every call."""
    return tiny_llama


@pytest.fixture(scope="module")
def tok():
    """The byte tokenizer (finetuning tests)."""
    return byte_tokenizer()


@pytest.fixture(scope="module")
def tiny_lm(tok, make_tiny_llama):
    """A tiny random Llama over the byte tokenizer (model plumbing tests)."""
    return make_tiny_llama(tok)


@pytest.fixture(scope="module")
def rows():
    """24 rows of the built-in C/C+S/S instruction mixture (finetuning tests)."""
    from knowflow.data.instructions import MixtureConfig, builtin_mixture

    return builtin_mixture(MixtureConfig(size=24, seed=1))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, make_tiny_llama):
    """A tiny random Llama and its tokenizer saved as a model folder (loadable by name)."""
    tok = byte_tokenizer()
    return save_model_folder(tmp_path_factory.mktemp("tiny-model"), make_tiny_llama(tok), tok)
