"""knowflow: where does a language model's answer come from — its context or its weights?

The Python API mirrors the `knowflow` command: `run_experiment` runs a registered experiment
and writes its run directory; `write_report` renders run directories as one HTML page;
`evaluate` measures how much a language model follows a counterfactual context;
`RelianceTracker` (an HF TrainerCallback) tracks that during anyone's finetuning run:

    tracker = knowflow.RelianceTracker(tokenizer, knowflow.TrackerConfig(every=50), "runs/x")
    tracker.attach(trainer)
"""

from knowflow.errors import ConfigError, DataError, KnowflowError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DataError",
    "KnowflowError",
    "RelianceTracker",
    "SFTConfig",
    "TrackerConfig",
    "__version__",
    "evaluate",
    "finetune",
    "run_experiment",
    "write_report",
]


def __getattr__(name: str):
    # Lazy: importing knowflow must not import torch or matplotlib.
    if name == "run_experiment":
        from knowflow.experiments.runner import run_experiment

        return run_experiment
    if name == "evaluate":
        from knowflow.evaluate.api import evaluate

        return evaluate
    if name == "write_report":
        from knowflow.report.html import write_report

        return write_report
    if name in ("RelianceTracker", "TrackerConfig"):
        from knowflow.train import tracker

        return getattr(tracker, name)
    if name in ("SFTConfig", "finetune"):
        from knowflow.train import sft

        return getattr(sft, name)
    raise AttributeError(name)
