"""Probe examples from knowflow's built-in knowledge-conflict suites (knowflow.data.suites).

For the attention probe an item becomes its full prompt (context + question, rendered as
`knowflow eval` renders it) with the context's character span. For the recall probes
(knockout, sublayer, project) an item becomes its question alone, which needs the subject
the item names (`item.subject`, or `meta["subject"]`); items without one are an error.
The heads probe runs on the items themselves (`conflict_items`).
"""

from __future__ import annotations

from pathlib import Path

from knowflow.data.facts import ConflictItem
from knowflow.data.loaders import items_in_memory, load_items_checked
from knowflow.data.prompts import PromptConfig, render
from knowflow.data.suites import get_suite, list_suites, sample
from knowflow.errors import KnowflowError
from knowflow.probes.examples import ProbeExample, find_text

HEADS_DEFAULT = "cf-capitals"


def conflict_items(data=None, limit: int | None = None, seed: int = 0) -> list[ConflictItem]:
    """The knowledge-conflict items a heads probe runs on, from what `data` is: None (the
    cf-capitals suite), built-in suite names ("cf-capitals,cf-bio"), a data file as a `str`
    or a `pathlib.Path` (any file `knowflow eval --data` reads, or `hf:ORG/NAME`), or items in
    memory (`ConflictItem`s, e.g. `knowflow.load_items(path)`); `limit`: a seeded sample of
    that many from a file and from each suite, the first that many of items in memory.
    Anything else is a `ConfigError` naming `data`."""
    data = HEADS_DEFAULT if data is None else data
    names = data.split(",") if isinstance(data, str) else ()
    if isinstance(data, Path) or names and not all(n.strip() in list_suites() for n in names):
        items, _ = load_items_checked(data)
        items = sample(items, limit, seed, items[0].suite)
    elif isinstance(data, str):
        items = [it for name in data.split(",") for it in get_suite(name.strip(), seed, limit)]
    else:
        items = items_in_memory(data)
        items = items[:limit] if limit else items
    return items


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
