"""Prompt formats for knowledge-conflict items.

A prompt is rendered from an item in one of four formats: the model's own chat template
(`tokenizer.apply_chat_template`; knowflow never writes chat templates by hand), Alpaca,
TULU, or plain text. `render` returns the prompt and the text placed between the prompt and an
answer when the answer is scored as a continuation (" " after "Answer:", "" after a chat
turn). For completion items (MemoTrap style) the prompt ends with the text to complete, also
inside a chat turn, so generation and log-likelihood both score the word that follows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from knowflow.errors import KnowflowError
from knowflow.worlds.facts import ConflictItem

PromptFormat = Literal["chat", "alpaca", "tulu", "plain"]
FORMATS: tuple[str, ...] = ("chat", "alpaca", "tulu", "plain")

CONTEXT_ONLY = "Answer based on the context only."
SHORT_ANSWER = "Answer in a few words."
_ALPACA_INPUT = ("Below is an instruction that describes a task, paired with an input that "
                 "provides further context. Write a response that appropriately completes the "
                 "request.\n\n### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n"
                 "### Response:\n")
_ALPACA = ("Below is an instruction that describes a task. Write a response that appropriately "
           "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
_TULU = "<|user|>\n{body}\n<|assistant|>\n"


@dataclass(frozen=True)
class PromptConfig:
    format: PromptFormat = "chat"
    use_context: bool = True           # False: the question alone (what the model knows)
    context_only: bool = False         # add "Answer based on the context only."


@dataclass(frozen=True)
class Prompt:
    text: str
    answer_prefix: str                 # text between the prompt and a scored answer
    add_special_tokens: bool           # False when a chat template already added them


def _qa_body(item: ConflictItem, cfg: PromptConfig) -> str:
    parts = []
    if cfg.use_context and cfg.context_only:
        parts.append(CONTEXT_ONLY)
    if cfg.use_context and item.context:
        parts.append(f"Context: {item.context}")
    parts.append(f"Question: {item.question}\n{SHORT_ANSWER}")
    return "\n\n".join(parts)


def _complete_instruction(item: ConflictItem, cfg: PromptConfig) -> str:
    parts = []
    if cfg.use_context and item.context:
        if cfg.context_only:
            parts.append(CONTEXT_ONLY)
        parts.append(item.context)
    else:
        parts.append("Complete the saying:")
    return " ".join(parts)


def _chat(tokenizer, body: str) -> str:
    if getattr(tokenizer, "chat_template", None) is None:
        raise KnowflowError("this model's tokenizer has no chat template; use --prompt-format "
                            "plain, alpaca or tulu")
    return tokenizer.apply_chat_template([{"role": "user", "content": body}], tokenize=False,
                                         add_generation_prompt=True)


def render(item: ConflictItem, tokenizer, cfg: PromptConfig) -> Prompt:
    """The prompt for `item` in format `cfg.format`."""
    fmt = cfg.format
    if fmt not in FORMATS:
        raise KnowflowError(f"unknown prompt format {fmt!r} (use {', '.join(FORMATS)})")
    if item.task == "complete":
        instruction = _complete_instruction(item, cfg)
        if fmt == "plain":
            text = f"{instruction} {item.question}"
        elif fmt == "chat":
            text = _chat(tokenizer, instruction) + item.question
        elif fmt == "tulu":
            text = _TULU.format(body=instruction) + item.question
        else:
            text = _ALPACA.format(instruction=instruction) + item.question
        return Prompt(text, " ", fmt != "chat")
    if fmt == "plain":
        context = f"{item.context}\n\n" if cfg.use_context and item.context else ""
        hint = f"{CONTEXT_ONLY}\n\n" if cfg.use_context and cfg.context_only else ""
        return Prompt(f"{hint}{context}Question: {item.question}\nAnswer:", " ", True)
    if fmt == "alpaca":
        if cfg.use_context and item.context:
            instruction = (f"{CONTEXT_ONLY} " if cfg.context_only else "") + \
                f"{item.question} {SHORT_ANSWER}"
            text = _ALPACA_INPUT.format(instruction=instruction, input=item.context)
        else:
            text = _ALPACA.format(instruction=f"{item.question} {SHORT_ANSWER}")
        return Prompt(text, "", True)
    body = _qa_body(item, cfg)
    if fmt == "tulu":
        return Prompt(_TULU.format(body=body), "", True)
    return Prompt(_chat(tokenizer, body), "", False)
