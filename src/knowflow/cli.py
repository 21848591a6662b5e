"""The `knowflow` command. It parses, calls the library, and renders; the library never prints."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from knowflow.cli_errors import Settings, guard
from knowflow.errors import ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="knowflow: where does a model's answer come from — context or weights?")
# Wide enough for result tables when the output is a file or a pipe (rich assumes 80 columns).
console = Console(width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True)


def check_threads(threads: int) -> None:
    """--threads: at least one torch thread."""
    if threads < 1:
        raise ConfigError(f"must be at least 1, got {threads}", "--threads",
                          "give --threads 1 (fastest for small models) or more")


def check_suites(suite: str | None) -> None:
    """--suite: comma-separated built-in suite names."""
    if suite is None:
        return
    from knowflow.worlds.suites import list_suites

    names = [n.strip() for n in suite.split(",") if n.strip()]
    known = list_suites()
    if not names or any(n not in known for n in names):
        bad = next((n for n in names if n not in known), suite)
        raise ConfigError(f"unknown suite {bad!r}", "--suite",
                          f"give one or more of {', '.join(known)}, comma-separated")


def check_run_dir(run_dir: Path | None, resume: bool) -> None:
    """--run-dir names the run that --resume continues; alone it would be ignored."""
    if run_dir is not None and not resume:
        raise ConfigError("only works with --resume", "--run-dir",
                          "add --resume to continue that run, or drop --run-dir")


@app.callback()
def main(verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Log progress; on an error, show the full traceback.")] = False
         ) -> None:
    Settings.verbose = verbose
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s",
                        handlers=[RichHandler(console=err_console, show_path=False)])


@app.command("list")
@guard
def list_cmd() -> None:
    """List the registered experiments."""
    from knowflow.experiments.registry import list_experiments

    table = Table("experiment", "what it does")
    for exp in list_experiments():
        table.add_row(exp.name, exp.description)
    console.print(table)


@app.command("config")
@guard
def config_cmd(name: Annotated[str, typer.Argument(help="Experiment name.")]) -> None:
    """Print an experiment's default config: every key `--set` accepts."""
    from knowflow.config import flatten
    from knowflow.experiments.runner import default_config_dict

    cfg = default_config_dict(name)
    for key, value in flatten(cfg).items():
        console.print(f"{key}={json.dumps(value)}", highlight=False)


def _print_summary(summary: dict, columns: tuple[str, ...]) -> None:
    """One row per section of the summary that has the experiment's table columns."""
    rows: dict[str, dict] = {}
    for key, value in summary.items():
        if not isinstance(value, dict):
            continue
        if any(c in value for c in columns):
            rows[key] = value
        else:  # one level down, e.g. summary["mitigations"][arm]
            rows.update({f"{key}.{sub}": row for sub, row in value.items()
                         if isinstance(row, dict) and any(c in row for c in columns)})
    if rows:
        table = Table("", *columns)
        for name, row in rows.items():
            table.add_row(name, *[f"{row[c]:.3f}" if isinstance(row.get(c), float)
                                  else str(row.get(c, "")) for c in columns])
        console.print(table)
    scalars = {k: v for k, v in summary.get("findings", {}).items()}
    for key, value in scalars.items():
        console.print(f"{key}: {value:.4f}" if isinstance(value, float) and
                      not isinstance(value, bool) else f"{key}: {value}", highlight=False)


@app.command("run")
@guard
def run_cmd(
    name: Annotated[str, typer.Argument(help="Registered experiment (see `knowflow list`).")],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a config field: key=value (repeatable).")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where run directories go.")] = Path("runs"),
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the newest unfinished run of this experiment.")] = False,
    run_dir: Annotated[Path | None, typer.Option(
        help="With --resume: the run directory to continue.")] = None,
    threads: Annotated[int, typer.Option(
        help="torch threads per process (1 is fastest for small models).")] = 1,
) -> None:
    """Run a registered experiment; writes runs/<name>/<timestamp>/ with a report.html."""
    import torch

    from knowflow.experiments.runner import run_experiment

    check_threads(threads)
    check_run_dir(run_dir, resume)
    torch.set_num_threads(threads)
    result = run_experiment(name, set_ or [], runs_root=runs_dir,
                            resume=(run_dir or True) if resume else False)
    _print_summary(result.summary, result.columns)
    console.print(f"run directory: {result.run_dir}  ({result.seconds:.1f} s)", highlight=False)
    console.print(f"report: {result.report}", highlight=False)


