"""`knowflow eval` against lm-evaluation-harness, whole commands, same items, model and threads.

The issue's comparison used MemoTrap's "1-proverb-ending" file (860 rows). That file is not
shipped by any installed package and nothing is downloaded at run time, so this script writes
a file in MemoTrap's layout and wording (`prompt`, `classes`, `answer_index`: 'Write a quote
that ends in the word "X": <saying>') with `benchmarks/make_memotrap_csv.py` from knowflow's
111 sayings, extended to `--items` distinct rows (860 by default, MemoTrap's size) by asking
each saying for other sayings' target words; the output says so.
Pass `--csv FILE` to use a real MemoTrap file instead.

Both sides run as the commands a user types, one after the other, in fresh processes:

    knowflow export lm-eval --data F --prompt-format plain --out TASKS      (not timed)
    lm_eval --model hf --model_args pretrained=SMOLLM2_FOLDER --include_path TASKS ...
    knowflow eval --data F --scoring loglik --prompt-format plain --out OUT

Prints each whole command's wall time, its scoring phase (lm-eval's "Running loglikelihood
requests" bar; knowflow's own stage times), both accuracies and the ratio. The lm-eval side
is skipped, with a line saying so, when lm_eval is not installed (`pip install -e '.[lmeval]'`).
Never asserts on time.

    .venv/bin/python benchmarks/bench_vs_lm_eval.py [--items 860] [--threads 2] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import ast
import csv
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def memotrap_rows(n: int, work: Path) -> list[dict]:
    """`n` distinct rows in MemoTrap's layout from knowflow's sayings (make_memotrap_csv.py).
    Past the first pass over the sayings, pass k asks each saying to end in the word that
    saying i+k asks for (a word other than the saying's own ending), so no two rows are the
    same request and neither tool can score a row once for several."""
    base = work / "sayings.csv"
    subprocess.run([sys.executable, str(Path(__file__).with_name("make_memotrap_csv.py")),
                    str(base)], check=True)
    with base.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    parsed = []
    for row in rows:
        classes = ast.literal_eval(row["classes"])
        target = classes[int(row["answer_index"])]
        saying = row["prompt"].split(": ", 1)[1]
        parsed.append((saying, classes[1 - int(row["answer_index"])], target))
    out, seen = [], set()
    for i in range(n * 4):
        if len(out) == n:
            break
        k, j = divmod(i, len(parsed))
        saying, memory, target = parsed[j]
        target = parsed[(j + k) % len(parsed)][2]
        if target == memory or (saying, target) in seen:
            continue
        seen.add((saying, target))
        classes = [memory, target] if i % 2 else [target, memory]
        out.append({"prompt": f'Write a quote that ends in the word "{target.strip()}": '
                              f"{saying}",
                    "classes": repr(classes), "answer_index": classes.index(target)})
    if len(out) < n:
        sys.exit(f"only {len(out)} distinct rows can be made from the sayings")
    return out


def run(cmd: list[str], env: dict, log: Path) -> tuple[float, float]:
    """Run `cmd` to completion: (wall seconds, CPU seconds of the command and its children).
    Output goes to `log`; a failure stops the bench."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{log.read_text()[-3000:]}")
    return seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def lm_eval_scoring_seconds(text: str) -> float | None:
    """Elapsed time of lm-eval's last 'Running loglikelihood requests' progress bar."""
    found = re.findall(r"Running loglikelihood requests:\s+100%.*?\[(\d+):(\d+)(?::(\d+))?<",
                       text.replace("\r", "\n"))
    if not found:
        return None
    parts = [int(p) for p in found[-1] if p]
    return float(sum(v * 60 ** i for i, v in enumerate(reversed(parts))))


