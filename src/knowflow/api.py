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
`SFTJobConfig` fields).

Every entry point returns a `knowflow.store.result.Result`: records, summary and config, with
`.save(dir)` (the run folder `knowflow <command>` writes: config.json, the records,
summary.json, figures/, report.html), `Result.load(dir)` and `.to_pandas()`, one row per
record. `evaluate` and `probe` also take
`out_dir=` (or `runs_dir=`): the folder is then written as the run goes (config.json first,
removed if the run is refused) and finished with its figures and report, as the CLI does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowflow.config import config_to_dict, resolve_config
from knowflow.data.facts import Instruction
from knowflow.data.instruction_rows import load_instructions, parse_instruction, save_instructions
from knowflow.data.instructions import MixtureConfig
from knowflow.data.prompts import resolve_format
from knowflow.data.suites import get_suite, list_suites
from knowflow.data.tables import parse_fields
from knowflow.errors import ConfigError
from knowflow.evaluation.run import EvalResult
from knowflow.evaluation.run import evaluate as evaluate_model
from knowflow.experiments.runner import run_experiment
from knowflow.explanation.run import explain as explain_answers
from knowflow.lens.arch import arch_of, check_fits
from knowflow.lens.checks import check_loaded
from knowflow.lens.hub import ModelSource
from knowflow.lens.load import resolve_model
from knowflow.probes import ON_CONFLICT_ITEMS, PROBES, as_example, builtin_facts, load_examples
from knowflow.probes.head_attention import example_attention
from knowflow.probes.mass import mean_attention_mass
from knowflow.probes.suites import suite_examples
from knowflow.report.curation import curation_figure
from knowflow.report.finish import finish_eval, finish_probe
from knowflow.store.files import atomic_write_jsonl, file_group
from knowflow.store.identity import RECORDS
from knowflow.store.outputs import check_out_files
from knowflow.store.result import Result
from knowflow.store.run_folder import Progress, RunFolder, start_run
from knowflow.train.augment import AugmentConfig
from knowflow.train.augment import augment as augment_rows
from knowflow.train.criticality import CurateConfig, curate_examples
from knowflow.train.sft_job import BUILTIN, load_rows


def _source(revision: str | None, trust_remote_code: bool, offline: bool) -> ModelSource:
    """How a named model loads (checked: a bad revision is one line)."""
    source = ModelSource(revision, trust_remote_code, offline)
    source.validate()
    return source


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


# ---- evaluate ---------------------------------------------------------------------------

def evaluate(model="smollm2-135m-instruct", data=None, *, config=None, tokenizer=None,
             device: str = "auto", dtype: str = "auto", out_dir: str | Path | None = None,
             runs_dir: str | Path | None = None, progress: Progress | None = None,
             fields: dict[str, str] | None = None, preset: str | None = None,
             revision: str | None = None, trust_remote_code: bool = False,
             offline: bool = False, **overrides) -> EvalResult:
    """Knowledge-conflict evaluation (`knowflow eval`). `data`: suite names (a list, or one
    comma-separated string), data files, hub datasets (`"hf:ORG/NAME[:CONFIG][@SPLIT]"`), or
    `ConflictItem`s; None: the four built-in suites. `fields` maps the files' columns,
    `preset` names their published layout (`knowflow.data.presets`; else recognised).
    With `out_dir`/`runs_dir` the run folder is written and finished as the CLI's is."""
    _check_args(model, tokenizer, data)
    result = evaluate_model(model, data, tokenizer=tokenizer, config=config, device=device,
                            dtype=dtype, out_dir=out_dir, runs_dir=runs_dir,
                            progress=progress, fields=_fields(fields), preset=preset,
                            source=_source(revision, trust_remote_code, offline),
                            finish=finish_eval, **overrides)
    return result


# ---- explain ----------------------------------------------------------------------------

def explain(model="smollm2-135m-instruct", data="", question: str | None = None,
            answer: str | None = None, *, config=None, revision: str | None = None,
            trust_remote_code: bool = False, offline: bool = False, **overrides) -> Result:
    """Where answers come from (`knowflow explain`): with `question`, `data` is one context
    and `answer` the answer to explain (default: the model's own); otherwise `data` is a suite
    name, a data file or `ConflictItem`s. See `knowflow.explanation.run.explain` for the rest."""
    _check_args(model, overrides.get("tokenizer"), data, question=question, answer=answer)
    return explain_answers(model, data, question, answer, config=config,
                           source=_source(revision, trust_remote_code, offline), **overrides)


# ---- probe ------------------------------------------------------------------------------

