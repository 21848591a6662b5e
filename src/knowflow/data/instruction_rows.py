"""Instruction rows (what `knowflow sft` trains on and curation scores): load and save a file,
render prompts, tokenize with the loss on the response only.

A file is JSONL (or a JSON list) in one of two forms, which may not be mixed:
- Alpaca: `instruction`, `input` (the context; may be empty or absent), `output`;
- chat: `messages`, a list of {"role", "content"} ending with an assistant turn.
Extra fields (`kind`, `meta`, ...) are kept for curation and augmentation. Prompts are
rendered by `prompts.instruction_prompt`, the same function evaluation uses, so a
model is tracked in the layout it is trained in. Chat rows use the tokenizer's own template.
Where a command takes a file of rows, "builtin" names the built-in C / C+S / S mixture
(`instructions.py`); `instruction_rows` reads either, or takes rows in memory, and
`check_rows_out` checks the files a command writes from them before any work.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from knowflow.data.facts import Instruction
from knowflow.data.instructions import MixtureConfig, builtin_mixture
from knowflow.data.loaders import json_records
from knowflow.data.prompts import check_plain_text, instruction_prompt, resolve_format
from knowflow.data.quality import duplicate_key_lines, warn_duplicate_keys
from knowflow.errors import ConfigError, DataError, KnowflowError
from knowflow.store.files import atomic_write_jsonl
from knowflow.store.outputs import check_out_files
from knowflow.store.readers import input_file, read_text

IGNORE = -100  # label of tokens that carry no loss
_ROLES = ("system", "user", "assistant")


def _text(rec: dict, name: str, path, line: int, required: bool) -> str:
    value = rec.get(name, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise DataError(path, "must be a non-empty string" if required else "must be a string",
                        line=line, field=name)
    return value


def _messages(rec: dict, path, line: int) -> tuple[tuple[str, str], ...]:
    msgs = rec["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise DataError(path, "must be a non-empty list", line=line, field="messages")
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in _ROLES or \
                not isinstance(m.get("content"), str):
            raise DataError(path, "each message needs a role (system, user, assistant) and a "
                            "string content", line=line, field=where)
        out.append((m["role"], m["content"]))
    if out[-1][0] != "assistant" or not out[-1][1].strip():
        raise DataError(path, "the last message must be a non-empty assistant turn",
                        line=line, field="messages")
    return tuple(out)


def parse_instruction(rec: object, path, line: int) -> Instruction:
    if not isinstance(rec, dict):
        raise DataError(path, "expected a JSON object", line=line)
    if "messages" in rec:
        extra = {k: v for k, v in rec.items() if k != "messages"}
        return Instruction(messages=_messages(rec, path, line), extra=extra)
    if "instruction" not in rec and "output" not in rec:
        raise DataError(path, "expected Alpaca fields (instruction, input, output) or chat "
                        "'messages'", line=line, field="instruction")
    extra = {k: v for k, v in rec.items() if k not in ("instruction", "input", "output")}
    return Instruction(_text(rec, "instruction", path, line, True),
                       _text(rec, "input", path, line, False),
                       _text(rec, "output", path, line, True), extra=extra)


@dataclass(frozen=True)
class InstructionFile:
    """An instruction file read once: its rows and the lines that give a key twice
    (`data.quality.duplicate_key_lines`)."""

    rows: tuple[Instruction, ...]
    duplicate_key_lines: tuple[int, ...]


_LAST: list = [None, None]  # (the file's identity, its InstructionFile): the last file read


def read_instruction_file(path: str | Path) -> InstructionFile:
    """Read and check an instruction file; a malformed one raises DataError (file, line,
    field). The last file read is kept while it is unchanged (same path, inode, size and
    modification time), so `knowflow sft --data F` reads F once: its checks, the job that
    trains on its rows and the summary's duplicate-key count share one reading."""
    path = input_file(path)
    st = os.stat(path)
    identity = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    if _LAST[0] == identity:
        return _LAST[1]
    text = read_text(path)
    rows = [(line, parse_instruction(rec, path, line))
            for line, rec in json_records(path, text=text)]
    if not rows:
        raise DataError(path, "no records")
    chat = {bool(ex.messages) for _, ex in rows}
    if len(chat) > 1:
        line = next(n for n, ex in rows if bool(ex.messages) != bool(rows[0][1].messages))
        raise DataError(path, "mixes chat 'messages' rows with Alpaca rows", line=line,
                        field="messages")
    read = InstructionFile(tuple(ex for _, ex in rows),
                           tuple(duplicate_key_lines(path, text=text)))
    _LAST[:] = [identity, read]
    return read


def load_instructions(path: str | Path) -> list[Instruction]:
    """Examples of an instruction file; a malformed one raises DataError (file, line, field)."""
    return list(read_instruction_file(path).rows)


def save_instructions(path: str | Path, examples: Sequence[Instruction]) -> Path:
    return atomic_write_jsonl(path, [ex.to_dict() for ex in examples])


