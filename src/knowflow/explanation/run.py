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
from knowflow.errors import ConfigError, DataError
from knowflow.evaluation.generate import generate
from knowflow.evaluation.items import load_suites
from knowflow.explanation.estimator import Estimator, attribution_note, resolve_estimator
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import encode, rendered, with_lead
from knowflow.explanation.record import EMPTY, source_record, unexplained_record
from knowflow.explanation.sentences import Unexplainable, generate_from, sentence_levels
from knowflow.explanation.source import first_clause
from knowflow.explanation.splitter import split_sentences
from knowflow.explanation.summary import summarize
from knowflow.explanation.target import explained_span
from knowflow.explanation.tokens import token_attribution
from knowflow.lens._trie import CHUNK
from knowflow.lens.hub import ModelSource
from knowflow.lens.load import resolve_model
from knowflow.lens.memory import GIB, check_budget, eval_bytes, inference_bytes, shape_of
from knowflow.lens.scorer import Score
from knowflow.lens.shared import SharedPrompt, nodes_for_budget, score_shared, share_prompt
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
        cfg = _fit_memory(model, tokenizer, items, cfg)
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


def _fit_memory(model, tokenizer, items: list[ConflictItem], cfg: ExplainConfig
                ) -> ExplainConfig:
    """--max-memory, before any work: the trie passes are sized to the budget (`score_tokens`
    lowered to the new tokens a pass may hold beside the longest prompt's keys and values,
    `lens.shared.nodes_for_budget`: this changes no score), and the run is refused where
    the larger of a generation batch (`batch_size` prompts of the longest item's length, or
    as many as there are items) and
    the smallest such pass (one 2048-node chunk) does not fit."""
    longest = max(len(ids) for ids in encode(tokenizer, [rendered(it, tokenizer,
                                                                  cfg.prompt_format)
                                                         for it in items]))
    shape = shape_of(model)
    room = int(cfg.max_memory * GIB) - shape.weights
    nodes = nodes_for_budget(shape, longest, room, cfg.score_tokens) if room > 0 else \
        min(CHUNK, cfg.score_tokens)
    trie = inference_bytes(shape, 1, min(CHUNK, nodes), cached=longest + nodes,
                           logit_positions=min(256, nodes))
    check_budget(shape, lambda rows: max(eval_bytes(shape, longest, cfg.max_new_tokens)(rows),
                                         trie), min(cfg.batch_size, len(items)), cfg.max_memory,
                 knob="--set batch_size=",
                 what=f"prompts of up to {longest} tokens; trie passes of {nodes} tokens "
                      "beside them")
    return dataclasses.replace(cfg, score_tokens=nodes)


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
    """The answer is something the model can produce, and the prompt with it fits the model
    (a given `--answer`: refused otherwise)."""
    reason = _unexplainable(model, tokenizer, answer)
    if reason == EMPTY:
        raise DataError(_where(item), "the answer to explain is empty",
                        hint="give a non-empty --answer, or leave it out")
    if reason is not None:
        raise DataError(_where(item), reason, hint="give an answer in the model's vocabulary")
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    check_window(model, _where(item), prompt_len + len(ids))


def _unexplainable(model, tokenizer, answer: str) -> str | None:
    """Why `answer` cannot be explained (None: it can): empty, or tokens the model cannot
    produce."""
    if not answer.strip():
        return EMPTY
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    vocab = model.get_output_embeddings().weight.shape[0]
    unk = tokenizer.unk_token_id
    if not ids or any(i >= vocab or (unk is not None and i == unk) for i in ids):
        return (f"the model cannot produce the answer {answer!r} (its tokenizer has no "
                "tokens for it)")
    return None


def check_window(model, where: str, n_tokens: int) -> None:
    window = getattr(model.config, "max_position_embeddings", None)
    if window is not None and n_tokens > window:
        raise DataError(where, f"the prompt with its answer is {n_tokens} tokens, longer than "
                        f"the model's window ({window})", hint="give a shorter context")


def explain_items(model, tokenizer, items: list[ConflictItem], cfg: ExplainConfig,
                  answer: str | None = None, progress: Progress | None = None,
                  estimator: Estimator | None = None) -> list[dict]:
    """One record per item (see the module docstring). With the sentence level the items go
    one at a time, each from its prompt run once (`sentences.py`); without it, together."""
    fmt = cfg.prompt_format
    with_ctx = [rendered(it, tokenizer, fmt) for it in items]
    for it, p in zip(items, encode(tokenizer, with_ctx), strict=True):
        check_window(model, _where(it), len(p) + (cfg.max_new_tokens if answer is None else 1))
    groups = [[i] for i in range(len(items))] if cfg.sentences else [list(range(len(items)))]
    records: list[dict] = []
    for group in groups:
        records += _group_records(model, tokenizer, [items[i] for i in group], cfg, answer,
                                  progress, estimator, (len(records), len(items)))
    return records


