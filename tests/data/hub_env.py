"""What the offline hub tests share (tests/data/test_hub.py, test_benchmarks.py): the
environment of a subprocess that reads a laid-out `datasets` cache offline, a script that
loads `--data` values and prints what it read, and one that runs the knowflow CLI with every
socket refused."""

from __future__ import annotations

import os
from pathlib import Path


def offline_env(hf_home: Path) -> dict[str, str]:
    """This environment without HF settings, HF_HOME at `hf_home`, offline."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_"))}
    return {**env, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


READ = """
import json, sys
from knowflow.data.loaders import load_items_checked
from knowflow.errors import DataError
out = {}
for spec in sys.argv[1:]:
    try:
        items, counts = load_items_checked(spec)
        out[spec] = {"suite": items[0].suite, "n": len(items), "preset": counts.get("preset"),
                     "first": [items[0].counterfactual_answer, items[0].parametric_answer]}
    except DataError as exc:
        out[spec] = {"error": str(exc)}
print(json.dumps(out))
"""


# Runs the knowflow CLI with every socket refused, counting the attempts.
NO_NETWORK = """
import atexit, json, socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args[1:2]))
    raise OSError("network disabled by the test")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
report, *argv = sys.argv[1:]
atexit.register(lambda: open(report, "w").write(json.dumps(attempts)))
from knowflow.cli import app
sys.argv = ["knowflow", *argv]
app()
"""
