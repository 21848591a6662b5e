"""`knowflow explain`: where one answer came from — context or weights, which sentence,
which layers and heads.

One item (`--context TEXT_OR_FILE --question Q [--answer A]`) or many (`--data FILE`, any
format `knowflow eval` reads, or `--suite NAME`). Everything is checked before the model
loads where it can be (options, the data, each item's context and sentences), the rest before
anything is written (the answer, the model's window); the run folder (config.json,
records.jsonl, summary.json, figures/, report.html) is written at the end. `knowflow explain
fit` fits a model's learned attribution estimator (`explanation.fit.FitConfig`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from rich.table import Table

from knowflow.cli.common import console, print_paths
from knowflow.cli.flags import SET_HELP, command
from knowflow.cli.progress import Bars
from knowflow.errors import KnowflowError


def _sections() -> dict[str, type]:
    from knowflow.data.options import ExplainData
    from knowflow.explanation.options import ExplainConfig
    from knowflow.lens.device import Threads
    from knowflow.lens.hub import ModelOptions
    from knowflow.store.run_folder import OutOptions

    return {"model": ModelOptions, "cfg": ExplainConfig, "data": ExplainData,
            "run": OutOptions, "threads": Threads}  # checked in this order


@command(_sections, job="cfg", sets=SET_HELP)
def explain_cmd(model, data, cfg, run, threads) -> None:
    """Explain answers: source verdict, sentence attribution and mechanism."""
    from knowflow.api import explain
    from knowflow.data.prompts import format_note

    started = time.perf_counter()      # the printed time is the whole command's
    threads.apply()
    with Bars("explain") as progress, _hidden_on_error(progress):
        result = explain(model.model, data.source, data.question, data.answer, config=cfg,
                         fields=data.table.mapping, preset=data.table.preset, out=run.out,
                         runs_dir=run.runs_dir, progress=progress, **model.load_keywords)
    _table(result.records)
    console.print(result.summary["findings"]["verdict"], highlight=False)
    console.print(format_note(cfg.prompt_format, result.config["prompt_format"]), highlight=False)
    console.print(result.config["attribution_note"], highlight=False, markup=False)
    print_paths(result.out_dir, result.out_dir / "report.html", time.perf_counter() - started)


def _fit_sections() -> dict[str, type]:
    from knowflow.explanation.fit import FitConfig
    from knowflow.lens.device import Threads
    from knowflow.lens.hub import ModelOptions

    return {"model": ModelOptions, "cfg": FitConfig, "threads": Threads}


@command(_fit_sections, job="cfg")
def fit_cmd(model, cfg, threads) -> None:
    """Fit the model's learned attribution estimator on generated contexts and save it beside
    its cache entry (then --attribution learned uses it)."""
    from knowflow.explanation.fit import fit_model

    started = time.perf_counter()
    threads.apply()
    with Bars("fit") as progress, _hidden_on_error(progress):
        est, path = fit_model(model.model, cfg, device=model.device, dtype=model.dtype,
                              progress=progress, source=model.source)
    prov = est.provenance
    lds = prov["heldout_lds"]
    top = sorted(range(len(est.weights)), key=lambda i: -abs(est.weights[i]))[:5]
    console.print(f"learned estimator of {model.model}: {prov['n_contexts']} generated "
                  f"contexts ({prov['n_train']} fit, {prov['n_heldout']} held out), "
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
