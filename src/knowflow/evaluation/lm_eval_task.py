"""lm-evaluation-harness interop: knowflow suites as lm-eval tasks, and lm-eval's samples back.

`export_lm_eval` writes, per suite, `knowflow_<suite>.yaml` and `knowflow_<suite>.jsonl` (one
document per item: the prompt exactly as knowflow renders it, and the two candidate answers as
knowflow scores them, `answer_prefix + answer`), plus one small loader module the YAML files
name with `!function`, so the folder runs offline and can be moved:

    lm_eval --model hf --model_args pretrained=MODEL --include_path DIR \
            --tasks knowflow_cf-capitals --log_samples --output_path OUT

Each task is `multiple_choice` with `target_delimiter: ""`: lm-eval scores exactly the
continuations knowflow scores, after exactly the prompt knowflow builds. The choices are
(memorized answer, context answer) with the context answer as the target, so lm-eval's `acc`
is knowflow's log-likelihood counterfactual accuracy, ties included (lm-eval's argmax takes the
first choice on a tie; knowflow counts a tie for neither answer).

`read_lm_eval_samples` turns lm-eval's `--log_samples` files for such tasks back into knowflow
records, so `knowflow eval --from-lm-eval` reports knowflow's metrics (counterfactual and
parametric accuracy, memorization ratio, bootstrap intervals) from lm-eval's log-likelihoods.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from knowflow.config import option
from knowflow.data.facts import ConflictItem
from knowflow.data.loaders import json_records
from knowflow.data.options import SuiteData
from knowflow.data.prompts import FORMAT_HELP, FORMATS, PromptConfig, render, resolve_format
from knowflow.errors import ConfigError, DataError
from knowflow.evaluation.items import choice, load_suites
from knowflow.evaluation.metrics import memorization_ratio
from knowflow.evaluation.normalize import primary
from knowflow.lens.hub import ModelName
from knowflow.lens.load import load_tokenizer
from knowflow.store.files import atomic_write_jsonl, atomic_write_text
from knowflow.store.outputs import check_out_dir
from knowflow.store.schemas import LmEvalSample, check
from knowflow.store.staging import staged_dir

TASK_PREFIX = "knowflow_"
LOADER = "knowflow_lmeval_loader"

_LOADER_SOURCE = '''"""A knowflow task's documents for lm-eval (by `knowflow export lm-eval`)."""

import json
from pathlib import Path


def load(data_file, **_):
    import datasets

    path = Path(__file__).parent / data_file
    with path.open(encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})
