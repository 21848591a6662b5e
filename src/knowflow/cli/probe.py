"""`knowflow probe knockout|sublayer|project|attention`: mechanistic probes of factual recall.

Each command parses its options into the probe's frozen config, loads the examples (a prompts
file, a built-in suite, or knowflow's shipped well-known facts) and the model, runs the probe
with a progress bar, and writes `runs/probe-<kind>/<timestamp>/` with config.json,
records.jsonl, summary.json, figures/ and report.html through `knowflow.api.run_probe`, the
folder `knowflow.probe(..., out_dir=)` writes. Bad input is one line, exit code 2.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from knowflow.cli.common import (
    DeviceOpt,
    DtypeOpt,
    MaxMemoryOpt,
    OfflineOpt,
    RevisionOpt,
    RunsOpt,
    SetOpt,
    ThreadsOpt,
    TrustRemoteCodeOpt,
    check_threads,
    console,
    model_source,
    print_paths,
    usable_cpus,
)
from knowflow.cli.errors import guard
from knowflow.cli.progress import Bars
from knowflow.errors import KnowflowError

if TYPE_CHECKING:
    from knowflow.lens.hub import ModelSource

probe_app = typer.Typer(add_completion=False, no_args_is_help=True,
                        help="Mechanistic probes: attention knockout, sublayer knockout, "
                             "vocabulary projection, attention mass on the context.")

ModelOpt = Annotated[str, typer.Option("--model", help="HF model id, local folder, or "
                                                       "smollm2-135m-instruct.")]
DataOpt = Annotated[Path | None, typer.Option(
    "--data", help="Prompts file (JSONL: prompt, subject, relation, attributes, answer, "
                   "context). Default: knowflow's shipped well-known facts.")]
SuiteOpt = Annotated[str | None, typer.Option("--suite", help="A built-in suite instead of "
                                                              "--data (e.g. cf-capitals).")]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Use the first N examples.")]
AllOpt = Annotated[bool, typer.Option("--all", help="Also probe facts the model gets wrong.")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Output directory (default: "
                                                           "RUNS_DIR/probe-KIND/TIMESTAMP).")]


@dataclasses.dataclass
class _Common:
    model: str
    data: Path | None
    suite: str | None
    limit: int | None
    runs_dir: Path
    out: Path | None
    device: str
    dtype: str
    threads: int | None
    source: ModelSource | None = None  # --revision, --trust-remote-code, --offline


def _config(cls, fields: dict, overrides: list[str] | None):
    from knowflow.config import require, resolve_config
    from knowflow.lens.memory import check_max_memory

    cfg = resolve_config(cls, cls(**{k: v for k, v in fields.items() if v is not None}),
                         overrides)
    require(cfg.batch_size >= 1, "batch_size", f"must be at least 1, got {cfg.batch_size}")
    check_max_memory(getattr(cfg, "max_memory", None), "--max-memory")
    return cfg


def _load_model(common: _Common):
    import torch

    from knowflow.lens.load import resolve_model

    torch.set_num_threads(common.threads or usable_cpus())
    return resolve_model(common.model, device=common.device, dtype=common.dtype,
                         source=common.source)[:2]


def _examples(common: _Common, tokenizer, with_context: bool, prompt_format: str = "plain"):
    from knowflow.probes.examples import builtin_facts, load_examples
    from knowflow.probes.suites import suite_examples

    if common.data and common.suite:
        raise KnowflowError("give --data or --suite, not both")
    if common.suite:
        return suite_examples(common.suite, tokenizer, with_context, prompt_format,
                              limit=common.limit)
    examples = load_examples(common.data) if common.data else builtin_facts()
    return examples[: common.limit] if common.limit else examples


def _validate_data(common: _Common, kind: str | None = None) -> None:
    """Check the options and read a prompts file before the model loads, so bad input fails
    fast and leaves nothing behind (`kind`: the probe, whose earlier runs --out may hold)."""
    from knowflow.lens.load import check_device, check_model
    from knowflow.store.outputs import check_out_dir

    check_threads(common.threads)
    if common.data and common.suite:
        raise KnowflowError("give --data or --suite, not both")
    if common.limit is not None and common.limit < 1:
        raise KnowflowError(f"--limit: must be at least 1, got {common.limit}")
    check_device(common.device)
    if common.data is not None:
        from knowflow.data.quality import warn_duplicate_keys
        from knowflow.probes.examples import load_examples

        load_examples(common.data)
        warn_duplicate_keys(common.data)
    command = f"probe-{kind}" if common.out is not None and kind is not None else None
    check_out_dir(common.out or common.runs_dir, command, inputs=[common.data])
    check_model(common.model, common.source)


def _run(kind: str, common: _Common, cfg, with_context: bool = False,
         prompt_format: str = "plain") -> tuple[Path, list[dict], dict]:
    """Check the options, load the model and the examples, then probe and write the run
    folder through the library (`_write`)."""
    _validate_data(common, kind)
    model, tokenizer = _load_model(common)
    examples = _examples(common, tokenizer, with_context, prompt_format)
    label = str(common.data) if common.data else \
        (f"suite:{common.suite}" if common.suite else "builtin:known_facts")
    result = _write(kind, common, cfg, model, tokenizer, examples, label)
    return result.out_dir, result.records, result.summary


def _write(kind: str, common: _Common, cfg, model, tokenizer, examples, label: str):
    """Probe and write the run folder as `knowflow.probe(..., out_dir=)` does
    (`knowflow.api.run_probe`: config.json first, then records.jsonl, figures, summary.json,
    report.html; bad input found once the folder is made, or Ctrl-C, removes it)."""
    from knowflow.api import run_probe

    with Bars(f"probe {kind}") as progress:
        return run_probe(kind, model, tokenizer, examples, cfg, common.model, label,
                         out_dir=common.out, runs_dir=common.runs_dir, progress=progress)


def _curve_table(summary: dict, title: str) -> None:
    table = Table(title=title)
    table.add_column("source")
    table.add_column("most negative layer", justify="right")
    table.add_column("mean change there", justify="right")
    table.add_column("examples", justify="right")
    for name, row in summary.items():
        value = row["most_negative_value"]
        table.add_row(name, str(row["most_negative_layer"]),
                      "" if value is None else f"{100 * value:+.1f}%", str(row["n_examples"]))
    console.print(table)
    layers = max((len(r["mean_rel_change"]) for r in summary.values()), default=0)
    curves = Table(title="mean % change in the prediction's probability, by layer")
    curves.add_column("layer", justify="right")
    for name in summary:
        curves.add_column(name, justify="right")
    for layer in range(layers):
        cells = [summary[n]["mean_rel_change"][layer] for n in summary]
        curves.add_row(str(layer), *["" if c is None else f"{100 * c:+.1f}" for c in cells])
    console.print(curves)


def _done(out: Path) -> None:
    print_paths(out, out / "report.html")


def _common(model, data, suite, limit, runs_dir, out, device, dtype, threads,
            source: ModelSource | None = None) -> _Common:
    return _Common(model, data, suite, limit, runs_dir, out, device, dtype, threads, source)


@probe_app.command("knockout")
@guard
def knockout_cmd(
    model: ModelOpt = "smollm2-135m-instruct", revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False, offline: OfflineOpt = False,
    data: DataOpt = None, suite: SuiteOpt = None,
    limit: LimitOpt = None, all_: AllOpt = False, set_: SetOpt = None,
    window: Annotated[int | None, typer.Option(help="Layers per knockout window (9).")] = None,
    source: Annotated[list[str] | None, typer.Option(
        "--source", help="Source set to block (repeatable): subject, non_subject, last, "
                         "relation, first, subject_last, pos:i,j ...")] = None,
    heads: Annotated[str | None, typer.Option(help="Heads to block, e.g. 0,3 (all).")] = None,
    runs_dir: RunsOpt = Path("runs"), out: OutOpt = None, device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto", threads: ThreadsOpt = None, max_memory: MaxMemoryOpt = None,
) -> None:
    """Attention-edge knockout from the last position, swept over layers.

    Cuts the attention edges from the last position to each source set in a window of layers
    and reports the relative change in the probability of the model's own prediction.
    """
    from knowflow.probes import KnockoutConfig

    common = _common(model, data, suite, limit, runs_dir, out, device, dtype, threads,
                     model_source(revision, trust_remote_code, offline))
    cfg = _config(KnockoutConfig, {"window": window, "known_only": not all_,
                                   "sources": tuple(source) if source else None,
                                   "max_memory": max_memory},
                  (set_ or []) + ([f"heads={heads}"] if heads else []))
    run_dir, _, summary = _run("knockout", common, cfg)
    _curve_table(summary, "attention knockout: where blocking hurts most")
    _done(run_dir)


@probe_app.command("sublayer")
@guard
def sublayer_cmd(
    model: ModelOpt = "smollm2-135m-instruct", revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False, offline: OfflineOpt = False,
    data: DataOpt = None, suite: SuiteOpt = None,
    limit: LimitOpt = None, all_: AllOpt = False, set_: SetOpt = None,
    window: Annotated[int | None, typer.Option(help="Layers per knockout window (9).")] = None,
    sublayer: Annotated[list[str] | None, typer.Option(
        "--sublayer", help="mlp and/or attn (repeatable; both).")] = None,
    positions: Annotated[list[str] | None, typer.Option(
        "--positions", help="Where to zero (repeatable): subject, last, ... "
                            "(subject and last).")] = None,
    runs_dir: RunsOpt = Path("runs"), out: OutOpt = None, device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto", threads: ThreadsOpt = None,
) -> None:
    """Sublayer knockout: zero MLP or attention outputs, swept over layers.

    Zeroes the outputs at chosen positions in a window of layers and reports the relative
    change in the probability of the model's own prediction.
    """
    from knowflow.probes import SublayerConfig

    common = _common(model, data, suite, limit, runs_dir, out, device, dtype, threads,
                     model_source(revision, trust_remote_code, offline))
    cfg = _config(SublayerConfig, {
        "window": window, "known_only": not all_,
        "sublayers": tuple(sublayer) if sublayer else None,
        "positions": tuple(positions) if positions else None}, set_)
    run_dir, _, summary = _run("sublayer", common, cfg)
    _curve_table(summary, "sublayer knockout: where zeroing hurts most")
    _done(run_dir)


@probe_app.command("project")
@guard
def project_cmd(
    model: ModelOpt = "smollm2-135m-instruct", revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False, offline: OfflineOpt = False,
    data: DataOpt = None, suite: SuiteOpt = None,
    limit: LimitOpt = None, all_: AllOpt = False, set_: SetOpt = None,
    final_norm: Annotated[bool, typer.Option(
        "--final-norm/--no-final-norm", help="Apply the final norm before unembedding.")] = True,
    top_k: Annotated[int | None, typer.Option(help="Tokens for the attributes rate (50).")
                     ] = None,
    runs_dir: RunsOpt = Path("runs"), out: OutOpt = None, device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto", threads: ThreadsOpt = None,
) -> None:
    """Vocabulary projection: attribute extraction rate and attributes rate per layer.

    Extraction rate: how often the top token of the attention (MLP) output at the last
    position is the final prediction. Attributes rate: the share of the top-k tokens of the
    residual stream at the last subject token that belong to the subject's attributes.
    """
    from knowflow.probes import ProjectionConfig

    common = _common(model, data, suite, limit, runs_dir, out, device, dtype, threads,
                     model_source(revision, trust_remote_code, offline))
    cfg = _config(ProjectionConfig, {"final_norm": final_norm, "top_k": top_k,
                                     "known_only": not all_}, set_)
    run_dir, _, summary = _run("project", common, cfg)
    table = Table(title=f"vocabulary projection ({summary['n_examples']} examples): share "
                        "of examples whose top token is the prediction")
    for name in ("layer", "attn out", "mlp out", "residual", "attr rate (last subj)",
                 "attr rate (last)"):
        table.add_column(name, justify="right")
    rates, attrs = summary["extraction_rate"], summary["attributes_rate"]

    def cell(v):
        return "" if v is None else f"{v:.2f}"

    for layer in range(len(rates["attn"])):
        table.add_row(str(layer), cell(rates["attn"][layer]), cell(rates["mlp"][layer]),
                      cell(rates["hidden"][layer]), cell(attrs["last_subject"][layer]),
                      cell(attrs["last"][layer]))
    console.print(table)
    _done(run_dir)


@probe_app.command("attention")
@guard
def attention_cmd(
    model: ModelOpt = "smollm2-135m-instruct", revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False, offline: OfflineOpt = False,
    data: DataOpt = None, suite: SuiteOpt = None,
    limit: LimitOpt = None, set_: SetOpt = None,
    prompt_format: Annotated[str, typer.Option(
        "--prompt-format", help="With --suite: chat, alpaca, tulu or plain.")] = "plain",
    runs_dir: RunsOpt = Path("runs"), out: OutOpt = None, device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto", threads: ThreadsOpt = None,
) -> None:
    """Attention mass on the context, per layer and head.

    The share of attention from the answer position (the last prompt token) to the context's
    tokens; examples need a `context` (--data) or come from a suite (--suite).
    """
    from knowflow.probes import AttentionMassConfig

    common = _common(model, data, suite, limit, runs_dir, out, device, dtype, threads,
                     model_source(revision, trust_remote_code, offline))
    if data is None and suite is None:
        raise KnowflowError("the attention probe needs examples with a context: give "
                            "--data (with a `context` field) or --suite")
    cfg = _config(AttentionMassConfig, {}, set_)
    run_dir, _, summary = _run("attention", common, cfg, with_context=True,
                               prompt_format=prompt_format)
    table = Table(title=f"attention mass on the context ({summary['n_examples']} examples)")
    table.add_column("layer", justify="right")
    table.add_column("mean over heads", justify="right")
    table.add_column("max head", justify="right")
    for layer, row in enumerate(summary["mean_mass"]):
        best = max(range(len(row)), key=row.__getitem__)
        table.add_row(str(layer), f"{sum(row) / len(row):.3f}", f"{best}: {row[best]:.3f}")
    console.print(table)
    _done(run_dir)
