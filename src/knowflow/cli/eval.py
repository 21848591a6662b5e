"""`knowflow eval`: knowledge-conflict evaluation of a model on suites or files, or of
lm-evaluation-harness samples of knowflow's exported tasks."""

from __future__ import annotations

from knowflow.cli.common import console
from knowflow.cli.eval_tables import print_eval, print_strength, show_conditions
from knowflow.cli.flags import command
from knowflow.cli.progress import Bars


def _sections() -> dict[str, type]:
    from knowflow.evaluation.options import EvalConfig, EvalData
    from knowflow.lens.device import Threads
    from knowflow.lens.hub import ModelOptions
    from knowflow.store.run_folder import OutOptions

    return {"model": ModelOptions, "data": EvalData, "cfg": EvalConfig, "run": OutOptions,
            "threads": Threads}


@command(_sections, job="cfg")
def eval_cmd(model, data, cfg, run, threads) -> None:
    """Knowledge-conflict evaluation: does the model follow the context or its memory?"""
    from knowflow.api import evaluate, from_lm_eval

    if data.from_lm_eval:
        result = from_lm_eval(list(data.from_lm_eval), out=run.out, runs_dir=run.runs_dir,
                              seed=cfg.seed)
        print_eval(result.summary)
        console.print(f"results: {result.out_dir}", highlight=False)
        console.print(f"report: {result.out_dir / 'report.html'}", highlight=False)
        return
    threads.apply()
    with Bars("eval") as progress:  # the library writes and finishes the run folder
        result = evaluate(model.model, data.sources, config=cfg, fields=data.table.mapping,
                          preset=data.table.preset, out=run.out, runs_dir=run.runs_dir,
                          progress=progress, **model.load_keywords)
    if result.out_dir is not None:  # else not rank 0 of a multi-process launch: rank 0 reports
        _show(result, cfg.prompt_format)


def _show(result, asked_format: str) -> None:
    """The tables, the formats used and where the run went."""
    from knowflow.data.prompts import format_note

    print_eval(result.summary)
    print_strength(result.summary)
    if result.conditions:
        show_conditions(result.conditions, result.out_dir)
    for name, used in result.config.get("presets", {}).items():
        console.print(f"{name}: columns read with the {used} preset", highlight=False)
    console.print(format_note(asked_format, result.config["prompt_format"]), highlight=False)
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in result.stage_seconds.items())
    console.print(f"results: {result.out_dir}  ({result.seconds:.1f} s: {stages})",
                  highlight=False)
    console.print(f"report: {result.out_dir / 'report.html'}", highlight=False)
