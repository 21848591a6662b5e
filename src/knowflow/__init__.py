"""knowflow: where does a language model's answer come from — its context or its weights?

The Python API mirrors the `knowflow` command and is meant for a notebook. Every entry point
has one shape, `f(model, data=None, *, config=None, **overrides) -> Result` (model: a name, a
path or a loaded model with `tokenizer=`; data: a suite name, a file or items), and every
Result has `.records`, `.summary`, `.config`, `.save(dir)` (the run folder the command
writes), `Result.load(dir)` and `.to_pandas()` (see knowflow.api):

    res = knowflow.evaluate("smollm2-135m-instruct", "cf-capitals", scoring="loglik")
    res.summary["cf-capitals"]["loglik"]["cf_acc"]; res.to_pandas()
    res = knowflow.evaluate(model, "cf-capitals", tokenizer=tokenizer, out="runs/e")
    ko = knowflow.probe(model, "cf-capitals", tokenizer=tokenizer,
                        config=knowflow.KnockoutConfig(window=3))
    cur = knowflow.curate(model, "train.jsonl", tokenizer=tokenizer, drop=0.25)
    aug = knowflow.augment("train.jsonl", ratio=0.5); aug.save("out/")
    run = knowflow.finetune("smollm2-135m-instruct", "train.jsonl", sft={"steps": 50})
    knowflow.Result.load(run.out_dir).to_pandas()
    knowflow.list_suites(), knowflow.get_suite("cf-capitals", limit=5)
    knowflow.list_experiments(); knowflow.run_experiment("cpi-toy", runs_dir="runs")

`RelianceTracker` (an HF TrainerCallback) tracks context reliance during anyone's finetuning,
on built-in suites or on your own items (`RelianceTracker(tokenizer, items=
knowflow.load_items("my_conflicts.jsonl"))`); `knowflow report <its folder>` draws the curves.

Every public name is a plain function or class, loaded on first use (importing knowflow does
not import torch or matplotlib).
"""

import importlib as _importlib

from knowflow.errors import ConfigError, DataError, KnowflowError  # noqa: F401  (in __all__)

__version__ = "0.1.0"

# public name -> "module:attribute" it is defined as
_API = {
    "augment": "knowflow.api:augment",
    "curate": "knowflow.api:curate",
    "evaluate": "knowflow.api:evaluate",
    "explain": "knowflow.api:explain",
    "finetune": "knowflow.api:finetune",
    "get_suite": "knowflow.data.suites:get_suite",
    "list_experiments": "knowflow.experiments.registry:list_experiments",
    "list_suites": "knowflow.data.suites:list_suites",
    "load_items": "knowflow.train.tracker:load_items",
    "load_model": "knowflow.lens.load:load_model",
    "probe": "knowflow.api:probe",
    "run_experiment": "knowflow.api:run_experiment",
    "write_report": "knowflow.report.html:write_report",
    "Result": "knowflow.store.result:Result",
    "AttentionMassConfig": "knowflow.probes.mass:AttentionMassConfig",
    "AugmentConfig": "knowflow.train.augment:AugmentConfig",
    "CurateConfig": "knowflow.train.criticality:CurateConfig",
    "EvalConfig": "knowflow.evaluation.options:EvalConfig",
    "HeadProjectionConfig": "knowflow.probes.head_projection:HeadProjectionConfig",
    "HeadsConfig": "knowflow.probes.heads:HeadsConfig",
    "KnockoutConfig": "knowflow.probes.knockout:KnockoutConfig",
    "ProjectionConfig": "knowflow.probes.projection:ProjectionConfig",
    "RelianceTracker": "knowflow.train.tracker:RelianceTracker",
    "SFTConfig": "knowflow.train.sft:SFTConfig",
    "SublayerConfig": "knowflow.probes.sublayer:SublayerConfig",
    "TrackerConfig": "knowflow.train.tracker:TrackerConfig",
}

__all__ = sorted(["ConfigError", "DataError", "KnowflowError", "__version__", *_API])


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'knowflow' has no attribute {name!r}")
    module, attr = _API[name].split(":")
    value = getattr(_importlib.import_module(module), attr)
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