def probe_summary(kind: str, records: list[dict], n_layers: int, cfg) -> dict:
    """The summary of one probe's records (each probe summarizes in its own terms)."""
    summarize = PROBES[kind][2]
    if kind == "attention":
        grid = mean_attention_mass(records)
        return {"mean_mass": grid, "layer_mean": [sum(row) / len(row) for row in grid],
                "n_examples": len(records)}
    if kind in ("knockout", "sublayer"):
        return summarize(records, n_layers)
    if kind == "project":
        return summarize(records)
    return summarize(records, cfg)


def probe_examples(kind: str, data, tokenizer, limit: int | None = None,
                   with_context: bool = False, prompt_format: str = "plain") -> list:
    """A probe's examples: a built-in suite by name, a prompts file, or examples in memory;
    None: knowflow's shipped well-known facts (conflict-item probes: the cf-capitals suite)."""
    if kind in ON_CONFLICT_ITEMS:
        names = data if isinstance(data, str) else None if data is not None else "cf-capitals"
        items = [it for n in names.split(",") for it in get_suite(n.strip(), limit=limit)] \
            if names else list(data)
        return items[:limit] if limit else items
    if isinstance(data, str) and data in list_suites():
        return suite_examples(data, tokenizer, with_context, prompt_format, limit=limit)
    if data is None:
        examples = builtin_facts()
    elif isinstance(data, (str, Path)):
        examples = load_examples(data)
    else:
        examples = [as_example(e) for e in data]
    return examples[:limit] if limit else examples


def probe(model="smollm2-135m-instruct", data=None, *, config=None, kind: str | None = None,
          tokenizer=None, device: str = "auto", dtype: str = "auto", limit: int | None = None,
          prompt_format: str | None = None, out_dir: str | Path | None = None,
          runs_dir: str | Path | None = None, progress: Progress | None = None,
          revision: str | None = None, trust_remote_code: bool = False, offline: bool = False,
          **overrides) -> Result:
    """Run one mechanistic probe (`knowflow probe <kind>`): `kind`, or the one whose config
    `config` is (default: knockout); `overrides` set its fields. `prompt_format` renders a
    suite's prompts (default plain), and is the config's own where it has one (heads). One
    record per example (per layer, source or head, as the probe measures)."""
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
    model, tokenizer, name = resolve_model(model, tokenizer, device=device, dtype=dtype,
                                           source=_source(revision, trust_remote_code, offline))
    examples = probe_examples(kind, data, tokenizer, limit, kind == "attention",
                              prompt_format or "plain")
    return run_probe(kind, model, tokenizer, examples, cfg, name, _label(data), out_dir,
                     runs_dir, progress)


def _label(data) -> str:
    if data is None:
        return "builtin:known_facts"
    if isinstance(data, str) and data in list_suites():
        return f"suite:{data}"
    return str(data) if isinstance(data, (str, Path)) else f"{len(data)} examples in memory"


def run_probe(kind: str, model, tokenizer, examples: Sequence, cfg, model_name: str,
              data_label: str, out_dir: str | Path | None = None,
              runs_dir: str | Path | None = None, progress: Progress | None = None
              ) -> Result:
    """Probe, then (with `out_dir` or `runs_dir`) write and finish the run folder:
    config.json first, then records.jsonl, figures, summary.json and report.html. Bad input
    found once the folder is made (a window larger than the model) or Ctrl-C removes it."""
    arch = arch_of(model)
    if "prompt_format" in type(cfg).__dataclass_fields__:  # auto: chat with a template
        cfg = dataclasses.replace(cfg, prompt_format=resolve_format(cfg.prompt_format,
                                                                    tokenizer))
    for ex in examples:  # before the run folder is made: a prompt past the window
        prompt = getattr(ex, "prompt", None)
        if isinstance(prompt, str):
            check_fits(model, len(tokenizer(prompt)["input_ids"]) + 1,
                       f"example {getattr(ex, 'id', '?')}", "the prompt with its next token")
    config = {"probe": kind, "model": model_name, "data": data_label,
              "n_examples": len(examples), "n_layers": arch.n_layers, "n_heads": arch.n_heads,
              "config": config_to_dict(cfg)}
    fn = PROBES[kind][0]
    command = f"probe-{kind}"

    def summarize(records: list[dict]) -> dict:
        summary = probe_summary(kind, records, arch.n_layers, cfg)
        if kind == "heads":  # where the ranked heads look, on one item (the report draws it)
            summary["example_attention"] = example_attention(model, tokenizer, examples,
                                                             summary, cfg.prompt_format)
        return summary

    if out_dir is None and runs_dir is None:
        records = fn(model, tokenizer, list(examples), cfg, progress=progress)
        return Result(records, summarize(records), config, command)
    with start_run(config, command, runs_dir=runs_dir, out_dir=out_dir) as run:  # staged
        records = fn(model, tokenizer, list(examples), cfg, progress=progress)
        result = Result(records, summarize(records), config, command)
        run.write_records(RECORDS, records)
        finish_probe(result, run)
    result.out_dir = run.path
    return result