'''

_YAML = """# Written by `knowflow export lm-eval`: {n} items of knowflow's {suite!r} suite,
# prompts in knowflow's {fmt!r} format. Run: lm_eval --include_path {folder} --tasks {task}
task: {task}
custom_dataset: !function {loader}.load
dataset_kwargs:
  data_file: {data_file}
test_split: test
output_type: multiple_choice
doc_to_text: prompt
doc_to_choice: choices
doc_to_target: gold
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def task_name(suite: str) -> str:
    """The lm-eval task name of a suite (characters lm-eval dislikes become '_')."""
    return TASK_PREFIX + re.sub(r"[^A-Za-z0-9_-]", "_", suite)


def check_task_names(suites: Sequence[str]) -> None:
    """Each suite gets a task name of its own (`my data` and `my_data` would share one)."""
    names: dict[str, str] = {}
    for suite in suites:
        task = task_name(suite)
        if task in names:
            raise ConfigError(f"{names[task]!r} and {suite!r} both export as task {task!r}",
                              "data", "rename one of the files")
        names[task] = suite


def task_docs(items: Sequence[ConflictItem], tokenizer, prompt_format: str) -> list[dict]:
    """One lm-eval document per item: knowflow's prompt and its two scored continuations."""
    pcfg = PromptConfig(prompt_format)
    docs = []
    for it in items:
        p = render(it, tokenizer, pcfg)
        docs.append({**it.to_dict(), "meta": json.dumps(it.meta), "prompt": p.text,
                     "choices": [p.answer_prefix + primary(it.parametric_answer),
                                 p.answer_prefix + primary(it.counterfactual_answer)],
                     "gold": 1, "prompt_format": prompt_format})
    return docs


def export_lm_eval(by_suite: dict[str, list[ConflictItem]], tokenizer, out_dir: str | Path,
                   prompt_format: str = "auto") -> dict[str, Path]:
    """Write one lm-eval task per suite into `out_dir`; returns {task name: YAML path}.
    "auto" resolves by `tokenizer` (chat with a template, else plain; no tokenizer: plain)."""
    if prompt_format == "auto":
        prompt_format = resolve_format("auto", tokenizer)
    out = Path(out_dir)
    check_task_names(by_suite)
    _check_not_users(out, [task_name(suite) for suite in by_suite])
    tasks: dict[str, Path] = {}
    with staged_dir(out) as stage:  # the folder gets all its files, or none
        atomic_write_text(stage / f"{LOADER}.py", _LOADER_SOURCE)
        for suite, items in by_suite.items():
            task = task_name(suite)
            atomic_write_jsonl(stage / f"{task}.jsonl",
                               task_docs(items, tokenizer, prompt_format))
            atomic_write_text(stage / f"{task}.yaml", _YAML.format(
                n=len(items), suite=suite, fmt=prompt_format, folder=out, task=task,
                loader=LOADER, data_file=f"{task}.jsonl"))
            tasks[task] = out / f"{task}.yaml"
    return tasks


@dataclass(frozen=True)
class ExportConfig:
    """`knowflow export lm-eval`: where the tasks go and how their items are drawn and
    rendered."""

    out: Path = option(help="Task folder to write (lm_eval --include_path).")
    prompt_format: str = option("auto", FORMAT_HELP + " chat and auto render with --model's "
                                "chat template (only its tokenizer loads).", one_of=FORMATS)
    limit: int | None = option(None, "Items per suite (seeded sample).", ge=1)
    seed: int = option(0, "Seed for suites and sampling.")


def export_tasks(data: SuiteData, cfg: ExportConfig, model: ModelName | None = None
                 ) -> tuple[dict[str, Path], dict[str, list[ConflictItem]], str]:
    """`knowflow export lm-eval`: the task folder checked, the suites and files read (their
    task names checked), then the tokenizer of `model` loaded where the format needs its chat
    template, and the tasks written: ({task: YAML path}, the items by suite, the format)."""
    check_out_dir(cfg.out, what="task folder")
    by_suite = load_suites(data.suite, list(data.data), cfg.limit, cfg.seed,
                           fields=data.table.mapping, preset=data.table.preset)
    check_task_names(list(by_suite))  # before the tokenizer loads
    tokenizer = None
    if cfg.prompt_format in ("chat", "auto"):  # auto: chat when the tokenizer has a template
        model = model or ModelName()
        tokenizer = load_tokenizer(model.model, model.source)
    used = resolve_format(cfg.prompt_format, tokenizer)  # chat without a template: refused
    return export_lm_eval(by_suite, tokenizer, cfg.out, used), by_suite, used


def _ours(path: Path) -> bool:
    """Whether `path` is a file an earlier `knowflow export lm-eval` wrote (a re-export may
    replace it): the loader by its first line, a task YAML by its header, a task's documents
    when their YAML is ours."""
    try:
        if path.name == f"{LOADER}.py":
            return path.read_text(encoding="utf-8").startswith(_LOADER_SOURCE.splitlines()[0])
        if path.suffix == ".yaml":
            return path.read_text(encoding="utf-8").startswith(_YAML.splitlines()[0][:30])
    except (OSError, UnicodeDecodeError):
        return False
    return path.suffix == ".jsonl" and _ours(path.with_suffix(".yaml"))


def _check_not_users(out: Path, tasks: list[str]) -> None:
    """Refuse before writing when a file the export would write exists and is not one an
    earlier export wrote (the user's own file of that name would be replaced)."""
    names = [f"{LOADER}.py", *(f"{t}{ext}" for t in tasks for ext in (".yaml", ".jsonl"))]
    for name in names:
        path = out / name
        if path.exists() and not _ours(path):
            raise DataError(path, "exists and was not written by knowflow export lm-eval; the "
                            "export would replace it", hint="give another --out folder, or "
                            "move that file")


def _logliks(path: Path, line: int, sample: dict) -> tuple[float, float]:
    """(memorized, context) log-likelihoods of one lm-eval sample."""
    resps = sample.get("filtered_resps", sample.get("resps"))
    try:
        values = [r[0] if isinstance(r, (list, tuple)) else r for r in resps]
        if values and isinstance(values[0], (list, tuple)):  # unfiltered: [[ll, greedy]]
            values = [v[0] for v in values]
        par, cf = (float(v) for v in values)
    except (TypeError, ValueError, IndexError):
        raise DataError(path, "expected two [loglikelihood, is_greedy] responses", line=line,
                        field="filtered_resps") from None
    return par, cf


def read_lm_eval_samples(path: str | Path) -> tuple[str, list[dict]]:
    """(suite, knowflow records) from an lm-eval `--log_samples` file of an exported task."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "no such file", hint="give a samples_knowflow_<suite>_*.jsonl "
                        "file from lm_eval --log_samples")
    records, suites = [], set()
    for line, sample in json_records(path):
        doc = sample.get("doc") if isinstance(sample, dict) else None
        if not isinstance(doc, dict) or "counterfactual_answer" not in doc or \
                "choices" not in doc:
            raise DataError(path, "not a sample of a task written by knowflow export lm-eval",
                            line=line, field="doc")
        check(LmEvalSample, sample, path, line=line, hint="give the samples file lm-eval "
              "logged for a task `knowflow export lm-eval` wrote, unedited")
        par, cf = _logliks(path, line, sample)
        suites.add(doc["suite"])
        rec = {k: v for k, v in doc.items() if k not in ("choices", "gold", "meta")}
        rec.update(context_shown=True, lm_eval_doc_id=sample.get("doc_id"),
                   lm_eval_acc=sample.get("acc"),
                   loglik={"counterfactual_logprob": cf, "parametric_logprob": par,
                           "choice": choice(cf, par),
                           "memorization_ratio": memorization_ratio(par, cf)})
        records.append(rec)
    if not records:
        raise DataError(path, "no records")
    if len(suites) > 1:
        raise DataError(path, f"samples of several suites ({', '.join(sorted(suites))})")
    return suites.pop(), records
