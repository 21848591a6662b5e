"""One item's prompts for explain: with its context, without it, with a subset of its
sentences, and where each sentence's tokens sit in the prompt.

Every prompt is rendered by `data.prompts.render`, the renderer `knowflow eval` uses, so an
explained answer is the answer `knowflow eval` scores; an ablated prompt is the same item with
the kept sentences as its context (`splitter.join_kept`), and an ablation that keeps nothing is
the prompt without a context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from knowflow.data.facts import ConflictItem
from knowflow.data.prompts import Prompt, PromptConfig, render
from knowflow.errors import KnowflowError
from knowflow.explanation.splitter import Sentence, join_kept
from knowflow.lens.prompt_batches import encode_prompts


def rendered(item: ConflictItem, tokenizer, fmt: str, context: str | None = None
             ) -> Prompt:
    """The item's prompt with `context` in place of its own (None: its own; "": none)."""
    shown = item.context if context is None else context
    return render(dataclasses.replace(item, context=shown), tokenizer,
                  PromptConfig(fmt, use_context=bool(shown)))


def with_lead(prompt: Prompt, lead: str) -> Prompt:
    """The prompt followed by the start of the answer (`lead`, the text before the span that
    is explained); the span then follows it directly."""
    if not lead:
        return prompt
    return dataclasses.replace(prompt, text=prompt.text + prompt.answer_prefix + lead,
                               answer_prefix="")


def encode(tokenizer, prompts: Sequence[Prompt]) -> list[list[int]]:
    return encode_prompts(tokenizer, [p.text for p in prompts],
                          [p.add_special_tokens for p in prompts])


def ablated_prompts(item: ConflictItem, sentences: Sequence[Sentence], masks: torch.Tensor,
                    tokenizer, fmt: str, lead: str = "") -> list[list[int]]:
    """Token ids of the item's prompt under each mask row (ablations, sentences) {0,1},
    followed by `lead` (see `with_lead`)."""
    texts = [join_kept(item.context, sentences, [bool(k) for k in row])
             for row in masks.tolist()]
    return encode(tokenizer, [with_lead(rendered(item, tokenizer, fmt, t), lead)
                              for t in texts])


def sentence_tokens(item: ConflictItem, sentences: Sequence[Sentence], tokenizer, fmt: str
                    ) -> list[list[int]]:
    """For each sentence, the positions of the full prompt's tokens that overlap its
    characters (from the fast tokenizer's offsets)."""
    prompt = rendered(item, tokenizer, fmt)
    at = prompt.text.find(item.context)
    if at < 0:
        raise KnowflowError("the prompt format rewrites the context, so its sentences cannot "
                            "be located", "use --prompt-format chat, plain, alpaca or tulu")
    if not getattr(tokenizer, "is_fast", False):
        raise KnowflowError("sentence positions need a fast (Rust) tokenizer",
                            "load the model with its fast tokenizer")
    enc = tokenizer(prompt.text, add_special_tokens=prompt.add_special_tokens,
                    return_offsets_mapping=True)
    offsets = enc["offset_mapping"]                                    # (seq, 2) chars
    out = []
    for sent in sentences:
        lo, hi = at + sent.start, at + sent.end
        out.append([i for i, (a, b) in enumerate(offsets) if b > a and a < hi and b > lo])
    return out
