"""knowflow: where does a language model's answer come from — its context or its weights?

The Python API mirrors the `knowflow` command: `run_experiment` runs a registered experiment
and writes its run directory; `write_report` renders run directories as one HTML page;
`evaluate` measures how much a language model follows a counterfactual context.
"""

from knowflow.errors import ConfigError, DataError, KnowflowError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DataError",
    "KnowflowError",
    "__version__",
    "evaluate",
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
    raise AttributeError(name)