def knowflow_stages(text: str) -> dict[str, float]:
    """The stage times `knowflow eval` prints after "results:"."""
    line = next((ln for ln in text.splitlines() if ln.startswith("results:")), "")
    return {k.strip(): float(v) for k, v in re.findall(r"([a-z ]+) ([\d.]+) s", line)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=860)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--csv", type=Path, help="a real MemoTrap CSV instead of the built one")
    ap.add_argument("--keep", type=Path, help="keep the files here (default: a temp folder)")
    args = ap.parse_args()

    from knowflow.models.hf import SMOLLM2, model_folder

    work = args.keep or Path(tempfile.mkdtemp(prefix="kf-vs-lmeval-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "memotrap_style.csv"
    if args.csv:
        shutil.copy(args.csv, data)
        n = sum(1 for _ in csv.DictReader(args.csv.open(encoding="utf-8")))
        print(f"data: {args.csv} ({n} rows)")
    else:
        rows = memotrap_rows(args.items, work)
        with data.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, ["prompt", "classes", "answer_index"])
            writer.writeheader()
            writer.writerows(rows)
        n = len(rows)
        print(f"data: {n} rows in MemoTrap's layout and wording from knowflow's 111 sayings "
              "(each saying asked for several target words; all rows distinct); the real MemoTrap "
              "file is not on this machine")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    folder = model_folder(SMOLLM2)  # the converted HF folder, as both tools load it
    print(f"model: SmolLM2-135M-Instruct ({folder}), CPU, {args.threads} threads, batch "
          f"{args.batch_size}, plain prompts, log-likelihood of the two answers")
    suite = data.stem
    rows_out = []

    if importlib.util.find_spec("lm_eval") is None:
        print("lm-eval: skipped (not installed; pip install -e '.[lmeval]')")
        lm = None
    else:
        tasks = work / "tasks"
        run([str(BIN / "knowflow"), "export", "lm-eval", "--data", str(data), "--prompt-format",
             "plain", "--out", str(tasks)], env, work / "export.log")
        task = next(tasks.glob("*.yaml")).stem
        out = work / "lm_eval_out"
        log = work / "lm_eval.log"
        seconds, cpu = run([str(BIN / "lm_eval"), "--model", "hf", "--model_args",
                            f"pretrained={folder},dtype=float32", "--device", "cpu",
                            "--include_path", str(tasks), "--tasks", task, "--batch_size",
                            str(args.batch_size), "--output_path", str(out)], env, log)
        result = json.loads(max(out.rglob("results_*.json"), key=os.path.getmtime).read_text())
        acc = result["results"][task]["acc,none"]
        lm = (seconds, cpu, lm_eval_scoring_seconds(log.read_text()), acc)
        rows_out.append(("lm-eval hf", *lm))

    out = work / "knowflow_out"
    shutil.rmtree(out, ignore_errors=True)
    log = work / "knowflow.log"
    seconds, cpu = run([str(BIN / "knowflow"), "eval", "--data", str(data), "--scoring", "loglik",
                   "--prompt-format", "plain", "--threads", str(args.threads), "--batch-size",
                   str(args.batch_size), "--out", str(out)], env, log)
    stages = knowflow_stages(log.read_text())
    summary = json.loads((out / "summary.json").read_text())[suite]["loglik"]
    kf = (seconds, cpu, stages.get("loglik"), summary["counterfactual_accuracy"])
    rows_out.append(("knowflow eval", *kf))

    print(f"\n{'command':16s} {'scoring (wall)':>16s} {'whole command':>14s} {'CPU':>8s} "
          f"{'accuracy':>9s}")
    for name, whole, cpu, scoring, acc in rows_out:
        sc = f"{scoring:5.0f} s ({n / scoring:4.1f}/s)" if scoring else "n/a"
        print(f"{name:16s} {sc:>16s} {whole:12.1f} s {cpu:6.1f} s {acc:9.4f}")
    print(f"knowflow stages: {', '.join(f'{k} {v:.1f} s' for k, v in stages.items())} "
          "(known facts: the no-context pass, log-likelihood of the two answers)")
    if lm is not None:
        print(f"whole command: knowflow is {lm[0] / kf[0]:.2f}x faster than lm-eval by wall "
              f"time, {lm[1] / kf[1]:.2f}x by CPU time; accuracy identical: "
              f"{abs(lm[3] - kf[3]) < 1e-9}")
    print(f"files: {work}")


if __name__ == "__main__":
    main()
