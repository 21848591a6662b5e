"""The Python API: one shape for every entry point, and the run folders the CLI writes.

    result = f(model, data, *, config=None, **overrides)

`model` is a name or path for `load_model` ("smollm2-135m-instruct", an HF id, a local
folder) or a loaded model (pass its `tokenizer=`); `data` is a built-in suite name, a file
path, or items already in memory (None: the entry point's built-in default); `config` is the
entry point's frozen config (`EvalConfig`, `KnockoutConfig`, ..., `CurateConfig`,
`AugmentConfig`) and `overrides` set its fields. `augment` needs no model: `augment(data, ...)`.

Every result has `.save(dir)`, which writes the run folder `knowflow <command>` writes
(config.json, the records, summary.json, figures/, report.html), and `.to_pandas()`, one row
per record (pandas is optional: pip install '.[data]'). `evaluate` and `probe` also take
`out_dir=` (or `runs_root=`): the folder is then written as the run goes (config.json first,
removed if the run is refused) and finished with its figures and report, as the CLI does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowflow.config import apply_overrides, config_to_dict, flatten, validate_config
from knowflow.data.facts import Instruction
from knowflow.data.instruction_rows import save_instructions
from knowflow.data.instructions import MixtureConfig
from knowflow.data.suites import get_suite, list_suites
from knowflow.errors import ConfigError
from knowflow.evaluation.run import Results, write_results
from knowflow.evaluation.run import evaluate as evaluate_model
from knowflow.explanation.result import ExplainResult
from knowflow.explanation.run import explain as explain_answers
from knowflow.io import atomic_write_jsonl
from knowflow.lens.arch import arch_of
from knowflow.lens.load import load_model
from knowflow.probes import ON_CONFLICT_ITEMS, PROBES, as_example, builtin_facts, load_examples
from knowflow.probes.mass import mean_attention_mass
from knowflow.probes.suites import suite_examples
from knowflow.report.curation import curation_figure
from knowflow.report.eval_run import eval_figures
from knowflow.report.explain import write_explain_report
from knowflow.report.finish import finish_run
from knowflow.report.probe_run import probe_figures
from knowflow.runs import RECORDS, Progress, start_run
from knowflow.train.augment import AugmentConfig
from knowflow.train.augment import augment as augment_rows
from knowflow.train.criticality import CurateConfig, curate_examples
from knowflow.train.sft_job import BUILTIN, load_rows


def _frame(rows: list[dict]):
    import pandas as pd  # optional: the data extra

    return pd.DataFrame([flatten(r, sep="_") for r in rows])


def _model(model, tokenizer, device: str, dtype: str):
    """(model, tokenizer, the name the run folder records) for a name, a path or a model."""
    if isinstance(model, (str, Path)):
        loaded, tok = load_model(str(model), device=device, dtype=dtype)
        return loaded, tok, str(model)
    if tokenizer is None:
        raise ConfigError("a loaded model needs its tokenizer", "tokenizer")
    return model, tokenizer, type(model).__name__


def _config(cls, config, overrides: dict):
    cfg = apply_overrides(config if config is not None else cls(), overrides)
    validate_config(cfg)
    return cfg


# ---- evaluate ---------------------------------------------------------------------------

@dataclass
class EvalResult(Results):
    """`knowflow.evaluate`'s result: summary {suite: {mode: metrics}}, per-item records."""

    def save(self, out_dir: str | Path) -> Path:
        """Write the eval run folder to `out_dir` and finish it (figures, report.html)."""
        self.out_dir = write_results(self.config, self.records, self.summary, out_dir, None,
                                     conditions=self.swept)
        finish_eval(self.out_dir)
        return self.out_dir

    def to_pandas(self):
        """One row per (suite, item): nested numbers spread into `outer_inner` columns."""
        return _frame([r for rs in self.records.values() for r in rs])


def finish_eval(run_dir: Path) -> Path:
    """An eval run folder's figures and report.html; returns the report."""
    return finish_run(run_dir, None, eval_figures, title="knowflow eval")[1]


def evaluate(model="smollm2-135m-instruct", data=None, *, config=None, tokenizer=None,
             device: str = "auto", dtype: str = "auto", out_dir: str | Path | None = None,
             runs_root: str | Path | None = None, progress: Progress | None = None,
             fields: dict[str, str] | None = None, **overrides) -> EvalResult:
    """Knowledge-conflict evaluation (`knowflow eval`). `data`: suite names (a list, or one
    comma-separated string), data files, or `ConflictItem`s; None: the four built-in suites.
    With `out_dir`/`runs_root` the run folder is written and finished as the CLI's is."""
    res = evaluate_model(model, data, tokenizer=tokenizer, config=config, device=device,
                         dtype=dtype, out_dir=out_dir, runs_root=runs_root,
                         progress=progress, fields=fields, **overrides)
    result = EvalResult(**{f.name: getattr(res, f.name) for f in dataclasses.fields(Results)})
    if result.out_dir is not None:
        finish_eval(result.out_dir)
    return result


