"""`knowflow export`: knowflow's suites in other tools' formats (lm-evaluation-harness)."""

from __future__ import annotations

from knowflow.cli.common import console
from knowflow.cli.flags import command


def _sections() -> dict[str, type]:
    from knowflow.data.options import SuiteData
    from knowflow.evaluation.lm_eval_task import ExportConfig
    from knowflow.lens.hub import ModelName

    return {"data": SuiteData, "cfg": ExportConfig, "model": ModelName}


@command(_sections, job="cfg")
def lm_eval_cmd(data, cfg, model) -> None:
    """Write lm-eval tasks (YAML + data) that score each suite as knowflow's loglik does."""
    from knowflow.data.prompts import format_note
    from knowflow.evaluation.lm_eval_task import export_tasks

    tasks, by_suite, used = export_tasks(data, cfg, model)
    for (task, path), items in zip(tasks.items(), by_suite.values(), strict=True):
        console.print(f"{task}: {len(items)} items -> {path}", highlight=False)
    console.print(format_note(cfg.prompt_format, used), highlight=False)
    console.print(f"run: lm_eval --model hf --model_args pretrained=MODEL --include_path "
                  f"{cfg.out} --tasks {','.join(tasks)} --log_samples --output_path OUT",
                  highlight=False)
    console.print("then: knowflow eval --from-lm-eval OUT/<model>/samples_<task>_<time>.jsonl",
                  highlight=False)