def prompt_and_response(tokenizer, ex: Instruction, fmt: str, context: bool = True
                        ) -> tuple[str, bool, str]:
    """(prompt text, whether the tokenizer adds special tokens to it, response text).

    `context=False` drops Alpaca's `input` (what curation scores against)."""
    fmt = resolve_format(fmt, tokenizer)  # auto: chat with a template, else plain
    for role, text in ex.messages:
        check_plain_text(tokenizer, text, f"messages ({role})")
    for name in ("instruction", "input", "output"):
        check_plain_text(tokenizer, getattr(ex, name), name)
    if ex.messages:
        if fmt != "chat":
            raise ConfigError("chat 'messages' data needs --prompt-format chat",
                              "prompt_format")
        msgs = [{"role": r, "content": c} for r, c in ex.messages]
        prompt = tokenizer.apply_chat_template(msgs[:-1], tokenize=False,
                                               add_generation_prompt=True)
        full = tokenizer.apply_chat_template(msgs, tokenize=False)
        if not full.startswith(prompt):
            raise ConfigError("the chat template does not render the conversation as "
                              "prompt + response; use Alpaca-form data", "prompt_format")
        return prompt, False, full[len(prompt):]
    p = instruction_prompt(tokenizer, ex.instruction, ex.input if context else "", fmt)
    if fmt == "chat":
        msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": ex.output}]
        head = tokenizer.apply_chat_template(msgs[:1], tokenize=False,
                                             add_generation_prompt=True)
        tail = tokenizer.apply_chat_template(msgs, tokenize=False)[len(head):]
        return p.text, p.add_special_tokens, tail
    return p.text, p.add_special_tokens, p.answer_prefix + ex.output + (tokenizer.eos_token or "")


def encode(tokenizer, ex: Instruction, fmt: str, context: bool = True) -> dict[str, list[int]]:
    """input_ids and labels (IGNORE on the prompt) for one example."""
    prompt, special, response = prompt_and_response(tokenizer, ex, fmt, context)
    p_ids = tokenizer(prompt, add_special_tokens=special)["input_ids"]
    r_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    return {"input_ids": p_ids + r_ids, "labels": [IGNORE] * len(p_ids) + r_ids}


def encode_all(tokenizer, examples: Sequence[Instruction], fmt: str, max_length: int,
               context: bool = True) -> tuple[list[dict], list[int]]:
    """Encoded examples that fit in `max_length` tokens, and the indices of those dropped
    (never truncated: cutting the prompt would cut the context the answer depends on)."""
    kept, dropped = [], []
    for i, ex in enumerate(examples):
        try:
            enc = encode(tokenizer, ex, fmt, context)
        except KnowflowError as exc:  # a row the tokenizer cannot take: say which
            raise KnowflowError(f"row {i + 1}: {exc.message}", exc.hint) from None
        if len(enc["input_ids"]) <= max_length:
            kept.append(enc)
        else:
            dropped.append(i)
    return kept, dropped


BUILTIN = "builtin"  # the built-in mixture, where a command takes an instruction file


def load_rows(data: str, mixture: MixtureConfig) -> list[Instruction]:
    """The rows of an instruction file, or of the built-in mixture for "builtin"."""
    return builtin_mixture(mixture) if data == BUILTIN else load_instructions(data)


def instruction_rows(data, seed: int = 0) -> list[Instruction]:
    """Instruction rows: a JSONL/JSON instruction file (repeated keys are warned of),
    "builtin" (the C/C+S/S mixture of `seed`), or rows in memory (`Instruction`s, or records
    as `knowflow.augment` returns them)."""
    if data is None or isinstance(data, (str, Path)):
        if data is not None and str(data) != BUILTIN:  # one reading: load_rows gets its rows
            warn_duplicate_keys(Path(data), read_instruction_file(data).duplicate_key_lines)
        return load_rows(str(data or BUILTIN), MixtureConfig(seed=seed))
    return [r if isinstance(r, Instruction) else parse_instruction(r, "rows", i)
            for i, r in enumerate(data, start=1)]


def check_rows_out(data, out: str | Path, derived: tuple[tuple[str, str], ...] = ()) -> None:
    """`out`, and the files named after it (`derived`: (what, suffix)), are new or replaceable
    files, none the input file `data` nor another's (checked before any work)."""
    out = Path(out)
    named = isinstance(data, (str, Path)) and str(data) != BUILTIN
    if named and not Path(data).is_file():
        raise DataError(data, "no such file" if not Path(data).exists() else "not a file",
                        hint="give a JSONL instruction file or 'builtin'")
    if named and out.resolve() == Path(data).resolve():
        raise ConfigError(f"{out} is the input file", "out", "write to a new file; the input "
                          "is read while the output is written")
    check_out_files({"output": out, **{what: out.with_suffix(suffix) for what, suffix in derived}},
                    inputs=[Path(data)] if named else [])