# ---- explain ----------------------------------------------------------------------------

class ExplainRun(ExplainResult):
    """`knowflow.explain`'s result: one record per item, their summary."""

    def save(self, out_dir: str | Path | None = None, runs_root: str | Path = "runs") -> Path:
        """Write the explain run folder `knowflow explain` writes (config.json,
        records.jsonl, summary.json, figures/, report.html); returns the folder."""
        path = super().save(out_dir, runs_root=runs_root)
        write_explain_report(path)
        return path


def explain(model="smollm2-135m-instruct", data="", question: str | None = None,
            answer: str | None = None, *, config=None, **overrides) -> ExplainRun:
    """Where answers come from (`knowflow explain`): with `question`, `data` is one context
    and `answer` the answer to explain (default: the model's own); otherwise `data` is a suite
    name, a data file or `ConflictItem`s. See `knowflow.explanation.run.explain` for the rest."""
    res = explain_answers(model, data, question, answer, config=config, **overrides)
    return ExplainRun(**{f.name: getattr(res, f.name) for f in dataclasses.fields(ExplainResult)})


# ---- probe ------------------------------------------------------------------------------

@dataclass
class ProbeResult:
    """A probe's records (one per example), their summary, and the run's config."""

    kind: str
    records: list[dict]
    summary: dict
    config: dict
    out_dir: Path | None = None

    def save(self, out_dir: str | Path) -> Path:
        """Write the probe run folder (config.json, records.jsonl, summary.json, figures/,
        report.html) to `out_dir`."""
        run = start_run(self.config, f"probe-{self.kind}", out_dir=out_dir)
        with run.refusals(interrupt=True):
            run.write_records(RECORDS, self.records)
        self._finish(run)
        return self.out_dir

    def _finish(self, run) -> None:
        finish_run(run, self.summary,
                   lambda out: probe_figures(self.kind, self.summary, out, self.config["model"]),
                   title=f"knowflow probe {self.kind}")
        self.out_dir = run.path

    def to_pandas(self):
        return _frame(self.records)

    # the records, as the old `probe(kind, model, tokenizer, examples)` returned them
    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, i):
        return self.records[i]


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


def probe(model="smollm2-135m-instruct", data=None, *legacy, config=None, kind: str | None = None,
          tokenizer=None, device: str = "auto", dtype: str = "auto", limit: int | None = None,
          prompt_format: str = "plain", out_dir: str | Path | None = None,
          runs_root: str | Path | None = None, progress: Progress | None = None,
          **overrides) -> ProbeResult:
    """Run one mechanistic probe (`knowflow probe <kind>`). The probe is `kind`, or the one
    whose config `config` is (default: knockout); `overrides` set its fields. The old form
    `probe(kind, model, tokenizer, examples, **fields)` still works."""
    if isinstance(model, str) and hasattr(data, "parameters"):  # (kind, model, tok, examples)
        kind, model, tokenizer, data = model, data, *(list(legacy) + [tokenizer, None])[:2]
    elif legacy:
        raise TypeError("probe(model, data, *, config=None, **overrides)")
    if kind is None:
        kind = next((k for k, (_, cls, _) in PROBES.items() if isinstance(config, cls)),
                    "knockout")
    if kind not in PROBES:
        raise ConfigError(f"unknown probe {kind!r} (known: {', '.join(PROBES)})")
    cfg = _config(PROBES[kind][1], config, overrides)
    model, tokenizer, name = _model(model, tokenizer, device, dtype)
    examples = probe_examples(kind, data, tokenizer, limit, kind == "attention", prompt_format)
    return run_probe(kind, model, tokenizer, examples, cfg, name, _label(data), out_dir,
                     runs_root, progress)


def _label(data) -> str:
    if data is None:
        return "builtin:known_facts"
    if isinstance(data, str) and data in list_suites():
        return f"suite:{data}"
    return str(data) if isinstance(data, (str, Path)) else f"{len(data)} examples in memory"


def run_probe(kind: str, model, tokenizer, examples: Sequence, cfg, model_name: str,
              data_label: str, out_dir: str | Path | None = None,
              runs_root: str | Path | None = None, progress: Progress | None = None
              ) -> ProbeResult:
    """Probe, then (with `out_dir` or `runs_root`) write and finish the run folder:
    config.json first, then records.jsonl, figures, summary.json and report.html. Bad input
    found once the folder is made (a window larger than the model) or Ctrl-C removes it."""
    arch = arch_of(model)
    config = {"probe": kind, "model": model_name, "data": data_label,
              "n_examples": len(examples), "n_layers": arch.n_layers, "n_heads": arch.n_heads,
              "config": config_to_dict(cfg)}
    fn = PROBES[kind][0]
    if out_dir is None and runs_root is None:
        records = fn(model, tokenizer, list(examples), cfg, progress=progress)
        return ProbeResult(kind, records, probe_summary(kind, records, arch.n_layers, cfg),
                           config)
    run = start_run(config, f"probe-{kind}", runs_root=runs_root, out_dir=out_dir)
    with run.refusals(interrupt=True):
        records = fn(model, tokenizer, list(examples), cfg, progress=progress)
    result = ProbeResult(kind, records, probe_summary(kind, records, arch.n_layers, cfg), config)
    run.write_records(RECORDS, records)
    result._finish(run)
    return result


