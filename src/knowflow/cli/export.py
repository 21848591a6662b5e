"""`knowflow export`: knowflow's suites in other tools' formats (lm-evaluation-harness)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from knowflow.cli.common import (
    OfflineOpt,
    RevisionOpt,
    TrustRemoteCodeOpt,
    check_suites,
    console,
    model_source,
)
from knowflow.cli.errors import guard

export_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Export knowflow suites for other tools.")


@export_app.command("lm-eval")
@guard
def lm_eval_cmd(
    out: Annotated[Path, typer.Option(help="Task folder to write (lm_eval --include_path).")],
    suite: Annotated[str | None, typer.Option(
        help="Built-in suites, comma-separated (default: every built-in suite unless --data is "
             "given)."
    )] = None,
    data: Annotated[list[Path] | None, typer.Option(
        help="External file, save_to_disk folder or hub dataset (hf:ORG/NAME), as for "
             "`knowflow eval` (repeatable).")
    ] = None,
    fields: Annotated[str | None, typer.Option(
        help="--data column mapping: context=COL,question=COL,answer=COL,memory_answer=COL."
    )] = None,
    preset: Annotated[str | None, typer.Option(
        help="--data layout: nq-swap, conflictqa, memotrap or clasheval (default: recognised)."
    )] = None,
    prompt_format: Annotated[str, typer.Option(
        help="auto (chat if the tokenizer has a chat template, else plain), chat (the "
             "model's template), alpaca, tulu or plain.")] = "auto",
    model: Annotated[str, typer.Option(
        help="Whose chat template renders --prompt-format chat or auto (only its tokenizer "
             "loads).")
    ] = "smollm2-135m-instruct",
    revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    offline: OfflineOpt = False,
    limit: Annotated[int | None, typer.Option(help="Items per suite (seeded sample).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for suites and sampling.")] = 0,
) -> None:
    """Write lm-eval tasks (YAML + data) that score each suite as knowflow's loglik does."""
    from knowflow.data.prompts import format_note, resolve_format
    from knowflow.data.tables import parse_fields
    from knowflow.evaluation.items import load_suites
    from knowflow.evaluation.lm_eval_task import check_task_names, export_lm_eval
    from knowflow.evaluation.options import EvalConfig
    from knowflow.store.outputs import check_out_dir

    mapping = parse_fields(fields)
    source = model_source(revision, trust_remote_code, offline)
    EvalConfig(prompt_format=prompt_format, limit=limit, seed=seed).validate()
    check_suites(suite)
    check_out_dir(out, what="task folder")
    by_suite = load_suites(suite, data, limit, seed, fields=mapping, preset=preset)
    check_task_names(list(by_suite))  # before the tokenizer loads
    tokenizer = None
    if prompt_format in ("chat", "auto"):  # auto: chat when the tokenizer has a template
        from knowflow.lens.load import load_tokenizer

        tokenizer = load_tokenizer(model, source)  # checked and resolved as load_model does
    used = resolve_format(prompt_format, tokenizer)  # chat without a template: refused
    tasks = export_lm_eval(by_suite, tokenizer, out, used)
    for (task, path), items in zip(tasks.items(), by_suite.values(), strict=True):
        console.print(f"{task}: {len(items)} items -> {path}", highlight=False)
    console.print(format_note(prompt_format, used), highlight=False)
    console.print(f"run: lm_eval --model hf --model_args pretrained=MODEL --include_path {out} "
                  f"--tasks {','.join(tasks)} --log_samples --output_path OUT", highlight=False)
    console.print("then: knowflow eval --from-lm-eval OUT/<model>/samples_<task>_<time>.jsonl",
                  highlight=False)