@app.command("report")
@guard
def report_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories to include.")],
    out: Annotated[Path | None, typer.Option(
        help="Output file (default: RUN_DIR/report.html for one run, ./report.html for many)."
    )] = None,
) -> None:
    """Write a self-contained report.html (figures embedded, config, summary tables)."""
    from knowflow.errors import DataError
    from knowflow.io import check_output_file
    from knowflow.report.html import write_report
    from knowflow.runs import CONFIG, check_run_files

    target = out or (run_dirs[0] / "report.html" if len(run_dirs) == 1 else Path("report.html"))
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise DataError(run_dir, "no such run folder" if not run_dir.exists() else
                            "a file, not a run folder", hint="give runs/<experiment>/<timestamp>")
        if not (run_dir / CONFIG).exists():
            raise DataError(run_dir, f"not a knowflow run directory (no {CONFIG})",
                            hint="give runs/<experiment>/<timestamp>")
        check_run_files(run_dir, resume=False)
    check_output_file(target, "report file")
    path = write_report(run_dirs, target)
    console.print(f"report: {path}", highlight=False)

def _fmt(value, ci=None) -> str:
    if value is None:
        return "-"
    text = f"{value:.3f}"
    return f"{text} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else text


def _print_eval(summary: dict) -> None:
    """One row per suite and scoring mode: all items, then the known-fact subset."""
    table = Table("suite", "scoring", "n", "cf acc (95% CI)", "param acc (95% CI)",
                  "mem ratio", "known share", "cf acc | known", "param acc | known", "n known",
                  caption="cf: the context's answer; param: the memorized answer; known: items "
                          "whose memorized answer the model gives without the context")
    for suite, modes in summary.items():
        for mode, m in modes.items():
            known = m.get("known", {})
            table.add_row(
                suite, mode, str(m["n"]),
                _fmt(m["counterfactual_accuracy"], m.get("counterfactual_accuracy_ci")),
                _fmt(m["parametric_accuracy"], m.get("parametric_accuracy_ci")),
                _fmt(m.get("memorization_ratio"), m.get("memorization_ratio_ci")),
                _fmt(m.get("known_share")), _fmt(known.get("counterfactual_accuracy")),
                _fmt(known.get("parametric_accuracy")), str(known.get("n", "-")))
    console.print(table)


