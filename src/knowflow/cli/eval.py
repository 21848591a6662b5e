"""`knowflow eval`: knowledge-conflict evaluation of a model on suites or files, or of
lm-evaluation-harness samples of knowflow's exported tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from knowflow.cli.common import (
    MAX_MEMORY_HELP,
    OfflineOpt,
    Opt,
    RevisionOpt,
    ThreadsOpt,
    TrustRemoteCodeOpt,
    check_suites,
    check_threads,
    config_flags,
    console,
    flag,
    model_source,
    set_threads,
)
from knowflow.cli.eval_tables import print_eval, print_strength, show_conditions
from knowflow.cli.progress import Bars
from knowflow.errors import ConfigError

# Options that set EvalConfig's fields one to one, declared once (in --help's order).
PROMPT_FLAGS = (
    flag("scoring", "scoring", str, "generate, loglik or both.", "both"),
    flag("prompt_format", "prompt_format", str,
         "auto (chat if the tokenizer has a chat template, else plain), chat (the model's "
         "template), alpaca, tulu or plain.", "auto"),
    flag("no_context", "use_context", bool, "Ask the question alone (what the model knows).",
         switch=False),
    flag("context_only", "context_only", bool, 'Add "Answer based on the context only."',
         switch=True),
    flag("limit", "limit", int, "Items per suite (seeded sample)."),
)
BATCH_FLAGS = (
    flag("batch_size", "batch_size", int,
         "Prompts per forward pass (0: as many as free GPU memory allows).", 16),
    flag("max_new_tokens", "max_new_tokens", int, "Longest generated answer.", 24),
    flag("max_memory", "max_memory", float, MAX_MEMORY_HELP + " With --batch-size 0 the "
         "batch is sized to it instead."),
)
DECODING_FLAGS = (
    flag("seed", "seed", int, "Seed for suites, sampling and bootstrap.", 0),
    flag("known_filter", "known_filter", bool,
         "Run the no-context pass that finds known facts (default: under generate and both, "
         "not under --scoring loglik).", switch=True),
    flag("no_known_filter", "known_filter", bool,
         "Skip the no-context pass that finds known facts.", switch=False),
    flag("known_by", "known_by", str,
         "How the no-context pass finds known facts: loglik (the memorized answer is the "
         "likelier; no decoding), generate (greedy output mentions it), or auto (loglik under "
         "--scoring loglik, else generate).", "auto"),
    flag("method", "method", str,
         "Decoding method(s), comma-separated: greedy, cad, adacad, coiecd, cocoa, heads (or "
         "heads:L.H+L.HxGAMMA), opinion, opinion+cad, opinion+adacad (several: one pass each, "
         "and a tradeoff figure).", "greedy"),
    flag("alpha", "alpha", str, "CAD's alpha; several (0,0.5,1,2) sweep it.", "1.0"),
    flag("beta", "beta", str,
         "Plausibility constraint of cad, adacad and cocoa in generation: only tokens with "
         "p(y|c,x) >= beta * max p(.|c,x) are eligible (0: off; ignored by log-likelihood "
         "scoring); "
         "several (0,0.3) sweep it.", "0.3"),
    flag("conditions", "conditions", str,
         "Context conditions, comma-separated: conflicting, agreeing, irrelevant (sensitivity "
         "and robustness need conflicting and irrelevant).", "conflicting"),
)


@config_flags("model", "revision", "trust_remote_code", "offline", "suite", "data", "fields",
              "preset", *PROMPT_FLAGS, "out", *BATCH_FLAGS,
              "device", "dtype", *DECODING_FLAGS, "threads", "from_lm_eval")
def eval_cmd(
    given: dict,
    model: Annotated[str, Opt(
        help="HF id or local folder, a knowflow checkpoint folder, or smollm2-135m-instruct."
    )] = "smollm2-135m-instruct",
    revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    offline: OfflineOpt = False,
    suite: Annotated[str | None, Opt(
        help="Built-in suites, comma-separated: cf-capitals, cf-phrasing, cf-world, cf-bio, "
             "cf-quotes, needle-cf, needle-agree, cf-numeric (default: all of them unless "
             "--data is given).")] = None,
    data: Annotated[list[Path] | None, Opt(
        help="External file: JSON/JSONL (context, question, answer, memory_answer), "
             "MemoTrap CSV, or knowflow JSONL; or a hub dataset hf:ORG/NAME[:CONFIG][@SPLIT] "
             "(repeatable).")] = None,
    fields: Annotated[str | None, Opt(
        help="--data column mapping: context=COL,question=COL,answer=COL,memory_answer=COL "
             "(parquet, save_to_disk folders, CSV, JSON/JSONL).")] = None,
    preset: Annotated[str | None, Opt(
        help="--data layout: nq-swap, conflictqa, memotrap or clasheval (default: recognised "
             "from the columns).")] = None,
    out: Annotated[Path | None, Opt(
        help="Output folder (default: runs/eval/<timestamp>/).")] = None,
    device: Annotated[str, Opt(help="auto, cpu, cuda, mps.")] = "auto",
    dtype: Annotated[str, Opt(help="auto, float32, bfloat16, float16.")] = "auto",
    threads: ThreadsOpt = None,
    from_lm_eval: Annotated[list[Path] | None, Opt(
        help="Report knowflow's metrics from lm_eval --log_samples files of tasks written by "
             "`knowflow export lm-eval` (repeatable; no model runs).")] = None,
) -> None:
    """Knowledge-conflict evaluation: does the model follow the context or its memory?"""
    from knowflow.api import evaluate
    from knowflow.config import resolve_config
    from knowflow.data.presets import get_preset
    from knowflow.data.prompts import format_note
    from knowflow.data.tables import parse_fields
    from knowflow.evaluation.options import EvalConfig
    from knowflow.lens.load import check_device, check_model

    check_threads(threads)
    if from_lm_eval:
        _eval_from_lm_eval(from_lm_eval, out, given["seed"], clash=suite or data)
        return
    mapping = parse_fields(fields)
    if preset:
        get_preset(preset)
    cfg = resolve_config(EvalConfig, EvalConfig(**given))
    check_suites(suite)
    check_device(device)
    _check_out(out, data)
    source = model_source(revision, trust_remote_code, offline)
    check_model(model, source)
    set_threads(threads)
    with Bars("eval") as progress:
        # the library writes and finishes the run folder, as knowflow.evaluate(out_dir=) does
        result = evaluate(model, [*(suite.split(",") if suite else []), *(data or [])] or None,
                          config=cfg, fields=mapping, preset=preset, device=device,
                          dtype=dtype, out_dir=out, runs_dir=None if out else Path("runs"),
                          progress=progress, revision=revision,
                          trust_remote_code=trust_remote_code, offline=offline)
    if result.out_dir is None:  # not rank 0 of a multi-process launch: rank 0 reports
        return
    report = result.out_dir / "report.html"
    print_eval(result.summary)
    print_strength(result.summary)
    if result.conditions:
        show_conditions(result.conditions, result.out_dir)
    for name, used in result.config.get("presets", {}).items():
        console.print(f"{name}: columns read with the {used} preset", highlight=False)
    console.print(format_note(cfg.prompt_format, result.config["prompt_format"]), highlight=False)
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in result.stage_seconds.items())
    console.print(f"results: {result.out_dir}  ({result.seconds:.1f} s: {stages})",
                  highlight=False)
    console.print(f"report: {report}", highlight=False)


def _check_out(out: Path | None, inputs) -> None:
    """--out: new, empty or an earlier eval's folder, holding no input (before any work)."""
    from knowflow.store.outputs import check_out_dir

    check_out_dir(out or Path("runs") / "eval", "eval" if out else None, inputs=inputs or [])


def _eval_from_lm_eval(samples: list[Path], out: Path | None, seed: int, clash) -> None:
    from knowflow.evaluation.run import from_lm_eval
    from knowflow.report.finish import finish_eval

    if clash:
        raise ConfigError("reads lm-eval's results; it takes no --suite or --data",
                          "--from-lm-eval", "drop --suite/--data")
    _check_out(out, samples)
    result = from_lm_eval(samples, out_dir=out, runs_dir=None if out else Path("runs"),
                          seed=seed, finish=finish_eval)
    report = result.out_dir / "report.html"
    print_eval(result.summary)
    console.print(f"results: {result.out_dir}", highlight=False)
    console.print(f"report: {report}", highlight=False)