# ---- curate and augment -----------------------------------------------------------------

def instruction_rows(data, seed: int = 0) -> list[Instruction]:
    """Instruction rows: a JSONL/JSON instruction file, "builtin" (the C/C+S/S mixture of
    `seed`), or rows in memory (`Instruction`s, or records as `augment` returns them)."""
    if data is None or isinstance(data, (str, Path)):
        return load_rows(str(data or BUILTIN), MixtureConfig(seed=seed))
    return [r if isinstance(r, Instruction) else parse_instruction(r, "rows", i)
            for i, r in enumerate(data, start=1)]


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
           device: str = "auto", dtype: str = "auto", seed: int = 0,
           progress: Progress | None = None, revision: str | None = None,
           trust_remote_code: bool = False, offline: bool = False,
           **overrides) -> CurateResult:
    """Score every instruction row's context-criticality with `model` and drop the least
    critical share (`knowflow curate`). `data`: an instruction file, "builtin", or rows."""
    cfg = resolve_config(CurateConfig, config, overrides)
    _check_args(model, tokenizer, data)
    rows = instruction_rows(data, seed)
    model, tokenizer, _ = resolve_model(model, tokenizer, device=device, dtype=dtype,
                                        source=_source(revision, trust_remote_code, offline))
    cfg = dataclasses.replace(cfg, prompt_format=resolve_format(cfg.prompt_format, tokenizer))
    kept, scores = curate_examples(model, tokenizer, rows, cfg, progress)
    summary = {"n_rows": len(rows), "n_kept": len(kept),
               "cutoff": _cutoff(scores, cfg, len(kept))}
    return CurateResult(scores, summary, config_to_dict(cfg), kept=kept,
                        inputs=_input_paths(data))


def augment(data=BUILTIN, *, config=None, **overrides) -> Result:
    """`data` plus entity-substituted counterfactual copies (`knowflow augment`): context and
    answer changed together. No model: `data` is an instruction file, "builtin", or rows. One
    record per row, as the JSONL file holds it (the copies carry `augmented`)."""
    cfg = resolve_config(AugmentConfig, config, overrides)
    _check_args(data=data)
    rows = instruction_rows(data, cfg.seed)
    out = augment_rows(rows, cfg.ratio, cfg.seed)
    summary = {"n_rows": len(rows), "n_added": sum(bool(r.extra.get("augmented")) for r in out)}
    return Result([r.to_dict() for r in out], summary, config_to_dict(cfg), "augment",
                  inputs=_input_paths(data))


def _input_paths(data) -> tuple[Path, ...]:
    """The file `data` names, when it is one: `.save()` and `.write()` never write over it."""
    return (Path(data),) if isinstance(data, str | Path) and Path(data).exists() else ()


# ---- finetune ---------------------------------------------------------------------------

def finetune(model=None, data=None, *, config=None, runs_dir: str | Path = "runs",
             resume: bool | str | Path = False, progress: Progress | None = None,
             **overrides) -> Result:
    """Finetune `model` on instruction `data` while tracking context reliance (`knowflow
    sft`); the run folder goes to runs_dir/sft/<timestamp>/. `model` is a name or path (the
    job loads it; a loaded model trains with `knowflow.train.sft.train_model`), `data` an
    instruction file or "builtin"; None: `config`'s. `config` is an `SFTJobConfig`; overrides
    set its fields (sections as dicts: `sft={"steps": 5}`). One record per tracked step."""
    if model is not None and not isinstance(model, (str, Path)):
        raise ConfigError("finetune loads its model by name or path", "model",
                          "save the model with save_pretrained and pass the folder, or train "
                          "it with knowflow.train.sft.train_model")
    if data is not None and not isinstance(data, (str, Path)):
        raise ConfigError(f"expected an instruction file or 'builtin', got "
                          f"{type(data).__name__} {data!r:.60}", "data")
    given = {k: str(v) for k, v in (("model", model), ("data", data)) if v is not None}
    return run_experiment("sft", config=config, runs_dir=runs_dir, resume=resume,
                          progress=progress, **given, **overrides)


__all__ = ["CurateResult", "EvalResult", "Result", "augment", "curate", "evaluate", "explain",
           "finetune", "probe", "run_experiment"]