# ---- curate and augment -----------------------------------------------------------------

def instruction_rows(data, seed: int = 0) -> list[Instruction]:
    """Instruction rows: a JSONL/JSON instruction file, "builtin" (the C/C+S/S mixture of
    `seed`), or rows in memory."""
    if data is None or isinstance(data, (str, Path)):
        return load_rows(str(data or BUILTIN), MixtureConfig(seed=seed))
    return list(data)


@dataclass
class CurateResult:
    """The rows kept, every row's scores (`loss_with_context`, `loss_without_context`,
    `criticality`, `dropped`), and the config."""

    kept: list[Instruction]
    scores: list[dict]
    config: CurateConfig
    n_rows: int = 0

    @property
    def cutoff(self) -> float | None:
        """The lowest score kept, when any row was dropped."""
        key = "loss_without_context" if self.config.by == "no_context_loss" else "criticality"
        kept = [s[key] for s in self.scores if not s["dropped"]]
        return min(kept) if kept and len(self.kept) < self.n_rows else None

    def write(self, out: str | Path) -> tuple[Path, Path, Path]:
        """`knowflow curate --out OUT`'s files: OUT (the kept rows, JSONL), OUT.scores.jsonl
        and OUT.png (the score histogram with the cutoff)."""
        out = Path(out)
        save_instructions(out, self.kept)
        scores = atomic_write_jsonl(out.with_suffix(".scores.jsonl"), self.scores)
        return out, scores, curation_figure(self.scores, self.config.by, self.cutoff,
                                            out.with_suffix(".png"))

    def save(self, out_dir: str | Path) -> Path:
        """`out_dir/curated.jsonl`, `curated.scores.jsonl` and `curated.png`."""
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self.write(Path(out_dir) / "curated.jsonl")
        return Path(out_dir)

    def to_pandas(self):
        return _frame(self.scores)

    def __iter__(self):  # `kept, scores = curate(...)`, as the old form returned
        return iter((self.kept, self.scores))


def curate(model="smollm2-135m-instruct", data=BUILTIN, *legacy, config=None, tokenizer=None,
           device: str = "auto", dtype: str = "auto", seed: int = 0,
           progress: Progress | None = None, **overrides) -> CurateResult:
    """Score every instruction row's context-criticality with `model` and drop the least
    critical share (`knowflow curate`). `data`: an instruction file, "builtin", or rows. The
    old form `kept, scores = curate(model, tokenizer, rows, cfg)` still works."""
    if hasattr(data, "pad_token_id"):  # curate(model, tokenizer, rows[, cfg])
        tokenizer, data, config = data, *(list(legacy) + [config])[:2]
    elif legacy:
        raise TypeError("curate(model, data, *, config=None, **overrides)")
    cfg = _config(CurateConfig, config, overrides)
    rows = instruction_rows(data, seed)
    model, tokenizer, _ = _model(model, tokenizer, device, dtype)
    kept, scores = curate_examples(model, tokenizer, rows, cfg, progress)
    return CurateResult(kept, scores, cfg, len(rows))


@dataclass
class AugmentResult:
    rows: list[Instruction]            # the originals plus the counterfactual copies
    config: AugmentConfig
    added: list[Instruction] = field(default_factory=list)

    def write(self, out: str | Path) -> Path:
        """`knowflow augment --out OUT`'s file: the rows, JSONL."""
        return save_instructions(Path(out), self.rows)

    def save(self, out_dir: str | Path) -> Path:
        """`out_dir/augmented.jsonl`."""
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        return self.write(Path(out_dir) / "augmented.jsonl")

    def to_pandas(self):
        return _frame([dataclasses.asdict(r) for r in self.rows])

    # the rows, as the old `augment(rows, ratio)` returned them
    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)


def augment(data=BUILTIN, *legacy, config=None, **overrides) -> AugmentResult:
    """`data` plus entity-substituted counterfactual copies (`knowflow augment`): context and
    answer changed together. `data`: an instruction file, "builtin", or rows; the old form
    `augment(rows, ratio, seed)` still works."""
    if legacy:  # augment(rows, ratio[, seed])
        overrides = {**dict(zip(("ratio", "seed"), legacy, strict=False)), **overrides}
    cfg = _config(AugmentConfig, config, overrides)
    out = augment_rows(instruction_rows(data, cfg.seed), cfg.ratio, cfg.seed)
    return AugmentResult(out, cfg, [r for r in out if r.extra.get("augmented")])


__all__ = ["AugmentResult", "CurateResult", "EvalResult", "ExplainRun", "ProbeResult", "augment",
           "curate", "evaluate", "explain", "probe"]
