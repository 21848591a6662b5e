"""Probe examples from knowflow's built-in knowledge-conflict suites (knowflow.data.suites).

For the attention probe an item becomes its full prompt (context + question, rendered as
`knowflow eval` renders it) with the context's character span. For the recall probes
(knockout, sublayer, project) an item becomes its question alone, which needs the subject
the item names (`item.subject`, or `meta["subject"]`); items without one are an error.
"""

from __future__ import annotations

from knowflow.data.prompts import PromptConfig, render
from knowflow.data.suites import get_suite
from knowflow.errors import KnowflowError
from knowflow.probes.examples import ProbeExample, find_text


def suite_examples(name: str, tokenizer, with_context: bool, prompt_format: str = "plain",
                   limit: int | None = None, seed: int = 0) -> list[ProbeExample]:
    items = get_suite(name, seed=seed, limit=limit)
    out = []
    for item in items:
        prompt = render(item, tokenizer, PromptConfig(format=prompt_format,
                                                      use_context=with_context)).text
        subject = item.subject or (item.meta.get("subject") if isinstance(item.meta, dict)
                                   else None)
        if not with_context and (subject is None or find_text(prompt, subject) is None):
            raise KnowflowError(f"suite {name!r} item {item.id} names no subject in its "
                                "question; recall probes need one (use --data prompts.jsonl)")
        span = find_text(prompt, item.context) if with_context and item.context else None
        if with_context and span is None:
            raise KnowflowError(f"suite {name!r} item {item.id}: its context is not in the "
                                "rendered prompt")
        out.append(ProbeExample(prompt=prompt, subject=subject, answer=item.parametric_answer,
                                context=span, id=item.id))
    return out
