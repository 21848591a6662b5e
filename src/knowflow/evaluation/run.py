"""`knowflow.evaluate`: knowledge-conflict evaluation of a causal LM (the `knowflow eval` command).

For each suite (built-in, or an external file) every item is rendered in one prompt format and
scored by greedy generation (is each answer mentioned?) and/or by log-likelihood (which answer
is the likelier continuation?). A no-context pass marks the items whose memorized answer the
model gives on its own ("known" facts): by default only under generation scoring, where
greedy generation without the context must mention the memorized answer; under log-likelihood
scoring alone only when asked (`known_filter=True`), and then it scores the two answers after
the question alone (one prefill per item, no decoding) unless `known_by="generate"`. Metrics
are reported on all items and on the known ones; each summary block's `known_by` says which
flags the known block rests on ("generate", "loglik", or "off": no known block). The
`EvalResult` holds per-item records and a summary {suite: {mode: metrics}}; with an output
folder they are written as a run folder (`store.run_folder.start_run`): `config.json` first,
then `items.jsonl` and `summary.json`. `knowflow.evaluate` and `knowflow eval` finish the
folder with figures and report.html (`report.finish.finish_run`), as every run is finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowflow.config import resolve_config
from knowflow.data.facts import ConflictItem
from knowflow.data.prompts import resolve_format
from knowflow.errors import DataError
from knowflow.evaluation.conditions import Sweep, Swept
from knowflow.evaluation.heads_calibration import calibrate as calibrate_heads
from knowflow.evaluation.items import (
    check_generation_scorable,
    evaluate_items,
    flat,
    load_data,
    render_prompts,
)
from knowflow.evaluation.lm_eval_task import read_lm_eval_samples
from knowflow.evaluation.metrics import summarize
from knowflow.evaluation.options import MODES, EvalConfig, known_by, known_filter
from knowflow.evaluation.strength import by_strength
from knowflow.lens.batching import dist_rank, gather, launched_state, shard
from knowflow.lens.hub import ModelSource
from knowflow.lens.load import resolve_model
from knowflow.lens.memory import check_budget, eval_bytes, fit_rows, shape_of
from knowflow.lens.prompt_batches import fit_batch_size
from knowflow.lens.scorer import LONG_PROMPT
from knowflow.store.identity import ITEMS
from knowflow.store.readers import read_jsonl
from knowflow.store.result import Finisher, Result
from knowflow.store.run_folder import Progress, RunFolder, read_result, start_run

log = logging.getLogger(__name__)


@dataclass(repr=False)
class EvalResult(Result):
    """An eval's Result: `records` are the flat per-item records items.jsonl holds, `summary`
    {suite: {"generate"|"loglik": metrics}}; `by_suite` keeps the nested records per suite,
    `swept` a sweep's summary and records (conditions.json/l)."""

    command: str = "eval"
    by_suite: dict[str, list[dict]] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # load, score, known facts
    swept: Swept | None = None

    @property
    def conditions(self) -> dict | None:
        """{method: {suite: {mode: per condition}}}: a sweep's summary."""
        return self.swept.summary if self.swept is not None else None

    def _write(self, run: RunFolder) -> None:
        _write_items(run, self.records, self.summary, self.swept)

    @classmethod
    def _read_rest(cls, run_dir: Path) -> dict:
        records = read_result(run_dir, ITEMS) if (run_dir / ITEMS).exists() else []
        by_suite: dict[str, list[dict]] = {}
        for r in records:
            by_suite.setdefault(r.get("suite", ""), []).append(r)
        swept = Swept(read_result(run_dir, "conditions.json"),
                      read_jsonl(run_dir / "conditions.jsonl")) \
            if (run_dir / "conditions.json").exists() else None
        return {"by_suite": by_suite, "swept": swept}


def _result(summary: dict, by_suite: dict[str, list[dict]], config: dict,
            out_dir: Path | None, seconds: float, timings: dict | None = None,
            swept: Swept | None = None) -> EvalResult:
    return EvalResult([flat(r) for rs in by_suite.values() for r in rs], summary, config,
                      out_dir=out_dir, seconds=seconds, by_suite=by_suite,
                      stage_seconds=timings or {}, swept=swept)


