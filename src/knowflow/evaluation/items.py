"""The items of an evaluation: loading suites and files, rendering prompts, and scoring each
item by generation and/or log-likelihood, with the no-context pass that marks known facts.

`evaluate_items` is the one scorer of a suite's items: `knowflow.evaluate` calls it per suite,
the context-condition sweep per (method, condition), the finetuning tracker per evaluation step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from knowflow.config import flatten
from knowflow.data.facts import ConflictItem
from knowflow.data.hub import is_hub
from knowflow.data.loaders import load_suites
from knowflow.data.prompts import PromptConfig, render
from knowflow.errors import DataError
from knowflow.evaluation.decoding import generate_with, score_with, single_method
from knowflow.evaluation.garbled import garbled
from knowflow.evaluation.generate import generate
from knowflow.evaluation.metrics import memorization_ratio
from knowflow.evaluation.normalize import alternatives, primary, score_output
from knowflow.evaluation.options import MODES, EvalConfig, known_by, known_filter
from knowflow.evaluation.outcomes import classify
from knowflow.lens.prompt_batches import encode_prompts
from knowflow.lens.scorer import score_continuations
from knowflow.store.run_folder import Progress


def load_data(data=None, limit: int | None = None, seed: int = 0,
              quality: dict[str, dict] | None = None,
              fields: dict[str, str] | None = None, preset: str | None = None
              ) -> dict[str, list[ConflictItem]]:
    """Items by suite for `evaluate`'s `data`: built-in suite names (a list, or one
    comma-separated string), data files (a path, a string naming an existing file, or a hub
    dataset `hf:ORG/NAME[:CONFIG][@SPLIT]`), and/or
    `ConflictItem`s (grouped by their `suite`); None: every built-in suite."""
    if data is None or isinstance(data, (str, Path)):
        data = [data] if data is not None else []
    names: list[str] = []
    files: list[str | Path] = []
    items: list[ConflictItem] = []
    for entry in data:
        if isinstance(entry, ConflictItem):
            items.append(entry)
        elif isinstance(entry, Path) or is_hub(entry) or Path(str(entry)).exists():
            files.append(entry)
        else:
            names += [s.strip() for s in str(entry).split(",")]
    if data and not items and not files and not any(names):
        return load_suites(",".join(names), None, limit, seed, quality, fields)  # the error
    out = load_suites([n for n in names if n], files, limit, seed, quality, fields, preset) \
        if names or files or not items else {}
    for it in items:
        out.setdefault(it.suite, []).append(it)
    return out


def one_answer(cf: Sequence[str], par: Sequence[str]) -> bool:
    """Whether generation scoring cannot tell an item's two answers apart: they share a
    normalised spelling (case, accents, punctuation), or one has no word an output could name
    ("The", "???": data/answer_text). Such items are left out of generation's metrics."""
    return bool(set(cf) & set(par)) or not cf or not par


def check_generation_scorable(by_suite: dict[str, list[ConflictItem]], cfg: EvalConfig,
                              data=None) -> None:
    """Under generation scoring alone, refuse a suite of which generation can score no item
    (every item's two answers one answer to it): the run would score nothing. `data`: what
    `load_data` read, to name the file."""
    if cfg.scoring != "generate":
        return
    for name, items in by_suite.items():
        if items and all(one_answer(alternatives(it.counterfactual_answer,
                                                 it.counterfactual_aliases),
                                    alternatives(it.parametric_answer, it.parametric_aliases))
                         for it in items):
            entries = data if isinstance(data, (list, tuple)) else [data]
            where = next((str(e) for e in entries if isinstance(e, (str, Path)) and
                          Path(str(e)).stem == name), f"suite {name}")
            raise DataError(where, f"generation can score none of its {len(items)} items: "
                            "each item's answer and memory answer are one answer once case, "
                            "accents and punctuation are set aside (or one has no word an "
                            "output could name)", hint="score them with --scoring loglik (or "
                            "both), which compares the two spellings as given")


def render_prompts(items, tokenizer, cfg: EvalConfig, use_context: bool):
    opinion = single_method(cfg.method, cfg.alpha, cfg.beta, cfg.guard).opinion
    pcfg = PromptConfig(cfg.prompt_format, use_context, cfg.context_only, opinion)
    prompts = [render(it, tokenizer, pcfg) for it in items]
    seqs = encode_prompts(tokenizer, [p.text for p in prompts],
                          [p.add_special_tokens for p in prompts])
    return prompts, seqs


