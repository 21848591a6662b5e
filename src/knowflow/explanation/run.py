"""`knowflow.explain`: where one answer came from — the context or the weights, which sentence,
and which layers and heads carried it.

For each item: the answer generated with the context and without it, the explained answer's
log-probability under both and the source verdict (`source.py`: every score of one side, with
the context or without it, in one pass over the token trie of its prompts, so an item's context
runs once per side); with `levels` including sentences, the attribution of each context
sentence by ablation (`attribution.py`), with one_pass also by gradient x input (a forward and a
backward pass, only when asked); with mechanism, the knockout effects per layer and head
(`mechanism.py`).
Every item is checked before any model work starts (an empty context, one sentence where
sentences are asked for, an answer the model cannot produce, a prompt longer than the model's
window), so bad input writes nothing. The Result's `save(dir)` writes the run folder
(config.json, records.jsonl, summary.json, figures/ and report.html).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

from knowflow.config import resolve_config
from knowflow.data.facts import ConflictItem
from knowflow.data.hub import is_hub
from knowflow.data.loaders import items_in_memory
from knowflow.data.prompts import resolve_format
from knowflow.data.suites import list_suites
from knowflow.errors import ConfigError, DataError, KnowflowError
from knowflow.evaluation.generate import generate
from knowflow.evaluation.items import load_suites
from knowflow.explanation.attribution import (
    agreement,
    attention_to_sentences,
    attribute,
    gradient_x_input,
    only_sentence,
    prompt_chunks,
)
from knowflow.explanation.estimator import Estimator, attribution_note, resolve_estimator
from knowflow.explanation.hierarchy import hierarchical, hierarchical_attribute
from knowflow.explanation.learned import learned_attribute
from knowflow.explanation.mechanism import mechanism
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import encode, rendered, sentence_tokens, with_lead
from knowflow.explanation.source import (
    first_clause,
    names,
    produced_label,
    same_answer,
    says_first,
    verdict,
)
from knowflow.explanation.splitter import split_sentences
from knowflow.explanation.summary import summarize
from knowflow.explanation.target import explained_span
from knowflow.explanation.tokens import token_attribution
from knowflow.lens.hub import ModelSource
from knowflow.lens.load import resolve_model
from knowflow.lens.memory import check_budget, eval_bytes, inference_bytes, shape_of
from knowflow.lens.scorer import Score, score_continuations
from knowflow.store.result import Result
from knowflow.store.run_folder import Progress

log = logging.getLogger(__name__)


def explain(model="smollm2-135m-instruct", data: str | Path | Sequence[ConflictItem] = "",
            question: str | None = None, answer: str | None = None, *, tokenizer=None,
            config: ExplainConfig | None = None, fields: dict[str, str] | None = None,
            device: str = "auto", dtype: str = "auto", progress: Progress | None = None,
            preset: str | None = None, source: ModelSource | None = None,
            **overrides) -> Result:
    """Explain `model`'s answers. With `question`, `data` is one context (text) and `answer`
    the answer to explain (default: per `target`, the model's own); otherwise `data` is a
    built-in suite name, a data file or hub dataset (anything `knowflow eval` reads; `fields`
    maps its columns, `preset` names its layout) or a list of ConflictItems. `overrides` set
    `ExplainConfig` fields."""
    cfg = resolve_config(ExplainConfig, config, overrides)
    items = load_explain_items(data, question, cfg, fields, preset)
    if answer is not None and len(items) != 1:
        raise ConfigError("an answer explains one item; give --context and --question",
                          "answer")
    start = time.perf_counter()                       # the run's time includes the load
    named = isinstance(model, (str, Path))
    if named:
        _report(progress, 0, 1, "load model")
    model, tokenizer, name = resolve_model(model, tokenizer, device=device, dtype=dtype,
                                           source=source)
    if named:
        _report(progress, 1, 1, "load model")
    # auto: chat with a template, else plain; the config records the format used
    cfg = dataclasses.replace(cfg, prompt_format=resolve_format(cfg.prompt_format, tokenizer))
    estimator_name = str(name) if isinstance(name, (str, Path)) and str(name) != \
        type(model).__name__ else getattr(model.config, "name_or_path", "") or str(name)
    est, method = resolve_estimator(model, estimator_name, cfg)
    if cfg.max_memory is not None:
        _check_memory(model, tokenizer, items, cfg)
    records = explain_items(model, tokenizer, items, cfg, answer, progress, est)
    config_dict = {"explain": True, "model": str(name),
                   **({"revision": source.revision} if source and source.revision else {}),
                   "data": data if isinstance(data, (str, Path)) else "items",
                   "question": question, "answer": answer, "n_items": len(items),
                   **dataclasses.asdict(cfg), "fields": dict(fields or {}),
                   "attribution_used": method,
                   "attribution_note": attribution_note(estimator_name, cfg, est)
                   + _one_sentence_note(records),
                   "estimator_provenance": est.provenance if est else None}
    config_dict["data"] = str(config_dict["data"]) if question is None else "context"
    return Result(records, summarize(records), config_dict, "explain",
                  seconds=time.perf_counter() - start)


def _one_sentence_note(records: list[dict]) -> str:
    """What the attribution line adds where some contexts had one sentence (attributed by
    its removal, `attribution.only_sentence`, whatever the method)."""
    n = sum(r.get("attribution_method") == "leave-one-out" for r in records)
    return f"; {n} of {len(records)} contexts one sentence: its removal, scored exactly" \
        if n else ""


def _check_memory(model, tokenizer, items: list[ConflictItem], cfg: ExplainConfig) -> None:
    """--max-memory, before any work: the larger of a generation batch (`batch_size` prompts
    of the longest item's length) and one trie scoring pass (a 2048-node chunk over up to
    `score_tokens` cached prompt tokens, `lens._trie`)."""
    longest = max(len(ids) for ids in encode(tokenizer, [rendered(it, tokenizer,
                                                                  cfg.prompt_format)
                                                         for it in items]))
    shape = shape_of(model)
    trie = inference_bytes(shape, 1, 2048, cached=cfg.score_tokens, dense_mask=True)
    check_budget(shape, lambda rows: max(eval_bytes(shape, longest, cfg.max_new_tokens)(rows),
                                         trie), cfg.batch_size, cfg.max_memory,
                 knob="--set batch_size=",
                 what=f"prompts of up to {longest} tokens; trie passes of up to "
                      f"{cfg.score_tokens} tokens (--set score_tokens=N)")


def _report(progress: Progress | None, done: int, total: int, stage: str) -> None:
    if progress is not None:
        progress(done, total, stage)


def load_explain_items(data, question: str | None, cfg: ExplainConfig,
                       fields: dict[str, str] | None = None, preset: str | None = None
                       ) -> list[ConflictItem]:
    """The items to explain: one context with its question, a suite, a file or items."""
    if question is not None:
        if not isinstance(data, str):
            raise ConfigError("with a question, give the context as text", "context")
        if not question.strip():
            raise ConfigError("empty; give the question to answer", "question")
        items = [ConflictItem(id="item-0", suite="explain", context=data.strip(),
                              question=question.strip(), counterfactual_answer="",
                              parametric_answer="")]
    elif isinstance(data, (str, Path)):
        if not str(data).strip():
            raise ConfigError("give a context and a question, a suite or a data file", "data")
        if str(data) not in list_suites() and not Path(data).exists() and not is_hub(data):
            raise ConfigError(f"{data!r} is neither a built-in suite nor a file", "data",
                              f"give a file or one of {', '.join(list_suites())}")
        items = _sampled(data, cfg, fields, preset)
    else:
        items = items_in_memory(data)
        if not items:
            raise ConfigError("no items to explain", "data")
    for item in items:
        check_item(item, cfg)
    return items


def _sampled(data: str | Path, cfg: ExplainConfig, fields: dict[str, str] | None,
             preset: str | None = None) -> list[ConflictItem]:
    """A suite's or file's items: the seeded sample of `limit` (all without), after skipping
    the first `offset` of the same seeded order (so --offset 60 --limit 60 are the 60 items
    that --limit 120 adds to --limit 60)."""
    def load(limit: int | None) -> list[ConflictItem]:
        if str(data) in list_suites():
            return load_suites(str(data), None, limit, cfg.seed)[str(data)]
        return next(iter(load_suites(None, data, limit, cfg.seed, fields=fields,
                                     preset=preset).values()))
    items = load(None if cfg.limit is None else cfg.offset + cfg.limit)
    if not cfg.offset:
        return items
    skip = {it.id for it in load(cfg.offset)}
    kept = [it for it in items if it.id not in skip]
    if not kept:
        raise ConfigError(f"skips all {len(items)} items", "offset", "give a smaller offset")
    return kept


def _where(item: ConflictItem) -> str:
    return "context" if item.suite == "explain" else f"{item.suite}: item {item.id}"


def check_item(item: ConflictItem, cfg: ExplainConfig) -> None:
    """An item explain can work on (no model needed): a context (one sentence is enough: its
    attribution is its removal, `attribution.only_sentence`); a counterfactual or parametric
    target it carries."""
    where = _where(item)
    if not item.context.strip():
        raise DataError(where, "the context is empty; explain needs a context to attribute to",
                        hint="give a non-empty context")
    if cfg.target != "generated":
        gold = item.counterfactual_answer if cfg.target == "counterfactual" else \
            item.parametric_answer
        if not gold.strip():
            raise DataError(where, f"no {cfg.target} answer to explain",
                            hint="give --answer, or --target generated")


def _check_answer(model, tokenizer, item: ConflictItem, answer: str, prompt_len: int) -> None:
    """The answer is something the model can produce, and the prompt with it fits the model."""
    where = _where(item)
    if not answer.strip():
        raise DataError(where, "the answer to explain is empty (the model generated nothing)",
                        hint="give --answer, or another --target")
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    vocab = model.get_output_embeddings().weight.shape[0]
    unk = tokenizer.unk_token_id
    if not ids or any(i >= vocab or (unk is not None and i == unk) for i in ids):
        raise DataError(where, f"the model cannot produce the answer {answer!r} (its tokenizer "
                        "has no tokens for it)", hint="give an answer in the model's vocabulary")
    check_window(model, where, prompt_len + len(ids))


def check_window(model, where: str, n_tokens: int) -> None:
    window = getattr(model.config, "max_position_embeddings", None)
    if window is not None and n_tokens > window:
        raise DataError(where, f"the prompt with its answer is {n_tokens} tokens, longer than "
                        f"the model's window ({window})", hint="give a shorter context")


def explain_items(model, tokenizer, items: list[ConflictItem], cfg: ExplainConfig,
                  answer: str | None = None, progress: Progress | None = None,
                  estimator: Estimator | None = None) -> list[dict]:
    """One record per item (see the module docstring)."""
    fmt = cfg.prompt_format
    with_ctx = [rendered(it, tokenizer, fmt) for it in items]
    without = [rendered(it, tokenizer, fmt, "") for it in items]
    seqs, bare = encode(tokenizer, with_ctx), encode(tokenizer, without)
    for it, s in zip(items, seqs, strict=True):
        check_window(model, _where(it), len(s) + (cfg.max_new_tokens if answer is None else 1))
    clock = time.perf_counter()
    gen = dict(batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens,
               progress=progress)
    _report(progress, 0, len(items), "generate with context")   # the bar shows from now
    said = generate(model, tokenizer, seqs, stage="generate with context", **gen)
    _report(progress, 0, len(items), "generate without context")
    said_bare = generate(model, tokenizer, bare, stage="generate without context", **gen)
    targets = [answer if answer is not None else _target(it, out, cfg)
               for it, out in zip(items, said, strict=True)]
    for it, a, s in zip(items, targets, seqs, strict=True):
        _check_answer(model, tokenizer, it, a, len(s))
    # the answer span weighed: the named labelled answer, else the span after the lead-in
    # (target.py); a given --answer or a labelled target is weighed whole
    ruled = [explained_span(it, a) if answer is None and cfg.target == "generated"
             else ("", a, "given") for it, a in zip(items, targets, strict=True)]
    spans = [(lead, span) for lead, span, _ in ruled]
    led = [with_lead(p, lead) for p, (lead, _) in zip(with_ctx, spans, strict=True)]
    led_bare = [with_lead(p, lead) for p, (lead, _) in zip(without, spans, strict=True)]
    conts = [[p.answer_prefix + span] for p, (_, span) in zip(led, spans, strict=True)]
    seqs_led, bare_led = encode(tokenizer, led), encode(tokenizer, led_bare)
    rival_texts = _rival_texts(model, tokenizer, spans, bare_led, cfg)
    _report(progress, 0, len(items), "score answers")
    memory = [p.answer_prefix + (m or " ") for p, m in zip(with_ctx, said_bare, strict=True)]
    scored, memory_ctx, rival_ctx = _source_scores(model, tokenizer, seqs_led, seqs, conts,
                                                   memory, rival_texts, cfg)
    scored_bare, memory_bare, rival_bare = _source_scores(model, tokenizer, bare_led, bare,
                                                          conts, memory, rival_texts, cfg)
    rivals: list[tuple[str, float, float] | None] = [
        (t, c, b) if t else None for t, c, b in zip(rival_texts, rival_ctx, rival_bare,
                                                    strict=True)]
    for i, (lead, _) in enumerate(spans):
        if not lead and said_bare[i].strip():                 # no lead: the no-context answer
            rivals[i] = (said_bare[i], memory_ctx[i][0], memory_bare[i][0])
    _report(progress, len(items), len(items), "score answers")
    shared = (time.perf_counter() - clock) / len(items)
    records = []
    for i, it in enumerate(items):
        lp_ctx, lp_bare = scored[i][0], scored_bare[i][0]
        if not math.isfinite(lp_ctx) or not math.isfinite(lp_bare):
            raise DataError(_where(it), f"the model cannot produce the answer {targets[i]!r} "
                            "(probability 0)", hint="give another answer")
        rec = _source_record(it, cfg, targets[i], spans[i], said[i], said_bare[i],
                             (scored[i], memory_ctx[i]), (scored_bare[i], memory_bare[i]),
                             rivals[i])
        rec["span_rule"] = ruled[i][2]
        rec["seconds"] = {"source": shared}
        if cfg.sentences:
            rec.update(_sentences(model, tokenizer, it, seqs_led[i], conts[i][0], lp_ctx, cfg,
                                  rec["seconds"], spans[i][0], progress, estimator))
            if cfg.tokens and said[i]:
                clock_t = time.perf_counter()
                rec["tokens"] = token_attribution(model, tokenizer, it,
                                                  split_sentences(it.context),
                                                  with_ctx[i].answer_prefix + said[i], cfg)
                rec["seconds"]["tokens"] = time.perf_counter() - clock_t
        records.append(rec)
        if progress is not None:
            progress(i + 1, len(items), "explain")
    return records


def _rival_texts(model, tokenizer, spans, bare_led, cfg: ExplainConfig) -> list[str]:
    """Per item with a lead, what the model says after that lead without the context (its
    first sentence: the rival the verdict weighs the explained span against); "" elsewhere
    and where it says nothing."""
    out = [""] * len(spans)
    led = [i for i, (lead, _) in enumerate(spans) if lead]
    said = generate(model, tokenizer, [bare_led[i] for i in led], batch_size=cfg.batch_size,
                    max_new_tokens=cfg.max_new_tokens) if led else []
    for i, text in zip(led, said, strict=True):
        out[i] = first_clause(text)
    return out


def _source_scores(model, tokenizer, led: list[list[int]], plain: list[list[int]],
                   conts: list[list[str]], memory: list[str], rivals: list[str],
                   cfg: ExplainConfig) -> tuple[list[Score], list[Score], list[float | None]]:
    """(the explained span after `led`, the memory answer after `plain`, the rival (" " +
    text) after `led`, where there is one) for every item, on one side (with the context or
    without it): every request of the side in one scoring call over the token trie of the
    prompts (`lens.scorer`'s "trie" strategy), so that the prompt an item's requests share
    (its whole context: `led` is `plain` with the lead appended) runs once; chunked as the
    ablations are (`cfg.score_chunk` prompts, `cfg.score_tokens` tokens)."""
    prompts, asked = [], []
    for i, (p, q) in enumerate(zip(led, plain, strict=True)):
        prompts += [p, q]
        asked += [[conts[i][0], *([" " + rivals[i]] if rivals[i] else [])], [memory[i]]]
    got: list[list[Score]] = []
    for chunk in prompt_chunks([len(p) for p in prompts], 2 * cfg.score_chunk, cfg.score_tokens):
        got += score_continuations(model, tokenizer, [prompts[k] for k in chunk],
                                   [asked[k] for k in chunk], strategy="trie")
    spans, mem, rival = [], [], []
    for i in range(len(led)):
        spans.append(got[2 * i][0])
        rival.append(got[2 * i][1][0] if rivals[i] else None)
        mem.append(got[2 * i + 1][0])
    return spans, mem, rival


def _target(item: ConflictItem, generated: str, cfg: ExplainConfig) -> str:
    if cfg.target == "counterfactual":
        return item.counterfactual_answer
    if cfg.target == "parametric":
        return item.parametric_answer
    return generated


def _source_record(item: ConflictItem, cfg: ExplainConfig, answer: str,
                   span: tuple[str, str], said: str, said_bare: str, scored, scored_bare,
                   rival: tuple[str, float, float] | None) -> dict:
    """The source level of one record; `scored`/`scored_bare`: ((answer's log-prob, tokens),
    (memory answer's log-prob, tokens)) with and without the context; `rival`: the
    no-context answer the span is weighed against (`_rivals`)."""
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
    return {"id": item.id, "suite": item.suite, "context": item.context,
            "question": item.question, "target": cfg.target, "answer": answer,
            "answer_lead": span[0], "explained": span[1],
            "answer_generated": said, "answer_no_context": said_bare,
            "explained_tokens": scored[0][1], "logprob_context": lp_ctx,
            "logprob_no_context": lp_bare, "context_contribution": lp_ctx - lp_bare, **mem,
            "verdict": name, "verdict_numbers": numbers,
            "counterfactual_answer": item.counterfactual_answer,
            "parametric_answer": item.parametric_answer,
            "produced": produced, "expected_verdict": expected,
            "produced_no_context": names(item, said_bare) if labelled else None,
            "verdict_agrees": None if expected is None else expected == name,
            "needle": item.meta.get("needle")}


def _sentences(model, tokenizer, item: ConflictItem, prompt_ids: list[int], continuation: str,
               lp_ctx: float, cfg: ExplainConfig, seconds: dict, lead: str,
               progress: Progress | None = None, estimator: Estimator | None = None
               ) -> dict:
    """The sentence and mechanism levels of one record; `prompt_ids` end with `lead`, the
    answer's text before the explained `continuation`."""
    sentences = split_sentences(item.context)
    spans = sentence_tokens(item, sentences, tokenizer, cfg.prompt_format)
    if any(not s for s in spans):
        raise KnowflowError(f"{_where(item)}: a sentence has no tokens of its own in the prompt")
    clock = time.perf_counter()
    documents = None
    if len(sentences) == 1:            # nothing to weigh it against: removed, exactly
        attr = only_sentence(model, tokenizer, item, sentences, continuation, lp_ctx, cfg, lead)
        seconds["ablation"] = time.perf_counter() - clock
    elif estimator is not None:
        attr = learned_attribute(model, tokenizer, item, sentences, prompt_ids, continuation,
                                 lp_ctx, spans, estimator.tensor(), cfg, lead,
                                 estimator.features,
                                 "gradient" if cfg.attribution == "gradient" else "learned")
        seconds["learned"] = time.perf_counter() - clock
    elif hierarchical(cfg, len(sentences)):
        attr, documents = hierarchical_attribute(model, tokenizer, item, sentences,
                                                 continuation, lp_ctx, cfg, lead, progress)
        seconds["ablation"] = time.perf_counter() - clock
    else:
        attr = attribute(model, tokenizer, item, sentences, continuation, lp_ctx, cfg, lead,
                         progress)
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
        mass = attention_to_sentences(model, prompt_ids, spans)    # (layers, heads, sentences)
        context_keys = sorted({p for s in spans for p in s})
        out["mechanism"] = mechanism(model, prompt_ids, answer_ids, context_keys,
                                     spans[attr.top], mass[:, :, attr.top], cfg.window,
                                     cfg.n_heads, cfg.batch_size)
        seconds["mechanism"] = time.perf_counter() - clock
    return out