def evaluate(model="smollm2-135m-instruct", data=None, *, tokenizer=None,
             config: EvalConfig | None = None, device: str = "auto", dtype: str = "auto",
             out_dir: str | Path | None = None, runs_dir: str | Path | None = None,
             progress: Progress | None = None, fields: dict[str, str] | None = None,
             preset: str | None = None, source: ModelSource | None = None,
             finish: Finisher | None = None, **overrides) -> EvalResult:
    """Evaluate `model` (a name/path for `load_model`, or a loaded model with `tokenizer`) on
    knowledge-conflict suites and/or data files or hub datasets (`fields`: their column
    mapping; `preset`: their published layout, else recognised from the columns; the config
    records the preset each suite was read with; `source`: the hub revision,
    trust_remote_code and offline use a named model loads with). `overrides` set `EvalConfig`
    fields.

    Writes `config.json` (before scoring), `items.jsonl` and `summary.json` to `out_dir`, or
    to a fresh `runs_dir/eval/<timestamp>/`, then `finish(result, run)` (the figures and page);
    with neither, nothing is written. The folder is staged (`RunFolder`): it appears
    only once complete, and any failure leaves `out_dir` as it was.
    """
    cfg = resolve_config(EvalConfig, config, overrides)
    start = time.time()
    quality: dict[str, dict] = {}
    by_suite = load_data(data, cfg.limit, cfg.seed, quality, fields, preset)  # before loading
    check_generation_scorable(by_suite, cfg, data)
    model_name = model if isinstance(model, str) else type(model).__name__
    timings: dict[str, float] = {}
    launched = launched_state()  # torchrun / accelerate launch: this process's share
    rank, world = dist_rank()
    loaded = time.perf_counter()
    if launched is not None and device == "auto":
        device = str(launched.device)
    named = isinstance(model, (str, Path))
    model, tokenizer, _ = resolve_model(model, tokenizer, device=device, dtype=dtype,
                                        source=source)
    if named:
        timings["load"] = time.perf_counter() - loaded
    # auto: chat with a template, else plain; the config records the format used
    cfg = dataclasses.replace(cfg, prompt_format=resolve_format(cfg.prompt_format, tokenizer))
    _check_window(model, tokenizer, by_suite, cfg)  # before any run folder exists
    if cfg.batch_size == 0:
        cfg = dataclasses.replace(cfg, batch_size=_fit_batch(model, tokenizer, by_suite, cfg))
    elif cfg.max_memory is not None:
        _check_memory(model, tokenizer, by_suite, cfg)
    # a bare `heads` method: heads, k and gamma from a calibration split; all score held-out
    cfg, by_suite, heads_calibration = calibrate_heads(model, tokenizer, cfg, by_suite,
                                                       progress=progress)
    sweep = Sweep.of(cfg)  # several methods/conditions: the first method's pass is the main one
    param = next(model.parameters())
    config = {"model": str(model_name),
              **({"revision": source.revision} if source and source.revision else {}),
              "suites": list(by_suite), "device": str(param.device),
              "dtype": str(param.dtype).removeprefix("torch."), **dataclasses.asdict(cfg),
              "fields": dict(fields or {}), "preset": preset,
              "presets": {n: q["preset"] for n, q in quality.items() if "preset" in q},
              **({"heads_calibration": heads_calibration} if heads_calibration else {})}
    run = _start(config, out_dir, runs_dir) if rank == 0 else None  # rank 0 writes
    records: dict[str, list[dict]] = {}
    summary: dict[str, dict] = {}
    known = known_by(cfg) if known_filter(cfg) else "off"  # what the "known" block rests on
    with run if run is not None else contextlib.nullcontext():  # staged: see RunFolder
        for name, items in by_suite.items():
            log.info("evaluating %s on %s (%d items)", model_name, name, len(items))
            mine, real = shard(items, rank, world)
            records[name] = gather(evaluate_items(model, tokenizer, name, mine, sweep.main,
                                                  progress, timings), real, world)
            summary[name] = {mode: {**summarize(records[name], mode, cfg.n_bootstrap, cfg.seed),
                                    **quality.get(name, {}),
                                    **by_strength(records[name], mode, cfg.n_bootstrap,
                                                  cfg.seed), "known_by": known}
                             for mode in MODES[cfg.scoring]}
        swept = sweep.run(model, tokenizer, by_suite, records, progress) if sweep.active \
            else None
        result = _result(summary, records, config, None, 0.0,
                         {k: round(v, 2) for k, v in timings.items()}, swept)
        if run is not None:
            _write_items(run, result.records, summary, swept)
            if finish is not None:
                finish(result, run)
    result.out_dir = run.path if run is not None else None
    result.seconds = time.time() - start
    return result


