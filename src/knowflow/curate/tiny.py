"""Context-critical filtering for tiny-world finetuning data: an alias of the one curation
rule in `knowflow.curate.criticality` (kept so that existing imports work)."""

from __future__ import annotations

from knowflow.curate import criticality


def no_context_loss(model, tokenizer, examples: list):
    """Per-example answer loss with the context removed. (n,)"""
    return criticality.no_context_loss(model, examples, tokenizer)


def drop_lowest_no_context_loss(model, tokenizer, examples: list, fraction: float) -> list:
    """All but the `fraction` of examples with the lowest no-context loss, order kept."""
    return criticality.drop_lowest_no_context_loss(model, examples, fraction, tokenizer)
