"""The Python API: one shape for every entry point, one Result, and the run folders the CLI
writes.

    result = f(model, data=None, *, config=None, **overrides)

`model` is a name or path for `load_model` ("smollm2-135m-instruct", an HF id, a local
folder) or a loaded model (pass its `tokenizer=`); `data` is a built-in suite name, a file
path, or items already in memory (None: the entry point's built-in default); `config` is the
entry point's frozen config (`EvalConfig`, `KnockoutConfig`, ..., `CurateConfig`,
`AugmentConfig`, `SFTJobConfig`) and `overrides` set its fields. `augment` needs no model
(`augment(data, ...)`), nor does `run_experiment(name, ...)`: an experiment builds its own.
A named model loads as transformers loads it (`knowflow.lens.hub`): `revision=` (a hub id's
branch, tag or commit), `trust_remote_code=` (False unless given) and `offline=` (the Hugging
Face cache only) go with it, in every entry point that takes a model (`finetune`: as
`SFTJobConfig` fields). Every keyword is named as the command's option is (`out=` for
`--out`, `runs_dir=` for `--runs-dir`, a config field for its option).

Every entry point returns a `knowflow.store.result.Result`: records, summary and config, with
`.save(dir)` (the run folder `knowflow <command>` writes: config.json, the records,
summary.json, figures/, report.html), `Result.load(dir)` and `.to_pandas()`, one row per
record. `evaluate`, `probe` and `explain` also take `out=` (or `runs_dir=`): the folder is then
written (config.json first, removed if the run is refused) and finished with its figures and
report, as the CLI does; `curate` and `augment` take `out=`, the file they write. Each entry
point checks what the command checks, in the same order, before the model loads: its files,
its output folder or files, the model's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowflow.config import config_to_dict, resolve_config
from knowflow.data.facts import Instruction
from knowflow.data.instruction_rows import (
    BUILTIN,
    check_rows_out,
    instruction_rows,
    load_instructions,
    save_instructions,
)
from knowflow.data.prompts import resolve_format
from knowflow.data.tables import parse_fields
from knowflow.errors import ConfigError, KnowflowError
from knowflow.evaluation.run import EvalResult
from knowflow.evaluation.run import evaluate as evaluate_model
from knowflow.evaluation.run import from_lm_eval as read_samples
from knowflow.experiments.runner import run_experiment as run_registered
from knowflow.explanation.estimator import check_estimator
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.run import explain as explain_answers
from knowflow.explanation.run import load_explain_items
from knowflow.lens.checks import check_loaded
from knowflow.lens.hub import ModelSource
from knowflow.lens.load import check_model, resolve_model
from knowflow.probes import PROBES
from knowflow.probes.run import (
    check_probe_data,
    probe_examples,
    probe_inputs,
    probe_label,
    run_probe,
)
from knowflow.report.curation import curation_figure
from knowflow.report.finish import finish_eval, finish_probe
from knowflow.report.html import load_run, write_report
from knowflow.report.tracker_run import read_tracker_records, tracker_figure
from knowflow.store.checks import check_run_folders
from knowflow.store.files import atomic_write_jsonl, file_group
from knowflow.store.identity import CONFIG
from knowflow.store.outputs import check_out_dir, check_out_files
from knowflow.store.result import Result
from knowflow.store.run_folder import Progress, RunFolder
from knowflow.train.augment import AugmentConfig
from knowflow.train.augment import augment as augment_rows
from knowflow.train.criticality import CurateConfig, curate_examples

RENAMED_KEYWORDS = {"out_dir": "out", "runs_root": "runs_dir"}  # earlier versions' keywords


def _refuse_renamed(keywords) -> None:
    """A keyword an entry point has renamed is one line naming the new one."""
    for old in keywords:
        if old in RENAMED_KEYWORDS:
            new = RENAMED_KEYWORDS[old]
            raise ConfigError(f"the keyword {old}= is renamed to {new}=",
                              hint=f"pass {new}= instead")


def _source(revision: str | None, trust_remote_code: bool, offline: bool) -> ModelSource:
    """How a named model loads (checked: a bad revision is one line)."""
    source = ModelSource(revision, trust_remote_code, offline)
    source.validate()
    return source


def _check_model(model, source: ModelSource) -> None:
    """A named model can be loaded (`lens.load.check_model`: config files only)."""
    if isinstance(model, (str, Path)):
        check_model(str(model), source)


def _files(data) -> list[Path]:
    """The paths among `data` (a path, or a list holding paths): an output never holds them."""
    given = data if isinstance(data, (list, tuple)) else [data]
    return [Path(d) for d in given if isinstance(d, (str, Path))]


def _check_args(model=None, tokenizer=None, data=None, **texts) -> None:
    """The entry points' arguments, checked before any work with the messages the CLI gives
    for its options (one `ConfigError` naming the argument): a model is a name, a folder or a
    loaded model with its tokenizer (`lens.checks.check_loaded`); data a suite name, a path or
    a list (its items are read by the loaders, which name what is wrong); `texts` (a question,
    an answer) strings or None."""
    if model is not None and not isinstance(model, (str, Path)):
        check_loaded(model, tokenizer)
    if data is not None and not isinstance(data, (str, Path, list, tuple)):
        raise ConfigError(f"expected a suite name, a file path or a list of items, got "
                          f"{type(data).__name__} {data!r:.60}", "data")
    for name, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"expected text, got {type(value).__name__} {value!r:.60}", name)


def _fields(fields) -> dict[str, str] | None:
    """`fields=` as a dict, or as `--fields`' text (read by the CLI's parser)."""
    if fields is None or isinstance(fields, dict):
        return fields
    if isinstance(fields, str):
        return parse_fields(fields)
    raise ConfigError(f"expected a dict of field names to columns (or 'field=COL,...'), got "
                      f"{type(fields).__name__}", "fields")


# ---- evaluate ----------------------------------------------------------------------------

def evaluate(model="smollm2-135m-instruct", data=None, *, config=None, tokenizer=None,
             device: str = "auto", dtype: str = "auto", out: str | Path | None = None,
             runs_dir: str | Path | None = None, progress: Progress | None = None,
             fields: dict[str, str] | None = None, preset: str | None = None,
             revision: str | None = None, trust_remote_code: bool = False,
             offline: bool = False, **overrides) -> EvalResult:
    """Knowledge-conflict evaluation (`knowflow eval`). `data`: suite names (a list, or one
    comma-separated string), data files, hub datasets (`"hf:ORG/NAME[:CONFIG][@SPLIT]"`), or
    `ConflictItem`s; None: the four built-in suites. `fields` maps the files' columns,
    `preset` names their published layout (`knowflow.data.presets`; else recognised).
    With `out`/`runs_dir` the run folder is written and finished as the CLI's is; it and the
    model are checked before any data is read."""
    _refuse_renamed(overrides)
    _check_args(model, tokenizer, data)
    source = _source(revision, trust_remote_code, offline)
    if out is not None or runs_dir is not None:
        check_out_dir(out or Path(runs_dir) / "eval", "eval" if out is not None else None,
                      inputs=_files(data))
    _check_model(model, source)
    return evaluate_model(model, data, tokenizer=tokenizer, config=config, device=device,
                          dtype=dtype, out_dir=out, runs_dir=runs_dir, progress=progress,
                          fields=_fields(fields), preset=preset, source=source,
                          finish=finish_eval, **overrides)


def from_lm_eval(samples: Sequence[str | Path], *, out: str | Path | None = None,
                 runs_dir: str | Path | None = None, seed: int = 0) -> EvalResult:
    """knowflow's metrics from lm-eval `--log_samples` files of tasks `knowflow export
    lm-eval` wrote (`knowflow eval --from-lm-eval`); no model runs."""
    if out is not None or runs_dir is not None:
        check_out_dir(out or Path(runs_dir) / "eval", "eval" if out is not None else None,
                      inputs=list(samples))
    return read_samples(samples, out_dir=out, runs_dir=runs_dir, seed=seed, finish=finish_eval)


# ---- explain ----------------------------------------------------------------------------

def explain(model="smollm2-135m-instruct", data="", question: str | None = None,
            answer: str | None = None, *, config=None, tokenizer=None,
            fields: dict[str, str] | None = None, preset: str | None = None,
            device: str = "auto", dtype: str = "auto", out: str | Path | None = None,
            runs_dir: str | Path | None = None, progress: Progress | None = None,
            revision: str | None = None, trust_remote_code: bool = False,
            offline: bool = False, **overrides) -> Result:
    """Where answers come from (`knowflow explain`): with `question`, `data` is one context
    and `answer` the answer to explain (default: the model's own); otherwise `data` is a suite
    name, a data file or `ConflictItem`s. With `out`/`runs_dir` the run folder is written
    (`Result.save`). A named model is loaded only once the items, the output folder, the
    learned estimator (`attribution="learned"`) and the model itself are checked. See
    `knowflow.explanation.run.explain` for the rest."""
    _refuse_renamed(overrides)
    _check_args(model, tokenizer, data, question=question, answer=answer)
    source = _source(revision, trust_remote_code, offline)
    cfg = resolve_config(ExplainConfig, config, overrides)
    fields = _fields(fields)
    if isinstance(model, (str, Path)):  # bad input before the model loads
        load_explain_items(data, question, cfg, fields, preset)
        if out is not None or runs_dir is not None:
            check_out_dir(out or Path(runs_dir) / "explain", what="output folder")
        check_estimator(str(model), cfg)
        _check_model(model, source)
    result = explain_answers(model, data, question, answer, tokenizer=tokenizer, config=cfg,
                             fields=fields, preset=preset, device=device, dtype=dtype,
                             progress=progress, source=source)
    if out is not None or runs_dir is not None:
        result.save(out, runs_dir=runs_dir or "runs")
    return result


# ---- probe ------------------------------------------------------------------------------

def probe(model="smollm2-135m-instruct", data=None, *, config=None, kind: str | None = None,
          tokenizer=None, device: str = "auto", dtype: str = "auto", limit: int | None = None,
          prompt_format: str | None = None, out: str | Path | None = None,
          runs_dir: str | Path | None = None, progress: Progress | None = None,
          revision: str | None = None, trust_remote_code: bool = False, offline: bool = False,
          **overrides) -> Result:
    """Run one mechanistic probe (`knowflow probe <kind>`): `kind`, or the one whose config
    `config` is (default: knockout); `overrides` set its fields. `data`: a built-in suite
    name, a prompts file or examples (conflict items for `heads`: suites, default
    cf-capitals, or a file); None: knowflow's shipped well-known facts. `prompt_format` is
    the config's own where it has one (heads, attention). One record per example (per layer,
    source or head, as the probe measures). With `out`/`runs_dir` the run folder is written
    and finished; the data, the folder and the model are checked before the model loads."""
    _refuse_renamed(overrides)
    if kind is None:
        kind = next((k for k, (_, cls, _) in PROBES.items() if isinstance(config, cls)),
                    "knockout")
    if kind not in PROBES:
        raise ConfigError(f"unknown probe {kind!r} (known: {', '.join(PROBES)})")
    _check_args(model, tokenizer, data)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ConfigError(f"must be at least 1, got {limit!r}", "limit")
    cls = PROBES[kind][1]
    if prompt_format is not None and "prompt_format" in cls.__dataclass_fields__:
        overrides = {"prompt_format": prompt_format, **overrides}
    cfg = resolve_config(cls, config, overrides)
    source = _source(revision, trust_remote_code, offline)
    check_probe_data(kind, data)
    inputs = probe_inputs(kind, data, limit, getattr(cfg, "seed", 0))  # before the model
    if out is not None or runs_dir is not None:
        check_out_dir(out or runs_dir, f"probe-{kind}" if out is not None else None,
                      inputs=_files(data))
    _check_model(model, source)
    model, tokenizer, name = resolve_model(model, tokenizer, device=device, dtype=dtype,
                                           source=source)
    examples = probe_examples(kind, inputs, tokenizer, limit,
                              getattr(cfg, "prompt_format", prompt_format or "plain"))
    return run_probe(kind, model, tokenizer, examples, cfg, name, probe_label(kind, data), out,
                     runs_dir, progress, finish=finish_probe)


# ---- curate and augment -----------------------------------------------------------------

@dataclass(repr=False)
class CurateResult(Result):
    """`curate`'s Result: every row's scores (`loss_with_context`, `loss_without_context`,
    `criticality`, `dropped`) as records, and the rows kept (to finetune on)."""

    command: str = "curate"
    kept: list[Instruction] = field(default_factory=list)

    @property
    def cutoff(self) -> float | None:
        """The lowest score kept, when any row was dropped."""
        return self.summary.get("cutoff")

    def write(self, out: str | Path) -> tuple[Path, Path, Path]:
        """`knowflow curate --out OUT`'s files: OUT (the kept rows, JSONL), OUT.scores.jsonl
        and OUT.png (the score histogram with the cutoff)."""
        out = Path(out)
        check_out_files({"kept rows": out, "scores": out.with_suffix(".scores.jsonl"),
                         "figure": out.with_suffix(".png")}, inputs=self.inputs)
        with file_group():  # the three files appear together, or none does
            save_instructions(out, self.kept)
            scores = atomic_write_jsonl(out.with_suffix(".scores.jsonl"), self.records)
            figure = curation_figure(self.records, self.config["by"], self.cutoff,
                                     out.with_suffix(".png"))
        return out, scores, figure

    def _write(self, run: RunFolder) -> None:
        """curated.scores.jsonl (the records), curated.jsonl (the rows kept), curated.png."""
        run.write_records("curated.jsonl", [r.to_dict() for r in self.kept])
        super()._write(run)
        curation_figure(self.records, self.config["by"], self.cutoff,
                        run.path / "curated.png")

    @classmethod
    def _read_rest(cls, run_dir: Path) -> dict:
        kept = run_dir / "curated.jsonl"
        return {"kept": load_instructions(kept) if kept.exists() else []}


def _cutoff(scores: list[dict], cfg: CurateConfig, n_kept: int) -> float | None:
    key = "loss_without_context" if cfg.by == "no_context_loss" else "criticality"
    kept = [s[key] for s in scores if not s["dropped"]]
    return min(kept) if kept and n_kept < len(scores) else None


def curate(model="smollm2-135m-instruct", data=BUILTIN, *, config=None, tokenizer=None,
           device: str = "auto", dtype: str = "auto", out: str | Path | None = None,
           progress: Progress | None = None, revision: str | None = None,
           trust_remote_code: bool = False, offline: bool = False,
           **overrides) -> CurateResult:
    """Score every instruction row's context-criticality with `model` and drop the least
    critical share (`knowflow curate`). `data`: an instruction file, "builtin" (the mixture of
    `seed`), or rows in Alpaca form (the context is their `input`). With `out`, the files
    `CurateResult.write` writes (checked before the model loads)."""
    _refuse_renamed(overrides)
    cfg = resolve_config(CurateConfig, config, overrides)
    _check_args(model, tokenizer, data)
    source = _source(revision, trust_remote_code, offline)
    if out is not None:
        check_rows_out(data, out, (("scores", ".scores.jsonl"), ("histogram", ".png")))
    _check_model(model, source)
    rows = instruction_rows(data, cfg.seed)
    if any(r.messages for r in rows):
        raise KnowflowError(f"{data if isinstance(data, (str, Path)) else 'rows'}: curation "
                            "needs Alpaca-form rows (the context is their 'input'); chat "
                            "'messages' rows have no separate context",
                            "convert them to instruction/input/output rows")
    model, tokenizer, _ = resolve_model(model, tokenizer, device=device, dtype=dtype,
                                        source=source)
    cfg = dataclasses.replace(cfg, prompt_format=resolve_format(cfg.prompt_format, tokenizer))
    kept, scores = curate_examples(model, tokenizer, rows, cfg, progress)
    summary = {"n_rows": len(rows), "n_kept": len(kept),
               "cutoff": _cutoff(scores, cfg, len(kept))}
    result = CurateResult(scores, summary, config_to_dict(cfg), kept=kept,
                          inputs=_input_paths(data))
    if out is not None:
        result.write(out)
    return result


def augment(data=BUILTIN, *, config=None, out: str | Path | None = None, **overrides
            ) -> Result:
    """`data` plus entity-substituted counterfactual copies (`knowflow augment`): context and
    answer changed together. No model: `data` is an instruction file, "builtin", or rows. One
    record per row, as the JSONL file holds it (the copies carry `augmented`); with `out`,
    that file is written (checked before any work)."""
    _refuse_renamed(overrides)
    cfg = resolve_config(AugmentConfig, config, overrides)
    _check_args(data=data)
    if out is not None:
        check_rows_out(data, out)
    rows = instruction_rows(data, cfg.seed)
    added = augment_rows(rows, cfg.ratio, cfg.seed)
    summary = {"n_rows": len(rows),
               "n_added": sum(bool(r.extra.get("augmented")) for r in added)}
    result = Result([r.to_dict() for r in added], summary, config_to_dict(cfg), "augment",
                    inputs=_input_paths(data))
    if out is not None:
        atomic_write_jsonl(out, result.records)  # the rows, as an instruction file holds them
    return result


def _input_paths(data) -> tuple[Path, ...]:
    """The file `data` names, when it is one: `.save()` and `.write()` never write over it."""
    return (Path(data),) if isinstance(data, str | Path) and Path(data).exists() else ()


# ---- report -----------------------------------------------------------------------------

def report_runs(run_dirs: Sequence[str | Path], *, out: str | Path | None = None
           ) -> tuple[Path, dict[Path, str]]:
    """One self-contained report.html of `run_dirs` (`knowflow report`; default: RUN_DIR/
    report.html for one run, ./report.html for many). A folder a RelianceTracker wrote
    (metrics.jsonl, no config.json) gets its curves drawn first. Every folder and the page's
    path are checked before anything is written. Returns (the page, {folder: what it ran on
    (where it says) and its verdict, as the page's first lines give them})."""
    run_dirs = [Path(d) for d in run_dirs]
    target = Path(out) if out is not None else \
        (run_dirs[0] / "report.html" if len(run_dirs) == 1 else Path("report.html"))
    trackers = [d for d in run_dirs if d.is_dir() and not (d / CONFIG).exists()]
    check_run_folders([d for d in run_dirs if d not in trackers])
    records = {d: read_tracker_records(d) for d in trackers}  # every folder checked first
    check_out_files({"report": target})
    for folder, recs in records.items():
        tracker_figure(folder, recs)
    page = write_report(run_dirs, target)
    views = [load_run(d) for d in run_dirs]
    return page, {d: (f"({v.about}) " if v.about else "") + v.verdict
                  for d, v in zip(run_dirs, views, strict=True)}


# ---- finetune ---------------------------------------------------------------------------

def finetune(model=None, data=None, *, config=None, runs_dir: str | Path = "runs",
             resume: bool | str | Path = False, progress: Progress | None = None,
             **overrides) -> Result:
    """Finetune `model` on instruction `data` while tracking context reliance (`knowflow
    sft`); the run folder goes to runs_dir/sft/<timestamp>/. `model` is a name or path (the
    job loads it; a loaded model trains with `knowflow.train.sft.train_model`), `data` an
    instruction file or "builtin"; None: `config`'s. `config` is an `SFTJobConfig`; overrides
    set its fields (sections as dicts: `sft={"steps": 5}`). One record per tracked step."""
    _refuse_renamed(overrides)
    if model is not None and not isinstance(model, (str, Path)):
        raise ConfigError("finetune loads its model by name or path", "model",
                          "save the model with save_pretrained and pass the folder, or train "
                          "it with knowflow.train.sft.train_model")
    if data is not None and not isinstance(data, (str, Path)):
        raise ConfigError(f"expected an instruction file or 'builtin', got "
                          f"{type(data).__name__} {data!r:.60}", "data")
    given = {k: str(v) for k, v in (("model", model), ("data", data)) if v is not None}
    return run_registered("sft", config=config, runs_dir=runs_dir, resume=resume,
                          progress=progress, **given, **overrides)


def run_experiment(name: str, overrides: list[str] | dict | None = None, *, config=None,
                   runs_dir: str | Path = "runs", resume: bool | str | Path = False,
                   progress: Progress | None = None, **fields) -> Result:
    """Run the registered experiment `name` (`knowflow run`; see
    `knowflow.experiments.runner.run_experiment`)."""
    _refuse_renamed(fields)
    return run_registered(name, overrides, config=config, runs_dir=runs_dir, resume=resume,
                          progress=progress, **fields)


__all__ = ["CurateResult", "EvalResult", "Result", "augment", "curate", "evaluate", "explain",
           "finetune", "from_lm_eval", "probe", "report_runs", "run_experiment"]