def _check_window(model, tokenizer, by_suite: dict[str, list[ConflictItem]], cfg: EvalConfig
                  ) -> None:
    """A prompt longer than the model's window is bad input, named by its item (the model
    would fail later, or be refused as 'too little memory')."""
    window = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not isinstance(window, int):
        return
    room = window - (cfg.max_new_tokens if cfg.scoring != "loglik" else 8)
    # prompts are rendered per method; the opinion prompt is the longest (one method renders)
    opinion = any(m.opinion for m in Sweep.of(cfg).methods)
    cfg = dataclasses.replace(cfg, method="opinion" if opinion else "greedy")
    for name, items in by_suite.items():
        seqs = render_prompts(items, tokenizer, cfg, cfg.use_context)[1]
        for item, seq in zip(items, seqs, strict=True):
            if len(seq) > room:
                raise DataError(name, f"item {item.id}: the prompt is {len(seq)} tokens, more "
                                f"than the model's window of {window} leaves room for",
                                hint="shorten the context, or use a model with a longer window")


def _eval_bytes(tokenizer, by_suite: dict[str, list[ConflictItem]], cfg: EvalConfig,
                shape) -> tuple[Callable[[int], int], int, int]:
    """(activation bytes of a batch of n rows, longest prompt, new tokens): what one batch's
    memory grows with (`lens.memory.eval_bytes`)."""
    lengths = [len(p) for items in by_suite.values()
               for p in render_prompts(items, tokenizer, cfg, cfg.use_context)[1]]
    longest = max(lengths)
    new = cfg.max_new_tokens if cfg.scoring != "loglik" else 8  # answers: a few
    short = max((n for n in lengths if n <= LONG_PROMPT), default=0)
    prefills = cfg.scoring != "loglik" or cfg.method != "greedy"  # whole prompts batched
    return eval_bytes(shape, longest, new, prefills, short), longest, new


def _fit_batch(model, tokenizer, by_suite: dict[str, list[ConflictItem]], cfg: EvalConfig
               ) -> int:
    """--batch-size 0: the batch that the longest prompt lets fit in free GPU memory, or in
    --max-memory when given (on any device; at most 1024)."""
    shape = shape_of(model) if cfg.max_memory is not None else None
    needed, longest, new = _eval_bytes(tokenizer, by_suite, cfg, shape)
    if cfg.max_memory is None:
        return fit_batch_size(model, longest, new)
    return fit_rows(shape, needed, 1024, cfg.max_memory, f"prompts of up to {longest} tokens")


def _check_memory(model, tokenizer, by_suite: dict[str, list[ConflictItem]], cfg: EvalConfig
                  ) -> None:
    """--max-memory: refuse (before any run folder exists) a batch that would not fit."""
    shape = shape_of(model)
    needed, longest, new = _eval_bytes(tokenizer, by_suite, cfg, shape)
    check_budget(shape, needed, cfg.batch_size, cfg.max_memory,
                 what=f"prompts of up to {longest} tokens + {new} answer tokens")


def _start(config: dict, out_dir: str | Path | None, runs_dir: str | Path | None
           ) -> RunFolder | None:
    if out_dir is None and runs_dir is None:
        return None
    return start_run(config, "eval", runs_dir=runs_dir, out_dir=out_dir)


def _write_items(run: RunFolder, records: list[dict], summary: dict,
                 swept: Swept | None = None) -> None:
    """items.jsonl (flat records) and summary.json, after a sweep's conditions.json/l."""
    if swept is not None:
        Sweep.write(run.path, swept)
    run.write_records(ITEMS, records)
    run.write_summary(summary)


def from_lm_eval(samples: Sequence[str | Path], out_dir: str | Path | None = None,
                 runs_dir: str | Path | None = None, n_bootstrap: int = 1000,
                 seed: int = 0, finish: Finisher | None = None
                 ) -> EvalResult:
    """knowflow's log-likelihood metrics from lm-eval `--log_samples` files of tasks written
    by `knowflow export lm-eval` (one file per suite)."""
    start = time.time()
    records: dict[str, list[dict]] = {}
    for path in samples:
        suite, recs = read_lm_eval_samples(path)
        records.setdefault(suite, []).extend(recs)
    summary = {suite: {"loglik": summarize(recs, "loglik", n_bootstrap, seed)}
               for suite, recs in records.items()}
    config = {"from_lm_eval": [str(p) for p in samples], "suites": list(records),
              "scoring": "loglik", "n_bootstrap": n_bootstrap, "seed": seed}
    result = _result(summary, records, config, None, 0.0)
    run = _start(config, out_dir, runs_dir)
    if run is not None:
        with run:  # staged: see RunFolder
            _write_items(run, result.records, summary)
            if finish is not None:
                finish(result, run)
        result.out_dir = run.path
    result.seconds = time.time() - start
    return result
