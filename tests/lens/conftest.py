"""Fixtures of the model-loading tests."""

import pytest
from huggingface_hub import constants


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    """An empty Hugging Face home for this test (huggingface_hub reads its cache folder at
    import, so the constant is patched too; subprocesses get HF_HOME)."""
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    return home
