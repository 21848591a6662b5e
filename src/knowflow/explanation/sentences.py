"""The sentence and mechanism levels of one explain record, and the answer generated from the
item's prompt run once.

With the sentence level on, each item's prompt with its context runs once (`lens.shared`):
its keys and values seed the greedy answer (`generate_from`), the source verdict's scores
with the context, every ablation (each costs its tokens after its first removed sentence),
the held-out masks and the top-k drops (`attribution.py`), the one-pass features' context
pass (`features.soft_effects`) and the attention the mechanism picks its heads by.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from knowflow.data.facts import ConflictItem
from knowflow.evaluation.generate import Stream, clean_output, decode, greedy, stop_table
from knowflow.explanation.attribution import (
    agreement,
    attention_to_sentences,
    attribute,
    gradient_x_input,
    only_sentence,
)
from knowflow.explanation.estimator import Estimator
from knowflow.explanation.hierarchy import hierarchical, hierarchical_attribute
from knowflow.explanation.learned import learned_attribute, sentence_features
from knowflow.explanation.mechanism import mechanism
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import sentence_tokens
from knowflow.explanation.splitter import split_sentences
from knowflow.lens.batching import pad_id
from knowflow.lens.shared import SharedPrompt
from knowflow.store.run_folder import Progress


class Unexplainable(Exception):
    """An item whose answer cannot be explained (the reason is the message): one record
    (`record.unexplained_record`), and the run goes on."""


def generate_from(model, tokenizer, prompt_ids: Sequence[int], shared: SharedPrompt,
                  max_new_tokens: int) -> str:
    """The greedy answer to one prompt whose keys and values `shared` holds up to its last
    token: `evaluation.generate`'s decoding (the same stops, the same text) continued from
    them instead of from a pass over the prompt."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    table = stop_table(tokenizer, model.get_output_embeddings().weight.shape[0], eos)
    stream = Stream(model, [list(prompt_ids)], shared.prefix(len(prompt_ids) - 1),
                    pad_id(tokenizer))
    (tokens,) = decode([stream], greedy, max_new_tokens, table)
    return clean_output(tokenizer.decode(tokens, skip_special_tokens=True))


def gradient_prior(model, tokenizer, prompt_ids: Sequence[int], continuation: str,
                   spans: Sequence[Sequence[int]], shared: SharedPrompt | None = None
                   ) -> torch.Tensor:
    """(sentences,) the one-pass scores the ablation surrogate is steered by: each sentence's
    keep-weight gradient at 1/2 summed over heads (`features.soft_effects`), one forward and
    backward pass over the readers from `shared`'s keys and values."""
    answer_ids = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    return sentence_features(model, prompt_ids, answer_ids, spans, ("soft",), None,
                             shared).sum(1)                                # (sentences,)


def sentence_levels(model, tokenizer, item: ConflictItem, prompt_ids: list[int],
                    continuation: str, lp_ctx: float, cfg: ExplainConfig, seconds: dict,
                    lead: str, progress: Progress | None = None,
                    estimator: Estimator | None = None, shared: SharedPrompt | None = None
                    ) -> dict:
    """The sentence and mechanism levels of one record; `prompt_ids` end with `lead`, the
    answer's text before the explained `continuation`; `shared`: the item's prompt, run
    once (see the module docstring)."""
    sentences = split_sentences(item.context)
    spans = sentence_tokens(item, sentences, tokenizer, cfg.prompt_format)
    if any(not s for s in spans):
        raise Unexplainable("a sentence has no tokens of its own in the prompt")
    clock = time.perf_counter()
    documents = None
    if len(sentences) == 1:            # nothing to weigh it against: removed, exactly
        attr = only_sentence(model, tokenizer, item, sentences, continuation, lp_ctx, cfg, lead,
                             shared)
        seconds["ablation"] = time.perf_counter() - clock
    elif estimator is not None:
        attr = learned_attribute(model, tokenizer, item, sentences, prompt_ids, continuation,
                                 lp_ctx, spans, estimator.tensor(), cfg, lead,
                                 estimator.features,
                                 "gradient" if cfg.attribution == "gradient" else "learned",
                                 shared)
        seconds["learned"] = time.perf_counter() - clock
    elif hierarchical(cfg, len(sentences)):
        attr, documents = hierarchical_attribute(model, tokenizer, item, sentences,
                                                 continuation, lp_ctx, cfg, lead, progress)
        seconds["ablation"] = time.perf_counter() - clock
    else:
        prior = gradient_prior(model, tokenizer, prompt_ids, continuation, spans, shared) \
            if cfg.prior == "gradient" else None
        attr = attribute(model, tokenizer, item, sentences, continuation, lp_ctx, cfg, lead,
                         progress, shared, prior)
        seconds["ablation"] = time.perf_counter() - clock
    answer_ids = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    out = {"sentences": [{"text": s.text, "attribution": w}
                         for s, w in zip(sentences, attr.weights, strict=True)],
           **attr.to_dict(), **({"documents": documents} if documents else {})}
    needle = item.meta.get("needle")
    if needle is not None:
        out["top_hit"] = attr.top == needle
    if cfg.one_pass:                        # asked for: a forward and a backward pass
        clock = time.perf_counter()
        one_pass = gradient_x_input(model, prompt_ids, answer_ids, spans)
        seconds["one_pass"] = time.perf_counter() - clock
        for sentence, score in zip(out["sentences"], one_pass, strict=True):
            sentence["one_pass"] = score
        out["one_pass"] = agreement(attr.weights, one_pass)
        if needle is not None:
            out["one_pass_hit"] = out["one_pass"]["one_pass_top"] == needle
    if cfg.mechanism:
        clock = time.perf_counter()
        mass = attention_to_sentences(model, prompt_ids, spans, shared)  # (layers, heads, sent)
        context_keys = sorted({p for s in spans for p in s})
        out["mechanism"] = mechanism(model, prompt_ids, answer_ids, context_keys,
                                     spans[attr.top], mass[:, :, attr.top], cfg.window,
                                     cfg.n_heads, cfg.batch_size)
        seconds["mechanism"] = time.perf_counter() - clock
    return out
