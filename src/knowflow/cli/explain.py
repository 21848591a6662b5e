"""`knowflow explain`: where one answer came from — context or weights, which sentence,
which layers and heads.

One item (`--context TEXT_OR_FILE --question Q [--answer A]`) or many (`--data FILE`, any
format `knowflow eval` reads, or `--suite NAME`). Everything is checked before the model
loads where it can be (options, the data, each item's context and sentences), the rest before
anything is written (the answer, the model's window); the run folder (config.json,
records.jsonl, summary.json, figures/, report.html) is written at the end.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from knowflow.cli.common import (
    MAX_MEMORY_HELP,
    DeviceOpt,
    DtypeOpt,
    OfflineOpt,
    Opt,
    RevisionOpt,
    RunsOpt,
    SetOpt,
    ThreadsOpt,
    TrustRemoteCodeOpt,
    check_seed,
    check_threads,
    console,
    model_source,
    print_paths,
    set_threads,
)
from knowflow.cli.progress import Bars
from knowflow.errors import ConfigError, KnowflowError


def explain_cmd(
    action: Annotated[str | None, typer.Argument(
        help="fit: fit the model's learned attribution estimator on generated contexts and "
             "save it beside its cache entry (then --attribution learned uses it).",
        show_default=False)] = None,
    model: Annotated[str, Opt(help="HF id or local folder, or smollm2-135m-instruct.")
                     ] = "smollm2-135m-instruct",
    revision: RevisionOpt = None, trust_remote_code: TrustRemoteCodeOpt = False,
    offline: OfflineOpt = False,
    context: Annotated[str | None, Opt(help="The context: text, or a path to a text file.")
                       ] = None,
    question: Annotated[str | None, Opt(help="The question asked after the context.")] = None,
    answer: Annotated[str | None, Opt(help="The answer to explain (default: per --target).")
                      ] = None,
    data: Annotated[Path | None, Opt(help="Items to explain: any file `knowflow eval` reads.")
                    ] = None,
    suite: Annotated[str | None, Opt(help="A built-in suite instead (e.g. needle-cf).")
                     ] = None,
    fields: Annotated[str | None, Opt(help="--data column mapping: context=COL,question=COL,"
                                           "answer=COL,memory_answer=COL.")] = None,
    preset: Annotated[str | None, Opt(help="--data layout: nq-swap, conflictqa, memotrap or "
                                           "clasheval (default: recognised).")] = None,
    target: Annotated[str, Opt(help="The answer explained: generated (the model's own), "
                                    "counterfactual (the context's) or parametric (memory's)."
                               )] = "generated",
    levels: Annotated[str, Opt(help="What to compute: source, sentences, mechanism, tokens "
                                    "(per-token attribution of the whole generation), "
                                    "one_pass (gradient x input beside the ablation: a "
                                    "forward and a backward pass); comma-separated; source "
                                    "is always on.")
                      ] = "source,sentences,mechanism",
    attribution: Annotated[str, Opt(help="Sentence attribution: ablation (the reference), "
                                         "learned (one pass; needs `explain fit`; below "
                                         "ablation's fidelity so far), auto (learned where "
                                         "fitted), gradient (one pass, no fit: each "
                                         "sentence's keep-weight gradient).")] = "ablation",
    ablations: Annotated[int, Opt(help="Random sentence subsets for the surrogate.")] = 64,
    contexts: Annotated[int, Opt(help="fit: generated training contexts.")] = 48,
    fit_ablations: Annotated[int, Opt(help="fit: ablations per training context.")] = 32,
    holdout: Annotated[int, Opt(help="Held-out subsets for the LDS.")] = 16,
    limit: Annotated[int | None, Opt(help="Items of --data/--suite (seeded sample).")] = None,
    offset: Annotated[int, Opt(help="Skip the first N items of the seeded order (held-out "
                                    "samples: --offset 60 --limit 60).")] = 0,
    prompt_format: Annotated[str, Opt(help="auto (chat with a chat template, else plain), "
                                           "chat, alpaca, tulu or plain.")] = "auto",
    out: Annotated[Path | None, Opt(help="Output folder (default: RUNS_DIR/explain/TIME).")
                   ] = None,
    runs_dir: RunsOpt = Path("runs"), set_: SetOpt = None, seed: Annotated[int, Opt()] = 0,
    device: DeviceOpt = "auto", dtype: DtypeOpt = "auto", threads: ThreadsOpt = None,
    max_memory: Annotated[float | None, Opt(help=MAX_MEMORY_HELP)] = None,
) -> None:
    """Explain answers: source verdict, sentence attribution and mechanism."""
    started = time.perf_counter()      # the printed time is the whole command's
    if action is not None:
        if action != "fit":
            raise ConfigError(f"{action!r} is not an action; the one action is fit", "action")
        return _fit(model, model_source(revision, trust_remote_code, offline), contexts,
                    fit_ablations, prompt_format, seed, device, dtype, threads, started)
    from knowflow.api import explain
    from knowflow.config import resolve_config
    from knowflow.data.prompts import format_note
    from knowflow.data.tables import parse_fields
    from knowflow.explanation.estimator import check_estimator
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.run import load_explain_items
    from knowflow.lens.load import check_device, check_model
    from knowflow.store.outputs import check_out_dir

    check_threads(threads)
    check_seed(seed)
    cfg = resolve_config(ExplainConfig, ExplainConfig(
        target=target, levels=tuple(x.strip() for x in levels.split(",") if x.strip()),
        ablations=ablations, holdout=holdout, limit=limit, offset=offset,
        prompt_format=prompt_format, attribution=attribution,
        seed=seed, max_memory=max_memory), set_)
    source = _source(context, question, answer, data, suite)
    mapping = parse_fields(fields)
    load_explain_items(source, question, cfg, mapping, preset)  # bad items: before the model
    check_device(device)
    target_dir = out or runs_dir / "explain"
    check_out_dir(target_dir, what="output folder")
    check_estimator(model, cfg)                  # learned without an estimator: before loading
    check_model(model, model_source(revision, trust_remote_code, offline))
    set_threads(threads)
    with Bars("explain") as progress, _hidden_on_error(progress):
        result = explain(model, source, question, answer, config=cfg, fields=mapping,
                         preset=preset, device=device, dtype=dtype, progress=progress,
                         revision=revision, trust_remote_code=trust_remote_code,
                         offline=offline)
    run_dir = result.save(out, runs_dir=runs_dir)
    report = run_dir / "report.html"
    _table(result.records)
    console.print(result.summary["findings"]["verdict"], highlight=False)
    console.print(format_note(cfg.prompt_format, result.config["prompt_format"]), highlight=False)
    console.print(result.config["attribution_note"], highlight=False, markup=False)
    print_paths(run_dir, report, time.perf_counter() - started)


def _fit(model: str, source, contexts: int, ablations: int, prompt_format: str, seed: int,
         device: str, dtype: str, threads: int, started: float) -> None:
    """`knowflow explain fit`: fit and save the model's learned estimator, print its
    provenance."""
    from knowflow.explanation.fit import FitConfig, fit_model
    from knowflow.lens.load import check_device, check_model

    check_threads(threads)
    check_seed(seed)
    cfg = FitConfig(contexts=contexts, ablations=ablations, prompt_format=prompt_format,
                    seed=seed)
    cfg.validate()
    check_device(device)
    check_model(model, source)
    set_threads(threads)
    with Bars("fit") as progress, _hidden_on_error(progress):
        est, path = fit_model(model, cfg, device=device, dtype=dtype, progress=progress,
                              source=source)
    prov = est.provenance
    lds = prov["heldout_lds"]
    top = sorted(range(len(est.weights)), key=lambda i: -abs(est.weights[i]))[:5]
    console.print(f"learned estimator of {model}: {prov['n_contexts']} generated contexts "
                  f"({prov['n_train']} fit, {prov['n_heldout']} held out), "
                  f"{prov['ablations_used']} ablations, held-out LDS "
                  f"{'-' if lds is None else f'{lds:.3f}'}, ridge {prov['ridge']:g}, "
                  f"{prov['fit_cpu_seconds']:.0f} CPU s", highlight=False)
    console.print("largest head weights: " + ", ".join(
        f"{i // est.n_heads}.{i % est.n_heads}: {est.weights[i]:+.3f}" for i in top),
        highlight=False)
    print_paths(path, None, time.perf_counter() - started, label="estimator")


@contextmanager
def _hidden_on_error(bars: Bars):
    """Bad input found once the bars run (an answer the model cannot produce, a prompt
    longer than its window) still prints as its one line: the bars are cleared first."""
    try:
        yield
    except KnowflowError:
        for task in list(bars.tasks.values()):
            bars.bars.remove_task(task)
        bars.bars.live.transient = True
        raise


def _source(context, question, answer, data, suite):
    """What to explain: the context text (from a file if it names one), or --data/--suite."""
    given = [name for name, v in (("--context", context), ("--data", data), ("--suite", suite))
             if v is not None]
    if len(given) != 1:
        raise ConfigError("give exactly one of --context (with --question), --data, --suite",
                          given[1] if len(given) > 1 else "--context")
    if context is not None:
        if question is None:
            raise ConfigError("a context needs its question", "--question")
        try:
            is_file = "\n" not in context and Path(context).is_file()
        except OSError:  # text too long to be a file name
            is_file = False
        return Path(context).read_text(encoding="utf-8") if is_file else context
    if question is not None or answer is not None:
        raise ConfigError("goes with --context (one item), not --data/--suite",
                          "--question" if question is not None else "--answer")
    return str(data) if data is not None else suite


def _table(records: list[dict]) -> None:
    table = Table(title="explain: one row per item")
    for name in ("item", "answer", "explained", "without context", "verdict", "expected",
                 "top sentence", "LDS"):
        table.add_column(name)
    for r in records[:40]:
        top = r.get("top_sentence")
        text = r["sentences"][top]["text"] if top is not None else ""
        if text and r["sentences"][top]["attribution"] <= 0:   # nothing raises the answer
            text = "(none raises it)"
        table.add_row(r["id"], r["answer"][:30], r["explained"].strip()[:30],
                      r["answer_no_context"][:30], r["verdict"],
                      r["expected_verdict"] or "", f"{top}: {text[:40]}" if text else "",
                      "" if r.get("lds") is None else f"{r['lds']:.2f}")
    console.print(table)
