"""The default prompt format "auto" follows the tokenizer: its chat template when it has one,
plain text otherwise; "chat" without a template is refused by name."""

from __future__ import annotations

import pytest

from helpers import byte_bpe, byte_tokenizer
from knowflow.data.facts import ConflictItem, Instruction
from knowflow.data.instruction_rows import encode
from knowflow.data.prompts import PromptConfig, format_note, render, resolve_format
from knowflow.errors import ConfigError

ITEM = ConflictItem(id="x", suite="s", context="Paris is in Italy.",
                    question="Where is Paris?", counterfactual_answer="Italy",
                    parametric_answer="France")


def test_auto_is_chat_with_a_template_and_plain_without():
    chat, base = byte_tokenizer(), byte_bpe()
    assert resolve_format("auto", chat) == "chat"
    assert resolve_format("auto", base) == "plain"
    assert render(ITEM, chat, PromptConfig()) == render(ITEM, chat, PromptConfig("chat"))
    assert render(ITEM, base, PromptConfig()) == render(ITEM, base, PromptConfig("plain"))
    assert resolve_format("alpaca", base) == "alpaca"
    row = Instruction(instruction="Where is Paris?", input="Paris is in Italy.", output="Italy")
    assert encode(base, row, "auto") == encode(base, row, "plain")
    assert encode(chat, row, "auto") == encode(chat, row, "chat")


def test_chat_without_a_template_is_refused_by_name():
    with pytest.raises(ConfigError, match="no chat template") as err:
        resolve_format("chat", byte_bpe())
    assert err.value.field == "prompt_format" and "auto" in err.value.hint
    with pytest.raises(ConfigError, match="yaml"):
        resolve_format("yaml", byte_bpe())


def test_the_note_says_why_auto_chose():
    assert format_note("auto", "plain") == \
        "prompt format: plain (auto: the tokenizer has no chat template)"
    assert format_note("auto", "chat") == \
        "prompt format: chat (auto: the tokenizer's chat template)"
    assert format_note("tulu", "tulu") == "prompt format: tulu"