def evaluate_items(model, tokenizer, name: str, items: list[ConflictItem], cfg: EvalConfig,
                    progress: Progress | None, timings: dict[str, float] | None = None
                    ) -> list[dict]:
    """Per-item records of one suite; `timings`, if given, accumulates seconds per stage
    ("generate", "loglik", "known facts")."""
    clock = _Clock(timings)
    method = single_method(cfg.method, cfg.alpha, cfg.beta, cfg.guard)
    prompts, seqs = render_prompts(items, tokenizer, cfg, cfg.use_context)
    base = render_prompts(items, tokenizer, cfg, False)[1] if method.contrastive else None
    golds = [(alternatives(it.counterfactual_answer, it.counterfactual_aliases),
              alternatives(it.parametric_answer, it.parametric_aliases),
              alternatives(it.subject) if it.subject else []) for it in items]
    records = [{**it.to_dict(), "prompt": p.text, "context_shown": cfg.use_context}
               for it, p in zip(items, prompts, strict=True)]
    run = dict(batch_size=cfg.batch_size, progress=progress, share_prefix=cfg.share_prefix)
    if "generate" in MODES[cfg.scoring]:
        clock.start()
        outs = generate_with(method, model, tokenizer, seqs, base,
                             max_new_tokens=cfg.max_new_tokens, stage=f"{name}: generate", **run)
        for rec, out, (cf, par, subj), it in zip(records, outs, golds, items, strict=True):
            hit_cf, hit_par = score_output(out, cf, par, subj)
            near = garbled(out, cf, [*par, *subj], hit_cf)
            rec["generate"] = {"output": out, "counterfactual": hit_cf, "parametric": hit_par,
                               "garbled": near,
                               "outcome": classify(out, hit_cf, hit_par, near, it.question,
                                                   it.subject or ""),
                               # one for generation: a shared spelling, or an answer with
                               # no word an output could name ("The", "???": data/answer_text)
                               "equal_answers": one_answer(cf, par)}
        clock.stop("generate")
    if "loglik" in MODES[cfg.scoring]:
        clock.start()
        answers = scored_answers(items, prompts)
        scores = score_with(method, model, tokenizer, seqs, base, answers,
                            stage=f"{name}: loglik", **run)
        for rec, ((lp_cf, n_cf), (lp_par, n_par)), (cont_cf, cont_par) in zip(
                records, scores, answers, strict=True):
            rec["loglik"] = {
                "counterfactual_logprob": lp_cf, "parametric_logprob": lp_par,
                "counterfactual_tokens": n_cf, "parametric_tokens": n_par,
                "choice": choice(lp_cf, lp_par), "choice_norm": choice(lp_cf / n_cf,
                                                                       lp_par / n_par),
                "memorization_ratio": memorization_ratio(lp_par, lp_cf),
                "equal_answers": cont_cf == cont_par}
        clock.stop("loglik")
    if known_filter(cfg):
        clock.start()
        _mark_known(model, tokenizer, name, items, records, golds, cfg, progress)
        clock.stop("known facts")
    return records


class _Clock:
    """Seconds per stage, added into `timings` (nothing when it is None)."""

    def __init__(self, timings: dict[str, float] | None):
        self.timings, self.t0 = timings, 0.0

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def stop(self, stage: str) -> None:
        if self.timings is not None:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - self.t0


def scored_answers(items, prompts) -> list[list[str]]:
    """Each item's two scored continuations: (context's answer, memorized answer)."""
    return [[p.answer_prefix + primary(it.counterfactual_answer),
             p.answer_prefix + primary(it.parametric_answer)]
            for it, p in zip(items, prompts, strict=True)]


def choice(lp_cf: float, lp_par: float) -> str:
    """The likelier answer by log-probability; a tie counts for neither."""
    return "counterfactual" if lp_cf > lp_par else "parametric" if lp_par > lp_cf else "tie"


def _mark_known(model, tokenizer, name, items, records, golds, cfg, progress) -> None:
    """record["known"]: without the context the model prefers the memorized answer (by
    log-likelihood: it is the likelier of the two answers; by generation: the greedy output
    mentions it)."""
    if known_by(cfg) == "loglik":
        if not cfg.use_context and "loglik" in records[0]:  # the scores are already without
            scores = [((r["loglik"]["counterfactual_logprob"], 0),
                       (r["loglik"]["parametric_logprob"], 0)) for r in records]
        else:
            prompts, seqs = render_prompts(items, tokenizer, cfg, use_context=False)
            scores = score_continuations(
                model, tokenizer, seqs, scored_answers(items, prompts), batch_size=cfg.batch_size,
                progress=progress, stage=f"{name}: known facts", share_prefix=cfg.share_prefix)
        for rec, ((lp_cf, _), (lp_par, _)) in zip(records, scores, strict=True):
            rec["no_context_loglik"] = {"counterfactual_logprob": lp_cf,
                                        "parametric_logprob": lp_par}
            rec["known"] = lp_par > lp_cf
        return
    if not cfg.use_context and "generate" in records[0]:
        outs = [r["generate"]["output"] for r in records]
    else:
        _, seqs = render_prompts(items, tokenizer, cfg, use_context=False)
        outs = generate(model, tokenizer, seqs, batch_size=cfg.batch_size,
                        max_new_tokens=cfg.max_new_tokens, progress=progress,
                        stage=f"{name}: known facts", share_prefix=cfg.share_prefix)
    for rec, out, (cf, par, subj) in zip(records, outs, golds, strict=True):
        rec["no_context_output"] = out
        rec["known"] = score_output(out, cf, par, subj)[1]


def flat(record: dict) -> dict:
    """A record with nested dicts spread into `outer_inner` keys (`loglik_choice`,
    `generate_output`, ...), so `pandas.read_json(items.jsonl, lines=True)` has one column
    per number; lists stay as they are."""
    return flatten(record, sep="_")