@app.command("eval")
@guard
def eval_cmd(
    model: Annotated[str, typer.Option(
        help="HF id or local folder, a knowflow checkpoint folder, or smollm2-135m-instruct."
    )] = "smollm2-135m-instruct",
    suite: Annotated[str | None, typer.Option(
        help="Built-in suites, comma-separated: cf-capitals, cf-world, cf-bio, cf-quotes "
             "(default: all four unless --data is given).")] = None,
    data: Annotated[list[Path] | None, typer.Option(
        help="External file: JSON/JSONL (context, question, answer, memory_answer), "
             "MemoTrap CSV, or knowflow JSONL (repeatable).")] = None,
    fields: Annotated[str | None, typer.Option(
        help="--data column mapping: context=COL,question=COL,answer=COL,memory_answer=COL "
             "(parquet, save_to_disk folders, CSV, JSON/JSONL).")] = None,
    scoring: Annotated[str, typer.Option(help="generate, loglik or both.")] = "both",
    prompt_format: Annotated[str, typer.Option(
        help="chat (the model's template), alpaca, tulu or plain.")] = "chat",
    no_context: Annotated[bool, typer.Option(
        "--no-context", help="Ask the question alone (what the model knows).")] = False,
    context_only: Annotated[bool, typer.Option(
        "--context-only", help='Add "Answer based on the context only."')] = False,
    limit: Annotated[int | None, typer.Option(help="Items per suite (seeded sample).")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Output folder (default: runs/eval/<timestamp>/).")] = None,
    batch_size: Annotated[int, typer.Option(
        help="Prompts per forward pass (0: as many as free GPU memory allows).")] = 16,
    max_new_tokens: Annotated[int, typer.Option(help="Longest generated answer.")] = 24,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, mps.")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, float32, bfloat16, float16.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed for suites, sampling and bootstrap.")] = 0,
    no_known_filter: Annotated[bool, typer.Option(
        "--no-known-filter", help="Skip the no-context pass that finds known facts.")] = False,
    known_by: Annotated[str, typer.Option(
        help="How the no-context pass finds known facts: loglik (the memorized answer is the "
             "likelier; no decoding), generate (greedy output mentions it), or auto (loglik "
             "under --scoring loglik, else generate).")] = "auto",
    method: Annotated[str, typer.Option(
        help="Decoding method(s), comma-separated: greedy, cad, adacad, opinion, opinion+cad, "
             "opinion+adacad (several: one pass each, and a tradeoff figure).")] = "greedy",
    alpha: Annotated[str, typer.Option(
        help="CAD's alpha; several (0,0.5,1,2) sweep it.")] = "1.0",
    conditions: Annotated[str, typer.Option(
        help="Context conditions, comma-separated: conflicting, agreeing, irrelevant "
             "(sensitivity and robustness need conflicting and irrelevant).")] = "conflicting",
    threads: Annotated[int, typer.Option(help="torch CPU threads.")] = 1,
    from_lm_eval: Annotated[list[Path] | None, typer.Option(
        help="Report knowflow's metrics from lm_eval --log_samples files of tasks written by "
             "`knowflow export lm-eval` (repeatable; no model runs).")] = None,
) -> None:
    """Knowledge-conflict evaluation: does the model follow the context or its memory?"""
    import torch

    from knowflow.cli_progress import Bars
    from knowflow.config import validate_config
    from knowflow.evaluate.api import EvalConfig, evaluate
    from knowflow.io import check_output_dir
    from knowflow.models.hf import check_device, check_model
    from knowflow.worlds.tables import parse_fields

    check_threads(threads)
    if from_lm_eval:
        _eval_from_lm_eval(from_lm_eval, out, seed, clash=suite or data)
        return
    mapping = parse_fields(fields)
    validate_config(EvalConfig(
        scoring=scoring, prompt_format=prompt_format, use_context=not no_context,
        context_only=context_only, limit=limit, seed=seed, batch_size=batch_size,
        max_new_tokens=max_new_tokens, known_by=known_by, method=method, alpha=alpha,
        conditions=conditions))
    check_suites(suite)
    check_device(device)
    check_output_dir(out or Path("runs") / "eval", "output folder")
    check_model(model)
    torch.set_num_threads(threads)
    with Bars("eval") as progress:
        result = evaluate(
            model, suite, data=data, fields=mapping, device=device, dtype=dtype,
            out_dir=out, runs_root=None if out else Path("runs"), progress=progress,
            scoring=scoring, prompt_format=prompt_format, use_context=not no_context,
            context_only=context_only, limit=limit, seed=seed, batch_size=batch_size,
            max_new_tokens=max_new_tokens, known_filter=not no_known_filter, known_by=known_by,
            method=method, alpha=alpha, conditions=conditions)
    report = _finish_eval(result.out_dir)
    _print_eval(result.summary)
    if result.conditions:
        from knowflow.cli_conditions import show_conditions

        show_conditions(console, result.conditions, result.out_dir)
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in result.stage_seconds.items())
    console.print(f"results: {result.out_dir}  ({result.seconds:.1f} s: {stages})",
                  highlight=False)
    console.print(f"report: {report}", highlight=False)


def _finish_eval(run_dir: Path) -> Path:
    """The eval run folder's figures and report.html, as every run is finished."""
    from knowflow.experiments.runner import finish_run
    from knowflow.report.eval_run import eval_figures

    return finish_run(run_dir, None, eval_figures, title="knowflow eval")[1]


def _eval_from_lm_eval(samples: list[Path], out: Path | None, seed: int, clash) -> None:
    from knowflow.evaluate.api import from_lm_eval
    from knowflow.io import check_output_dir

    if clash:
        raise ConfigError("reads lm-eval's results; it takes no --suite or --data",
                          "--from-lm-eval", "drop --suite/--data")
    check_output_dir(out or Path("runs") / "eval", "output folder")
    result = from_lm_eval(samples, out_dir=out, runs_root=None if out else Path("runs"),
                          seed=seed)
    report = _finish_eval(result.out_dir)
    _print_eval(result.summary)
    console.print(f"results: {result.out_dir}", highlight=False)
    console.print(f"report: {report}", highlight=False)


from knowflow.cli_export import export_app  # noqa: E402, I001
from knowflow.cli_probe import probe_app  # noqa: E402
from knowflow.cli_sft import augment_cmd, curate_cmd, sft_cmd  # noqa: E402

app.add_typer(probe_app, name="probe")
app.add_typer(export_app, name="export")
app.command("sft")(guard(sft_cmd))
app.command("curate")(guard(curate_cmd))
app.command("augment")(guard(augment_cmd))


def entry() -> None:  # pragma: no cover - for `python -m knowflow`
    sys.exit(app())
