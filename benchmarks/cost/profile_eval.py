"""Where one `knowflow eval` run's CPU seconds go: the command runs in this process with a
process-CPU clock around each stage (imports, loading the data, loading the model, the
log-likelihood pass, the known-facts pass, writing the run folder and report), and inside the
passes around the model's forward calls. CPU seconds, not wall time, so a busy shared machine
changes the figures less; no profiler hooks (cProfile inflates Python loops several-fold).

    .venv/bin/python benchmarks/cost/profile_eval.py eval --data F.csv --scoring loglik \\
        --prompt-format plain --threads 1 --out OUT
"""

from __future__ import annotations

import contextlib
import sys
import time

START = time.process_time()
SPENT: dict[str, float] = {}
CALLS: dict[str, int] = {}
ACTIVE: list[str] = []


def timed(owner, attr: str, stage: str) -> None:
    """Replace `owner.attr` with a wrapper adding its CPU seconds to `stage` (outermost call
    only, so a stage that calls itself is counted once)."""
    inner = getattr(owner, attr)

    def wrapper(*args, **kwargs):
        if stage in ACTIVE:
            return inner(*args, **kwargs)
        ACTIVE.append(stage)
        t0 = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            SPENT[stage] = SPENT.get(stage, 0.0) + time.process_time() - t0
            CALLS[stage] = CALLS.get(stage, 0) + 1
            ACTIVE.remove(stage)

    setattr(owner, attr, wrapper)


def main() -> None:
    sys.argv = ["knowflow", *sys.argv[1:]]
    t0 = time.process_time()
    import importlib
    import importlib.util

    import torch  # noqa: F401  (timed with the rest of the imports)

    from knowflow.cli import app
    from knowflow.cli import eval as cli_eval
    from knowflow.evaluation import items
    from knowflow.evaluation import run as api
    from knowflow.lens import _tree, scorer
    from knowflow.lens import prompt_batches as batching
    public = importlib.import_module("knowflow.api") \
        if importlib.util.find_spec("knowflow.api") else None  # finish_eval moved there
    SPENT["imports (knowflow, torch, cli)"] = time.process_time() - t0
    timed(api, "load_data" if hasattr(api, "load_data") else "load_suites", "load data")
    timed(api, "load_model", "load model")
    timed(items, "score_with", "log-likelihood pass")
    timed(items, "_mark_known", "known-facts pass")
    for module in (batching, scorer, _tree):  # each imported `forward` by name
        if hasattr(module, "forward"):
            timed(module, "forward", "  of which model forward calls")
    for module, name in ((cli_eval, "_finish_eval"), (public, "finish_eval")):
        if module is not None and hasattr(module, name):
            timed(module, name, "figures and report")
    with contextlib.suppress(SystemExit):
        app(prog_name="knowflow")
    total = time.process_time() - START
    print(f"\nCPU seconds of this process: {total:.1f}", file=sys.stderr)
    for stage, s in SPENT.items():
        calls = f" ({CALLS[stage]} calls)" if stage in CALLS and CALLS[stage] > 1 else ""
        print(f"  {stage:34s} {s:6.1f}{calls}", file=sys.stderr)
    rest = total - sum(s for k, s in SPENT.items() if not k.startswith(" "))
    print(f"  {'everything else':34s} {rest:6.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
