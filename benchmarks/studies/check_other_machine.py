"""Does the inversion-tiny verdict survive another machine? Runs the experiment from empty
caches: once as this machine computes, and once per `--capability` with PyTorch's CPU kernels
set to that instruction set (ATEN_CPU_CAPABILITY: `default` turns vectorization off, `avx2`
uses the AVX2 kernels), which changes floating-point rounding the way another CPU does.
Prints each seed's rise and fall of `mixed` and the fall of `c_only` side by side. Prints
figures only, never asserts.

From an empty cache the default config loads the shipped pretrained checkpoints, so this checks
finetuning on other kernels; add `pretrain.shipped=false` to pretrain on each side too.

Usage: python benchmarks/studies/check_other_machine.py [--capability default,avx2] [key=value ...]
(as --set; default: arms=mixed,c_only; pass seeds=0,2 to look at fewer seeds)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KNOWFLOW = str(Path(sys.executable).with_name("knowflow"))


def run(tmp: str, name: str, capability: str | None, overrides: list[str]) -> tuple[dict, float]:
    env = {**os.environ, "KNOWFLOW_CACHE": os.path.join(tmp, name, "cache")}
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    runs = os.path.join(tmp, name, "runs")
    args = [a for o in overrides for a in ("--set", o)]
    start = time.perf_counter()
    subprocess.run([KNOWFLOW, "run", "inversion-tiny", "--runs-dir", runs, *args], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    run_dir = next((Path(runs) / "inversion-tiny").iterdir())
    return json.loads((run_dir / "summary.json").read_text()), time.perf_counter() - start


def main(overrides: list[str], capabilities: list[str]) -> None:
    if not any(o.startswith("arms=") for o in overrides):
        overrides = ["arms=mixed,c_only", *overrides]
    with tempfile.TemporaryDirectory() as tmp:
        here, t_here = run(tmp, "here", None, overrides)
        others = {cap: run(tmp, cap, cap, overrides) for cap in capabilities}
    for cap, (other, t_other) in others.items():
        print(f"inversion-tiny {' '.join(overrides)}: this machine's kernels ({t_here:.0f} s) "
              f"vs ATEN_CPU_CAPABILITY={cap} ({t_other:.0f} s)")
        print(f"{'seed':>4} | {'mixed rise':>17} | {'mixed fall':>17} | {'c_only fall':>17}")
        for i, seed in enumerate(here["mixed"]["seeds"]):
            cells = []
            for arm, key in (("mixed", "rise"), ("mixed", "fall"), ("c_only", "fall")):
                a, b = here[arm][f"{key}_seeds"][i], other[arm][f"{key}_seeds"][i]
                cells.append(f"{a:7.3f} vs {b:7.3f}")
            print(f"{seed:>4} | " + " | ".join(cells))
        print(f"{cap} kernels: {other['findings'].get('verdict', 'no verdict')}")
    print(f"this machine: {here['findings'].get('verdict', 'no verdict')}")


if __name__ == "__main__":
    args, caps = sys.argv[1:], ["default"]
    if "--capability" in args:
        i = args.index("--capability")
        caps = args[i + 1].split(",")
        args = args[:i] + args[i + 2:]
    main(args, caps)
