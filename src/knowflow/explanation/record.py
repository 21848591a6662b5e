"""The source level of one explain record, and the record of an item explain could not explain.

Every record carries `unexplained`: null where the answer was explained, else the reason it
could not be (the model generated nothing, or an answer it cannot produce: no tokens of its
own in the model's vocabulary, probability 0 after the prompt, or a sentence with no token
of its own). Such an item is one record with its answers and the reason, and no verdict or
log-probabilities; the summary counts it (`summary.py`), and the run goes on. A record
written before the field existed has no `unexplained` key: it was explained.
"""

from __future__ import annotations

import math

from knowflow.data.facts import ConflictItem
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.source import names, produced_label, same_answer, says_first, verdict

EMPTY = "the model generated nothing"


def source_record(item: ConflictItem, cfg: ExplainConfig, answer: str,
                  span: tuple[str, str], said: str, said_bare: str, scored, scored_bare,
                  rival: tuple[str, float, float] | None) -> dict:
    """The source level of one record; `scored`/`scored_bare`: ((answer's log-prob, tokens),
    (memory answer's log-prob, tokens)) with and without the context; `rival`: the
    no-context answer the span is weighed against (`run._rival_texts`)."""
    lp_ctx, lp_bare = scored[0][0], scored_bare[0][0]
    agrees = same_answer(span[1], said_bare) or \
        bool(span[0] and rival and says_first(span[1], rival[0]))
    name, numbers = verdict(lp_ctx, lp_bare, agrees, rival and rival[1:], cfg.context_ratio)
    numbers["rival"] = rival[0] if rival else None
    labelled = bool(item.counterfactual_answer.strip() and item.parametric_answer.strip())
    produced, expected = produced_label(item, answer, said_bare) if labelled else (None, None)
    known = bool(said_bare.strip())
    mem = {"memory_answer_logprob_context": scored[1][0] if known else None,
           "memory_answer_logprob_no_context": scored_bare[1][0] if known else None,
           "memory_answer_prob_no_context": math.exp(scored_bare[1][0]) if known else None}
    return {**_item_fields(item, cfg, answer, said, said_bare), "unexplained": None,
            "answer_lead": span[0], "explained": span[1],
            "explained_tokens": scored[0][1], "logprob_context": lp_ctx,
            "logprob_no_context": lp_bare, "context_contribution": lp_ctx - lp_bare, **mem,
            "verdict": name, "verdict_numbers": numbers,
            "produced": produced, "expected_verdict": expected,
            "produced_no_context": names(item, said_bare) if labelled else None,
            "verdict_agrees": None if expected is None else expected == name}


def unexplained_record(item: ConflictItem, cfg: ExplainConfig, answer: str, said: str,
                       said_bare: str, reason: str) -> dict:
    """The record of an item whose answer could not be explained: its answers and `reason`;
    no verdict, log-probability or attribution."""
    return {**_item_fields(item, cfg, answer, said, said_bare), "unexplained": reason,
            "answer_lead": "", "explained": "", "explained_tokens": 0,
            "logprob_context": None, "logprob_no_context": None,
            "context_contribution": None, "verdict": None, "verdict_numbers": None,
            "produced": None, "expected_verdict": None, "produced_no_context": None,
            "verdict_agrees": None, "seconds": {}}


def _item_fields(item: ConflictItem, cfg: ExplainConfig, answer: str, said: str,
                 said_bare: str) -> dict:
    return {"id": item.id, "suite": item.suite, "context": item.context,
            "question": item.question, "target": cfg.target, "answer": answer,
            "answer_generated": said, "answer_no_context": said_bare,
            "counterfactual_answer": item.counterfactual_answer,
            "parametric_answer": item.parametric_answer, "needle": item.meta.get("needle")}
