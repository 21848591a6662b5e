"""`knowflow.evaluate`: knowledge-conflict evaluation of a causal LM (the `knowflow eval` command).

For each suite (built-in, or an external file) every item is rendered in one prompt format and
scored by greedy generation (is each answer mentioned?) and/or by log-likelihood (which answer
is the likelier continuation?). A no-context pass marks the items whose memorized answer the
model gives on its own ("known" facts): under log-likelihood scoring alone it scores the two
answers after the question alone (one prefill per item, no decoding); otherwise, or with
`known_by="generate"`, greedy generation without the context must mention the memorized answer.
Metrics are reported on all items and on the known ones. Results hold per-item records and a
summary {suite: {mode: metrics}}; with an output folder they are written as a run folder
(`knowflow.runs.start_run`): `config.json` first, then `items.jsonl` and `summary.json`. The
`knowflow eval` command finishes the folder with figures and report.html
(`experiments.runner.finish_run`), as every run is finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from knowflow.errors import ConfigError
from knowflow.evaluate.batching import encode_prompts
from knowflow.evaluate.generate import generate
from knowflow.evaluate.loglik import score_continuations
from knowflow.evaluate.metrics import memorization_ratio, summarize
from knowflow.evaluate.normalize import alternatives, primary, score_output
from knowflow.runs import ITEMS, Progress, RunFolder, start_run
from knowflow.worlds.facts import ConflictItem
from knowflow.worlds.prompts import FORMATS, PromptConfig, PromptFormat, render

log = logging.getLogger(__name__)

Scoring = Literal["generate", "loglik", "both"]
MODES = {"generate": ("generate",), "loglik": ("loglik",), "both": ("generate", "loglik")}


@dataclass(frozen=True)
class EvalConfig:
    scoring: Scoring = "both"
    prompt_format: PromptFormat = "chat"
    use_context: bool = True            # False: --no-context, the question alone
    context_only: bool = False          # add "Answer based on the context only."
    limit: int | None = None            # items per suite (a seeded sample)
    seed: int = 0
    batch_size: int = 16                # 0: by free GPU memory (16 on CPU)
    max_new_tokens: int = 24
    known_filter: bool = True           # also report metrics on facts the model knows
    known_by: str = "auto"              # auto (loglik under --scoring loglik), loglik, generate
    n_bootstrap: int = 1000
    share_prefix: bool = True           # run the prompts' common prefix once
    method: str = "greedy"              # decoding method(s), comma-separated (decoding.py)
    alpha: float | str | tuple[float, ...] = 1.0  # CAD's alpha; several: a sweep
    conditions: str | tuple[str, ...] = "conflicting"  # context conditions (conditions.py)

    def validate(self) -> None:
        if self.scoring not in MODES:
            raise ConfigError(f"{self.scoring!r} is not one of generate, loglik, both",
                              "scoring")
        if self.prompt_format not in FORMATS:
            raise ConfigError(f"{self.prompt_format!r} is not one of {', '.join(FORMATS)}",
                              "prompt_format")
        for name in ("max_new_tokens", "n_bootstrap"):
            if getattr(self, name) < 1:
                raise ConfigError("must be at least 1", name)
        if self.batch_size < 0:
            raise ConfigError("must be at least 1 (or 0: by free GPU memory)", "batch_size")
        if self.known_by not in ("auto", "loglik", "generate"):
            raise ConfigError(f"{self.known_by!r} is not one of auto, loglik, generate",
                              "known_by")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("must be at least 1", "limit")
        if self.seed < 0:
            raise ConfigError(f"must not be negative, got {self.seed}", "seed")
        if self.context_only and not self.use_context:
            raise ConfigError("asks to answer from the context, but no context is shown",
                              "context_only", "give --no-context or --context-only, not both")
        from knowflow.evaluate.conditions import validate_sweep

        validate_sweep(self)


@dataclass
class Results:
    summary: dict                       # {suite: {"generate"|"loglik": metrics}}
    records: dict[str, list[dict]]      # {suite: per-item records}
    config: dict
    out_dir: Path | None = None
    seconds: float = 0.0
    modes: tuple[str, ...] = field(default=("generate", "loglik"))
    stage_seconds: dict[str, float] = field(default_factory=dict)  # load, score, known facts
    conditions: dict | None = None      # {method: {suite: {mode: per condition}}}, a sweep's


def load_suites(suites: str | Sequence[str] | None = None,
                data: str | Path | Sequence[str | Path] | None = None,
                limit: int | None = None, seed: int = 0,
                quality: dict[str, dict] | None = None,
                fields: dict[str, str] | None = None) -> dict[str, list[ConflictItem]]:
    """Items by suite name: built-in suites by name, external files by their stem.

    `quality`, if given, receives each file's data-quality counts by suite name; `fields`
    maps knowflow's field names to the files' columns (`worlds.tables.parse_fields`)."""
    from knowflow.worlds.loaders import load_items_checked
    from knowflow.worlds.suites import get_suite, list_suites, sample

    names = [s.strip() for s in suites.split(",")] if isinstance(suites, str) else \
        list(suites or [])
    files = [data] if isinstance(data, (str, Path)) else list(data or [])
    if isinstance(suites, str) and not any(names):
        raise ConfigError(f"{suites!r} names no suite", "suite",
                          f"give one or more of {', '.join(list_suites())}, comma-separated")
    if not names and not files:
        names = list(list_suites())
    out: dict[str, list[ConflictItem]] = {}
    for name in filter(None, names):
        out[name] = get_suite(name, seed=seed, limit=limit)
    for path in files:
        items, counts = load_items_checked(path, fields)
        name = items[0].suite
        if quality is not None:
            quality[name] = counts
        out[name] = sample([dataclasses.replace(i, suite=name) for i in items], limit, seed,
                           name)
    return out


def _prompts(items, tokenizer, cfg: EvalConfig, use_context: bool):
    from knowflow.evaluate.decoding import single_method

    opinion = single_method(cfg.method, cfg.alpha).opinion
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
    from knowflow.evaluate.decoding import generate_with, score_with, single_method

    clock = _Clock(timings)
    method = single_method(cfg.method, cfg.alpha)
    prompts, seqs = _prompts(items, tokenizer, cfg, cfg.use_context)
    base = _prompts(items, tokenizer, cfg, False)[1] if method.contrastive else None
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
        for rec, out, (cf, par, subj) in zip(records, outs, golds, strict=True):
            hit_cf, hit_par = score_output(out, cf, par, subj)
            rec["generate"] = {"output": out, "counterfactual": hit_cf, "parametric": hit_par}
        clock.stop("generate")
    if "loglik" in MODES[cfg.scoring]:
        clock.start()
        scores = score_with(method, model, tokenizer, seqs, base, _answers(items, prompts),
                            stage=f"{name}: loglik", **run)
        for rec, ((lp_cf, n_cf), (lp_par, n_par)) in zip(records, scores, strict=True):
            rec["loglik"] = {
                "counterfactual_logprob": lp_cf, "parametric_logprob": lp_par,
                "counterfactual_tokens": n_cf, "parametric_tokens": n_par,
                "choice": choice(lp_cf, lp_par), "choice_norm": choice(lp_cf / n_cf,
                                                                       lp_par / n_par),
                "memorization_ratio": memorization_ratio(lp_par, lp_cf)}
        clock.stop("loglik")
    if cfg.known_filter:
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


def _answers(items, prompts) -> list[list[str]]:
    """Each item's two scored continuations: (context's answer, memorized answer)."""
    return [[p.answer_prefix + primary(it.counterfactual_answer),
             p.answer_prefix + primary(it.parametric_answer)]
            for it, p in zip(items, prompts, strict=True)]


def known_by(cfg: EvalConfig) -> str:
    """How the known-facts pass decides: "loglik" (no decoding) under log-likelihood scoring
    alone, else "generate"; `cfg.known_by` overrides."""
    if cfg.known_by != "auto":
        return cfg.known_by
    return "loglik" if cfg.scoring == "loglik" else "generate"


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
            prompts, seqs = _prompts(items, tokenizer, cfg, use_context=False)
            scores = score_continuations(
                model, tokenizer, seqs, _answers(items, prompts), batch_size=cfg.batch_size,
                progress=progress, stage=f"{name}: known facts", share_prefix=cfg.share_prefix)
        for rec, ((lp_cf, _), (lp_par, _)) in zip(records, scores, strict=True):
            rec["no_context_loglik"] = {"counterfactual_logprob": lp_cf,
                                        "parametric_logprob": lp_par}
            rec["known"] = lp_par > lp_cf
        return
    if not cfg.use_context and "generate" in records[0]:
        outs = [r["generate"]["output"] for r in records]
    else:
        _, seqs = _prompts(items, tokenizer, cfg, use_context=False)
        outs = generate(model, tokenizer, seqs, batch_size=cfg.batch_size,
                        max_new_tokens=cfg.max_new_tokens, progress=progress,
                        stage=f"{name}: known facts", share_prefix=cfg.share_prefix)
    for rec, out, (cf, par, subj) in zip(records, outs, golds, strict=True):
        rec["no_context_output"] = out
        rec["known"] = score_output(out, cf, par, subj)[1]


def evaluate(model="smollm2-135m-instruct", suites: str | Sequence[str] | None = None, *,
             data: str | Path | Sequence[str | Path] | None = None, tokenizer=None,
             config: EvalConfig | None = None, device: str = "auto", dtype: str = "auto",
             out_dir: str | Path | None = None, runs_root: str | Path | None = None,
             progress: Progress | None = None, fields: dict[str, str] | None = None,
             **overrides) -> Results:
    """Evaluate `model` (a name/path for `load_model`, or a loaded model with `tokenizer`) on
    knowledge-conflict suites and/or data files (`fields`: their column mapping). `overrides`
    set `EvalConfig` fields.

    Writes `config.json` (before scoring), `items.jsonl` and `summary.json` to `out_dir`, or
    to a fresh `runs_root/eval/<timestamp>/`; with neither, nothing is written. Bad input
    found while scoring, or Ctrl-C, removes what was written.
    """
    from knowflow.config import validate_config

    cfg = dataclasses.replace(config or EvalConfig(), **overrides)
    validate_config(cfg)
    start = time.time()
    quality: dict[str, dict] = {}
    by_suite = load_suites(suites, data, cfg.limit, cfg.seed, quality, fields)  # before loading
    model_name = model if isinstance(model, str) else type(model).__name__
    timings: dict[str, float] = {}
    if isinstance(model, (str, Path)):
        from knowflow.models.hf import load_model

        loaded = time.perf_counter()
        model, tokenizer = load_model(str(model), device=device, dtype=dtype)
        timings["load"] = time.perf_counter() - loaded
    elif tokenizer is None:
        raise ConfigError("a loaded model needs its tokenizer", "tokenizer")
    if cfg.batch_size == 0:
        cfg = dataclasses.replace(cfg, batch_size=_fit_batch(model, tokenizer, by_suite, cfg))
    from knowflow.evaluate.conditions import Sweep

    sweep = Sweep.of(cfg)  # several methods/conditions: the first method's pass is the main one
    param = next(model.parameters())
    config = {"model": str(model_name), "suites": list(by_suite), "device": str(param.device),
              "dtype": str(param.dtype).removeprefix("torch."), **dataclasses.asdict(cfg),
              "fields": dict(fields or {})}
    run = _start(config, out_dir, runs_root)
    records: dict[str, list[dict]] = {}
    summary: dict[str, dict] = {}
    with run.refusals(interrupt=True) if run is not None else contextlib.nullcontext():
        for name, items in by_suite.items():
            log.info("evaluating %s on %s (%d items)", model_name, name, len(items))
            records[name] = evaluate_items(model, tokenizer, name, items, sweep.main, progress,
                                           timings)
            summary[name] = {mode: {**summarize(records[name], mode, cfg.n_bootstrap, cfg.seed),
                                    **quality.get(name, {})} for mode in MODES[cfg.scoring]}
        swept = sweep.run(model, tokenizer, by_suite, records, progress) if sweep.active \
            else None
    if run is not None:
        if swept is not None:
            sweep.write(run.path, swept)
        _write_items(run, records, summary)
    return Results(summary, records, config, run.path if run is not None else None,
                   time.time() - start, MODES[cfg.scoring],
                   {k: round(v, 2) for k, v in timings.items()},
                   swept.summary if swept is not None else None)


def _fit_batch(model, tokenizer, by_suite: dict[str, list[ConflictItem]], cfg: EvalConfig
               ) -> int:
    """--batch-size 0: the batch that the longest prompt lets fit in free GPU memory."""
    from knowflow.evaluate.batching import fit_batch_size

    longest = max(len(p) for items in by_suite.values()
                  for p in _prompts(items, tokenizer, cfg, cfg.use_context)[1])
    new = cfg.max_new_tokens if cfg.scoring != "loglik" else 8  # answers: a few tokens
    return fit_batch_size(model, longest, new)


def write_results(config: dict, records: dict[str, list[dict]], summary: dict,
                  out_dir: str | Path | None, runs_root: str | Path | None) -> Path | None:
    """An eval run folder (`config.json`, `items.jsonl` of flat records, `summary.json`) in
    `out_dir` (or a fresh `runs_root/eval/<timestamp>/`); nothing without either."""
    run = _start(config, out_dir, runs_root)
    if run is None:
        return None
    _write_items(run, records, summary)
    return run.path


def _start(config: dict, out_dir: str | Path | None, runs_root: str | Path | None
           ) -> RunFolder | None:
    if out_dir is None and runs_root is None:
        return None
    return start_run(config, "eval", runs_root=runs_root, out_dir=out_dir)


def _write_items(run: RunFolder, records: dict[str, list[dict]], summary: dict) -> None:
    run.write_records(ITEMS, [flat(r) for rs in records.values() for r in rs])
    run.write_summary(summary)


def flat(record: dict) -> dict:
    """A record with nested dicts spread into `outer_inner` keys (`loglik_choice`,
    `generate_output`, ...), so `pandas.read_json(items.jsonl, lines=True)` has one column
    per number; lists stay as they are."""
    from knowflow.config import flatten

    return flatten(record, sep="_")


def from_lm_eval(samples: Sequence[str | Path], out_dir: str | Path | None = None,
                 runs_root: str | Path | None = None, n_bootstrap: int = 1000,
                 seed: int = 0) -> Results:
    """knowflow's log-likelihood metrics from lm-eval `--log_samples` files of tasks written
    by `knowflow export lm-eval` (one file per suite)."""
    from knowflow.evaluate.lm_eval_task import read_lm_eval_samples

    start = time.time()
    records: dict[str, list[dict]] = {}
    for path in samples:
        suite, recs = read_lm_eval_samples(path)
        records.setdefault(suite, []).extend(recs)
    summary = {suite: {"loglik": summarize(recs, "loglik", n_bootstrap, seed)}
               for suite, recs in records.items()}
    config = {"from_lm_eval": [str(p) for p in samples], "suites": list(records),
              "scoring": "loglik", "n_bootstrap": n_bootstrap, "seed": seed}
    target = write_results(config, records, summary, out_dir, runs_root)
    return Results(summary, records, config, target, time.time() - start, ("loglik",))
