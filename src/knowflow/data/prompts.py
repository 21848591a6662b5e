"""Prompt formats for knowledge-conflict items.

A prompt is rendered from an item in one of four formats: the model's own chat template
(`tokenizer.apply_chat_template`; knowflow never writes chat templates by hand), Alpaca,
TULU, or plain text. The default, "auto", follows the tokenizer (`resolve_format`): its
chat template when it has one, plain text otherwise (a base model); entry points resolve it
once, when the tokenizer is known, and record the format they used. `render` returns the
prompt and the text placed between the prompt and an answer when the answer is scored as a
continuation (" " after "Answer:", "" after a chat turn). For completion items (MemoTrap
style) the prompt ends with the text to complete, also inside a chat turn, so generation and
log-likelihood both score the word that follows it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from dataclasses import dataclass
from typing import Literal

from knowflow.data.facts import ConflictItem
from knowflow.errors import ConfigError, KnowflowError

PromptFormat = Literal["auto", "chat", "alpaca", "tulu", "plain"]
FORMATS: tuple[str, ...] = ("auto", "chat", "alpaca", "tulu", "plain")
FORMAT_HELP = ("auto (chat if the tokenizer has a chat template, else plain), chat (the model's "
               "template), alpaca, tulu or plain.")  # --prompt-format

CONTEXT_ONLY = "Answer based on the context only."
SHORT_ANSWER = "Answer in a few words."
NARRATOR = "Bob"
OPINION_READ = "Read the given information and answer the corresponding question."
_ALPACA_INPUT = ("Below is an instruction that describes a task, paired with an input that "
                 "provides further context. Write a response that appropriately completes the "
                 "request.\n\n### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n"
                 "### Response:\n")
_ALPACA = ("Below is an instruction that describes a task. Write a response that appropriately "
           "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
_TULU = "<|user|>\n{body}\n<|assistant|>\n"


def has_chat_template(tokenizer) -> bool:
    return getattr(tokenizer, "chat_template", None) is not None


def resolve_format(fmt: str, tokenizer, field: str = "prompt_format") -> str:
    """The format prompts are rendered in: "auto" is "chat" when `tokenizer` has a chat
    template and "plain" when it has none; "chat" without a template is refused (a
    ConfigError naming `field`); the others stay as they are."""
    if fmt not in FORMATS:
        raise ConfigError(f"{fmt!r} is not one of {', '.join(FORMATS)}", field)
    if fmt == "auto":
        return "chat" if has_chat_template(tokenizer) else "plain"
    if fmt == "chat" and not has_chat_template(tokenizer):
        raise ConfigError("chat, but this model's tokenizer has no chat template", field,
                          "use auto (plain for a base model), plain, alpaca or tulu")
    return fmt


def format_note(requested: str, used: str) -> str:
    """The line a command shows for the format it rendered in (`used`) when `requested`
    was asked: "prompt format: plain (auto: the tokenizer has no chat template)"."""
    if requested != "auto":
        return f"prompt format: {used}"
    why = "the tokenizer's chat template" if used == "chat" else \
        "the tokenizer has no chat template"
    return f"prompt format: {used} (auto: {why})"


@dataclass(frozen=True)
class PromptConfig:
    format: PromptFormat = "auto"
    use_context: bool = True           # False: the question alone (what the model knows)
    context_only: bool = False         # add "Answer based on the context only."
    opinion: bool = False              # recast the context as a person's statement (Zhou 2023)


@dataclass(frozen=True)
class Prompt:
    text: str
    answer_prefix: str                 # text between the prompt and a scored answer
    add_special_tokens: bool           # False when a chat template already added them


def _complete_instruction(item: ConflictItem, cfg: PromptConfig) -> str:
    parts = []
    if cfg.use_context and item.context:
        if cfg.context_only:
            parts.append(CONTEXT_ONLY)
        parts.append(item.context)
    else:
        parts.append("Complete the saying:")
    return " ".join(parts)


_CONTROL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def control_tokens(tokenizer) -> tuple[str, ...]:
    """The tokenizer's special tokens (bos/eos/pad, chat turn markers such as <|im_end|>):
    text that tokenizes to them is read as structure, not as words."""
    try:
        return _CONTROL[tokenizer]
    except (KeyError, TypeError):
        pass
    found = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(tok, "special", False):
            found.add(str(tok.content if hasattr(tok, "content") else tok))
    tokens = tuple(sorted((t for t in found if t.strip()), key=len, reverse=True))
    with contextlib.suppress(TypeError):  # an object without weak references: not kept
        _CONTROL[tokenizer] = tokens
    return tokens


def check_plain_text(tokenizer, text: str, field: str, where: str = "") -> None:
    """`text` (a context, question, instruction or answer from data) holds none of the
    tokenizer's control tokens: inside a prompt `<|im_end|><|im_start|>assistant` would end
    the user's turn and forge the model's, so such a row is refused, naming it."""
    if not text or "<" not in text and "[" not in text and "|" not in text:
        return  # every chat/special marker knowflow has met holds one of these
    found = [(text.index(t), -len(t), t) for t in control_tokens(tokenizer) if t in text]
    if not found:
        return
    at, _, token = min(found)  # the first in the text (the longest where two start there)
    shown = text[max(0, at - 20):at + len(token) + 20].replace("\n", " ")
    raise KnowflowError(f"{where + ': ' if where else ''}field '{field}' holds {token!r}, one "
                        f"of the tokenizer's control tokens (...{shown}...); in a prompt it "
                        "would be read as chat structure (a forged turn), not as text",
                        "remove it from the data")


def _chat(tokenizer, body: str) -> str:
    if not has_chat_template(tokenizer):
        raise KnowflowError("this model's tokenizer has no chat template; use --prompt-format "
                            "plain, alpaca or tulu")
    return tokenizer.apply_chat_template([{"role": "user", "content": body}], tokenize=False,
                                         add_generation_prompt=True)


def qa_instruction(item: ConflictItem, cfg: PromptConfig) -> str:
    """The instruction of a QA item: the question and the short-answer request."""
    shown = cfg.use_context and item.context
    hint = f"{CONTEXT_ONLY}\n" if shown and cfg.context_only else ""
    if shown and cfg.opinion:
        hint += f"{OPINION_READ}\n"
    return f"{hint}Question: {item.question}\n{SHORT_ANSWER}"


def instruction_prompt(tokenizer, instruction: str, context: str, fmt: str) -> Prompt:
    """An instruction (with an optional context passage, Alpaca's `input`) in format `fmt`.

    Finetuning (`knowflow sft`) and evaluation render through this one function, so a model
    is evaluated in exactly the layout it was finetuned in.
    """
    if fmt not in FORMATS:
        raise KnowflowError(f"unknown prompt format {fmt!r} (use {', '.join(FORMATS)})")
    fmt = resolve_format(fmt, tokenizer) if fmt == "auto" else fmt
    check_plain_text(tokenizer, instruction, "instruction")
    check_plain_text(tokenizer, context, "context")
    if fmt == "alpaca":
        if context:
            return Prompt(_ALPACA_INPUT.format(instruction=instruction, input=context), "", True)
        return Prompt(_ALPACA.format(instruction=instruction), "", True)
    if fmt == "plain":
        text = f"{context}\n\n{instruction}\nAnswer:" if context else \
            f"{instruction}\nAnswer:"
        return Prompt(text, " ", True)
    body = f"Context: {context}\n\n{instruction}" if context else instruction
    if fmt == "tulu":
        return Prompt(_TULU.format(body=body), "", True)
    return Prompt(_chat(tokenizer, body), "", False)


def opinion_item(item: ConflictItem) -> ConflictItem:
    """Opinion-based prompting (Zhou et al. 2023, "Context-faithful prompting"): the context
    becomes what a narrator said, the question asks for the answer in the narrator's opinion,
    and an instruction asks to answer from the given text. Items without a context are kept."""
    if not item.context:
        return item
    said = f'{NARRATOR} said, "{item.context}"'
    if item.task == "complete":  # the instruction is the narrator's; the text follows it
        return dataclasses.replace(item, context=f"{said} Complete the text as {NARRATOR} "
                                                 "asks:")
    question = item.question.rstrip().rstrip("?").rstrip()
    return dataclasses.replace(item, context=said,
                               question=f"{question} in {NARRATOR}'s opinion?")


def render(item: ConflictItem, tokenizer, cfg: PromptConfig) -> Prompt:
    """The prompt for `item` in format `cfg.format` (`cfg.opinion`: see `opinion_item`)."""
    fmt = cfg.format
    if fmt not in FORMATS:
        raise KnowflowError(f"unknown prompt format {fmt!r} (use {', '.join(FORMATS)})")
    fmt = resolve_format(fmt, tokenizer) if fmt == "auto" else fmt
    for name in ("context", "question", "answer", "memory_answer"):
        check_plain_text(tokenizer, getattr(item, name, "") or "", name, item.id)
    if cfg.opinion and cfg.use_context:
        item = opinion_item(item)
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
    context = item.context if cfg.use_context else ""
    return instruction_prompt(tokenizer, qa_instruction(item, cfg), context, fmt)
