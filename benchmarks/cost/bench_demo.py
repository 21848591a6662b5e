"""Wall time of `make demo` from a cold cache: the same three commands the Makefile runs
(inversion-tiny, cpi-toy, one combined report), in a temporary cache and runs folder.

Target: under 6 minutes on a 2-core CPU. Prints figures only, never asserts.
Usage: python benchmarks/cost/bench_demo.py [--keep DIR]   (--keep: leave the cache, the runs and
each command's output, DIR/<command>.out, in DIR)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KNOWFLOW = str(Path(sys.executable).with_name("knowflow"))


def timed(cmd: list[str], env: dict, out: str) -> float:
    start = time.perf_counter()
    with open(out, "w") as fh:
        subprocess.run(cmd, env=env, check=True, stdout=fh)
    return time.perf_counter() - start


def main(keep: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or scratch
        os.makedirs(tmp, exist_ok=True)
        env = {**os.environ, "KNOWFLOW_CACHE": os.path.join(tmp, "cache")}
        runs = os.path.join(tmp, "runs")
        times = {name: timed([KNOWFLOW, "run", name, "--runs-dir", runs], env,
                             os.path.join(tmp, f"{name}.out"))
                 for name in ("inversion-tiny", "cpi-toy")}
        dirs = [str(next((Path(runs) / name).iterdir())) for name in times]
        times["report"] = timed([KNOWFLOW, "report", *dirs, "--out",
                                 os.path.join(runs, "demo-report.html")], env,
                                os.path.join(tmp, "report.out"))
    total = sum(times.values())
    print(f"make demo, cold cache, cpus={os.cpu_count()}, load={os.getloadavg()[0]:.1f}")
    for name, seconds in times.items():
        print(f"  {name:15s} {seconds:7.1f} s")
    print(f"  {'total':15s} {total:7.1f} s   (target < 360 s)")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[1] if args[:1] == ["--keep"] and len(args) == 2 else None)