def _group_records(model, tokenizer, items: list[ConflictItem], cfg: ExplainConfig,
                   answer: str | None, progress: Progress | None, estimator: Estimator | None,
                   at: tuple[int, int]) -> list[dict]:
    """The records of `items` (one item where sentences are attributed: its prompt is run once
    and shared, `lens.shared`); `at`: (items done before, all items), for the progress."""
    fmt, (done, total) = cfg.prompt_format, at
    with_ctx = [rendered(it, tokenizer, fmt) for it in items]
    without = [rendered(it, tokenizer, fmt, "") for it in items]
    seqs, bare = encode(tokenizer, with_ctx), encode(tokenizer, without)
    clock = time.perf_counter()
    shared = share_prompt(model, tokenizer, seqs[0][:-1]) if cfg.sentences else None
    gen = dict(batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens,
               progress=progress if len(items) == total else None)
    _report(progress, done, total, "generate with context")     # the bar shows from now
    said = [generate_from(model, tokenizer, seqs[0], shared, cfg.max_new_tokens)] \
        if shared is not None else generate(model, tokenizer, seqs,
                                            stage="generate with context", **gen)
    _report(progress, done + len(items), total, "generate with context")
    _report(progress, done, total, "generate without context")
    said_bare = generate(model, tokenizer, bare, stage="generate without context", **gen)
    _report(progress, done + len(items), total, "generate without context")
    targets = [answer if answer is not None else _target(it, out, cfg)
               for it, out in zip(items, said, strict=True)]
    if answer is not None:
        for it, s in zip(items, seqs, strict=True):
            _check_answer(model, tokenizer, it, answer, len(s))
    why = [_unexplainable(model, tokenizer, a) for a in targets]
    # the answer span weighed: the named labelled answer, else the span after the lead-in
    # (target.py); a given --answer or a labelled target is weighed whole
    ruled = [explained_span(it, a) if answer is None and cfg.target == "generated"
             else ("", a, "given") for it, a in zip(items, targets, strict=True)]
    ok = [i for i in range(len(items)) if why[i] is None]
    spans = [(ruled[i][0], ruled[i][1]) for i in ok]
    led = [with_lead(with_ctx[i], lead) for i, (lead, _) in zip(ok, spans, strict=True)]
    led_bare = [with_lead(without[i], lead) for i, (lead, _) in zip(ok, spans, strict=True)]
    conts = [[p.answer_prefix + span] for p, (_, span) in zip(led, spans, strict=True)]
    seqs_led, bare_led = encode(tokenizer, led), encode(tokenizer, led_bare)
    rival_texts = _rival_texts(model, tokenizer, spans, bare_led, cfg)
    memory = [with_ctx[i].answer_prefix + (said_bare[i] or " ") for i in ok]
    scored, memory_ctx, rival_ctx = _source_scores(
        model, tokenizer, seqs_led, [seqs[i] for i in ok], conts, memory, rival_texts, cfg,
        shared)
    scored_bare, memory_bare, rival_bare = _source_scores(
        model, tokenizer, bare_led, [bare[i] for i in ok], conts, memory, rival_texts, cfg)
    _report(progress, done + len(items), total, "score answers")
    shared_seconds = (time.perf_counter() - clock) / len(items)
    records = [unexplained_record(it, cfg, targets[i], said[i], said_bare[i], why[i])
               for i, it in enumerate(items)]
    for k, i in enumerate(ok):
        it = items[i]
        rival = (rival_texts[k], rival_ctx[k], rival_bare[k]) if rival_texts[k] else None
        if not spans[k][0] and said_bare[i].strip():       # no lead: the no-context answer
            rival = (said_bare[i], memory_ctx[k][0], memory_bare[k][0])
        if not math.isfinite(scored[k][0]) or not math.isfinite(scored_bare[k][0]):
            records[i]["unexplained"] = (f"the model cannot produce the answer "
                                         f"{targets[i]!r} (probability 0)")
            continue
        rec = source_record(it, cfg, targets[i], spans[k], said[i], said_bare[i],
                            (scored[k], memory_ctx[k]), (scored_bare[k], memory_bare[k]),
                            rival)
        rec["span_rule"] = ruled[i][2]
        rec["seconds"] = {"source": shared_seconds}
        try:
            rec.update(_sentence_part(model, tokenizer, it, seqs_led[k], conts[k][0],
                                      rec, cfg, spans[k][0], progress, estimator, shared,
                                      with_ctx[i].answer_prefix + said[i]))
        except Unexplainable as why_not:
            records[i]["unexplained"] = str(why_not)
            continue
        records[i] = rec
    _report(progress, done + len(items), total, "explain")
    return records


def _sentence_part(model, tokenizer, item: ConflictItem, prompt_ids: list[int],
                   continuation: str, rec: dict, cfg: ExplainConfig, lead: str,
                   progress: Progress | None, estimator: Estimator | None,
                   shared: SharedPrompt | None, generation: str) -> dict:
    """The record's sentence, mechanism and token levels, where asked for."""
    if not cfg.sentences:
        return {}
    out = sentence_levels(model, tokenizer, item, prompt_ids, continuation,
                          rec["logprob_context"], cfg, rec["seconds"], lead, progress,
                          estimator, shared)
    if cfg.tokens and rec["answer_generated"]:
        clock = time.perf_counter()
        out["tokens"] = token_attribution(model, tokenizer, item, split_sentences(item.context),
                                          generation, cfg)
        rec["seconds"]["tokens"] = time.perf_counter() - clock
    return out


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
                   cfg: ExplainConfig, shared: SharedPrompt | None = None
                   ) -> tuple[list[Score], list[Score], list[float | None]]:
    """(the explained span after `led`, the memory answer after `plain`, the rival (" " +
    text) after `led`, where there is one) for every item, on one side (with the context or
    without it): every request of the side in one scoring call over the token trie of the
    prompts (`lens.shared.score_shared`), so that the prompt an item's requests share (its
    whole context: `led` is `plain` with the lead appended) runs once, or not at all where
    `shared` holds it; in passes of at most `cfg.score_tokens` new tokens."""
    prompts, asked = [], []
    for i, (p, q) in enumerate(zip(led, plain, strict=True)):
        prompts += [p, q]
        asked += [[conts[i][0], *([" " + rivals[i]] if rivals[i] else [])], [memory[i]]]
    got = score_shared(model, tokenizer, prompts, asked, shared, cfg.score_tokens) \
        if prompts else []
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
