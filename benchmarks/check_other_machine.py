"""Does the inversion-tiny verdict survive another machine? Runs the experiment twice from
empty caches: once as this machine computes, once with PyTorch's vectorized CPU kernels off
(ATEN_CPU_CAPABILITY=default), which changes floating-point rounding the way another CPU
does. Prints each seed's rise and fall of `mixed` and the fall of `c_only` side by side.
Prints figures only, never asserts.

Usage: python benchmarks/check_other_machine.py [key=value ...]   (as --set; default:
arms=mixed,c_only; pass seeds=0,2 to look at fewer seeds)
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


def main(overrides: list[str]) -> None:
    if not any(o.startswith("arms=") for o in overrides):
        overrides = ["arms=mixed,c_only", *overrides]
    with tempfile.TemporaryDirectory() as tmp:
        here, t_here = run(tmp, "here", None, overrides)
        other, t_other = run(tmp, "other", "default", overrides)
    print(f"inversion-tiny {' '.join(overrides)}: this machine's kernels ({t_here:.0f} s) vs "
          f"ATEN_CPU_CAPABILITY=default ({t_other:.0f} s)")
    print(f"{'seed':>4} | {'mixed rise':>17} | {'mixed fall':>17} | {'c_only fall':>17}")
    for i, seed in enumerate(here["mixed"]["seeds"]):
        cells = []
        for arm, key in (("mixed", "rise"), ("mixed", "fall"), ("c_only", "fall")):
            a, b = here[arm][f"{key}_seeds"][i], other[arm][f"{key}_seeds"][i]
            cells.append(f"{a:7.3f} vs {b:7.3f}")
        print(f"{seed:>4} | " + " | ".join(cells))
    for name, s in (("this machine", here), ("other kernels", other)):
        print(f"{name}: {s['findings'].get('verdict', 'no verdict')}")


if __name__ == "__main__":
    main(sys.argv[1:])
