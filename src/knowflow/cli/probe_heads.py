"""`knowflow probe heads` and `knowflow probe head-project`: attention heads one at a time.

`probe heads` runs on knowledge-conflict items (built-in suites or a file in `knowflow eval`'s
format) and ranks context and memory heads by their causal effect on the log-odds of the
context's answer; `probe head-project` reads each head's output through the unembedding on
known facts. Both write `runs/probe-<kind>/<timestamp>/` like the other probes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
    TrustRemoteCodeOpt,
    check_suites,
    check_threads,
    console,
    model_source,
)
from knowflow.cli.probe import (
    AllOpt,
    DataOpt,
    LimitOpt,
    ModelOpt,
    OutOpt,
    SuiteOpt,
    ThreadsOpt,
    _common,
    _config,
    _done,
    _examples,
    _load_model,
    _validate_data,
    _write,
)
from knowflow.errors import KnowflowError

ItemsOpt = Annotated[Path | None, typer.Option(
    "--data", help="Conflict items file (knowflow eval's format: context, question, "
                   "counterfactual and parametric answers).")]
ItemSuiteOpt = Annotated[str, typer.Option(
    "--suite", help="Built-in conflict suites, comma-separated.")]


def _heads_table(title: str, cells: list[dict]) -> None:
    table = Table(title=title)
    for name in ("rank", "layer", "head", "effect", "95% interval"):
        table.add_column(name, justify="right")
    for rank, c in enumerate(cells, start=1):
        table.add_row(str(rank), str(c["layer"]), str(c["head"]), f"{c['effect']:+.3f}",
                      f"[{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]")
    console.print(table)


def heads_cmd(
    model: ModelOpt = "smollm2-135m-instruct", revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False, offline: OfflineOpt = False,
    data: ItemsOpt = None,
    suite: ItemSuiteOpt = "cf-capitals", limit: LimitOpt = None, set_: SetOpt = None,
    ablation: Annotated[list[str] | None, typer.Option(
        "--ablation", help="zero, mean and/or block (repeatable; all three).")] = None,
    rank_by: Annotated[str | None, typer.Option(
        "--rank-by", help="The ablation that ranks the heads (mean).")] = None,
    prompt_format: Annotated[str | None, typer.Option(
        "--prompt-format", help="auto (chat with a chat template, else plain), chat, alpaca, "
                                "tulu or plain (auto).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the --limit sample.")] = 0,
    runs_dir: RunsOpt = Path("runs"), out: OutOpt = None, device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto", threads: ThreadsOpt = None, max_memory: MaxMemoryOpt = None,
) -> None:
    """Context heads and memory heads: each head's causal effect on the context's answer.

    For every (layer, head), the change in log p(cf) - log p(parametric) at the answer position
    when the head's output is zeroed, replaced by its mean, or its attention to the context is
    blocked; 95% bootstrap intervals over items.
    """
    from knowflow.data.prompts import format_note
    from knowflow.evaluation.items import load_suites
    from knowflow.lens.load import check_device, check_model
    from knowflow.probes import HeadsConfig
    from knowflow.store.outputs import check_out_dir

    common = _common(model, data, suite, limit, runs_dir, out, device, dtype, threads,
                     model_source(revision, trust_remote_code, offline))
    cfg = _config(HeadsConfig, {"ablations": tuple(ablation) if ablation else None,
                                "rank_by": rank_by, "prompt_format": prompt_format,
                                "seed": seed, "max_memory": max_memory}, set_)
    check_threads(threads)
    if limit is not None and limit < 1:
        raise KnowflowError(f"--limit: must be at least 1, got {limit}")
    check_device(device)
    if data is None:
        check_suites(suite)
    by_suite = load_suites(None if data else suite, data, limit, seed)
    items = [it for its in by_suite.values() for it in its]
    check_out_dir(out or runs_dir, what="output folder")
    check_model(model, common.source)
    loaded = _load_model(common)
    result = _write("heads", common, cfg, *loaded, items,
                    f"file:{data}" if data else f"suite:{suite}")
    run_dir, summary = result.out_dir, result.summary
    n = summary["n_examples"]
    _heads_table(f"context heads ({n} items; removing them lowers log p(cf) - log p(par); "
                 f"{cfg.rank_by} ablation)", summary["context_heads"])
    _heads_table("memory heads (removing them raises it)", summary["memory_heads"])
    half = summary.get("half_effect_heads", {})
    console.print(f"heads carrying half of the total effect: context {half.get('context')}, "
                  f"memory {half.get('memory')}", highlight=False)
    used = result.config["config"]["prompt_format"]
    console.print(format_note(cfg.prompt_format, used), highlight=False)
    _done(run_dir)


def head_project_cmd(
    model: ModelOpt = "smollm2-135m-instruct", revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False, offline: OfflineOpt = False,
    data: DataOpt = None, suite: SuiteOpt = None,
    limit: LimitOpt = None, all_: AllOpt = False, set_: SetOpt = None,
    runs_dir: RunsOpt = Path("runs"), out: OutOpt = None, device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto", threads: ThreadsOpt = None,
) -> None:
    """Vocabulary projection of each attention head: head-level attribute extraction.

    Per head, the share of known facts whose top projected token (the head's output at the
    last position through its slice of o_proj, the final norm and the unembedding) is the
    model's prediction, next to the whole attention sublayer's share.
    """
    from knowflow.probes import HeadProjectionConfig

    common = _common(model, data, suite, limit, runs_dir, out, device, dtype, threads,
                     model_source(revision, trust_remote_code, offline))
    cfg = _config(HeadProjectionConfig, {"known_only": not all_}, set_)
    _validate_data(common)
    loaded = _load_model(common)
    examples = _examples(common, loaded[1], with_context=False)
    result = _write("head-project", common, cfg, *loaded, examples,
                    str(data) if data else (f"suite:{suite}" if suite else "builtin:known_facts"))
    run_dir, summary = result.out_dir, result.summary
    table = Table(title=f"head extraction rate ({summary['n_examples']} facts): best heads vs "
                        "the whole attention sublayer of their layer")
    for name in ("layer", "head", "head rate", "sublayer rate"):
        table.add_column(name, justify="right")
    for c in summary["best_heads"]:
        table.add_row(str(c["layer"]), str(c["head"]), f"{c['rate']:.2f}",
                      f"{summary['attn_rate'][c['layer']]:.2f}")
    console.print(table)
    peak = summary.get("peak_attn_extraction")
    if peak:
        console.print(f"whole-sublayer peak: layer {peak['layer']}, {peak['rate']:.2f}",
                      highlight=False)
    _done(run_dir)
