"""`knowflow eval` against lm-evaluation-harness: whole commands, same rows, model and threads,
the two sides taking turns for `--rounds` rounds.

Two workloads (`--workloads`, both by default):

- `memotrap`: an 860-row file in MemoTrap's layout and wording (`prompt`, `classes`,
  `answer_index`: 'Write a quote that ends in the word "X": <saying>'), written from knowflow's
  111 sayings (`make_memotrap_csv.py`): each saying asked for several other sayings' target
  words (no two rows the same request), and every tenth saying asked for its own ending with a
  capital letter, a case-only pair (" words" / " Words") as the real file has. The real
  MemoTrap file is not shipped by any installed package and nothing downloads; `--csv FILE`
  uses one. lm-eval runs its own shipped task (`inverse_scaling_memo_trap`'s definition)
  pointed at the file; knowflow runs `eval --data FILE --prompt-format plain`, the same
  prompt text and continuations.
- `suites`: the four built-in suites (`--limit` items each, chat prompts), exported with
  `knowflow export lm-eval` (not timed) so lm-eval scores exactly knowflow's prompts.

Each round runs lm-eval and knowflow once each, in fresh processes, alternating which goes
first, so a busy stretch of a shared machine falls on both. Per round it prints each whole
command's wall and CPU seconds (the process and its children) and its scoring seconds
(lm-eval's "Running loglikelihood requests" bar; knowflow's own stage times, log-likelihood
plus the known-facts pass), then the median ratios and their range, and both accuracies with
a row-by-row comparison (lm-eval's per-document `acc` from `--log_samples` against knowflow's
`items.jsonl`). Never asserts on time. The lm-eval side is skipped, with a line saying so, when
lm_eval is not installed (`pip install -e '.[lmeval]'`).

    .venv/bin/python benchmarks/peers/bench_vs_lm_eval.py [--rounds 3] [--threads 1] [--items 860]
        [--limit 40] [--batch-size 16] [--workloads memotrap,suites] [--csv FILE] [--keep DIR]
        [--variants "|--known-filter"]

The model is converted into `$KNOWFLOW_CACHE` once, before any timing (a cold cache adds the
GGUF conversion, ~22 CPU s, to knowflow's first run only); both tools then load that same HF
folder in every round, each its own way. The knowflow sides are `knowflow eval` with its
defaults (under `--scoring loglik`: no known-facts pass) and, by default, with `--known-filter`
(the log-likelihood known-facts pass on top).
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
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITES = "cf-capitals,cf-world,cf-bio,cf-quotes"
DATA = Path(__file__).resolve().parents[1] / "data"  # make_memotrap_csv.py
LM_EVAL_TASK = """include: {shipped}
task: memo_trap_csv
dataset_path: csv
dataset_kwargs:
  data_files:
    train: {data}
doc_to_choice: "{{{{classes}}}}"
"""  # the shipped task reads `classes` as a list; a CSV cell is its repr, which this parses


def memotrap_rows(n: int, work: Path) -> list[dict]:
    """`n` distinct rows in MemoTrap's layout from knowflow's sayings (make_memotrap_csv.py).
    Pass 0 asks each saying for another saying's word; every tenth saying then asks for its
    own ending capitalized (a case-only pair); pass k > 0 asks saying j for saying j+k's word,
    so no two rows are the same request."""
    base = work / "sayings.csv"
    subprocess.run([sys.executable, str(DATA / "make_memotrap_csv.py"),
                    str(base)], check=True, stdout=subprocess.DEVNULL)
    with base.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    parsed = []
    for row in rows:
        classes = ast.literal_eval(row["classes"])
        target = classes[int(row["answer_index"])]
        saying = row["prompt"].split(": ", 1)[1]
        parsed.append((saying, classes[1 - int(row["answer_index"])], target))
    wanted = [(j, k) for k in range(len(parsed)) for j in range(len(parsed))]
    wanted[len(parsed):len(parsed)] = [(j, None) for j in range(0, len(parsed), 10)]
    out, seen = [], set()
    for i, (j, k) in enumerate(wanted):
        if len(out) == n:
            break
        saying, memory, target = parsed[j]
        if k is None:                                     # case-only: " words" / " Words"
            target = " " + memory.strip().capitalize()
            if target == memory:
                continue
        else:
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


def lm_eval_per_row(out: Path, by_id: bool) -> dict:
    """{row key: acc} from lm-eval's samples files: the exported tasks' item ids, or the
    shipped task's document index."""
    accs = {}
    for path in out.rglob("samples_*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            s = json.loads(line)
            accs[s["doc"]["id"] if by_id else s["doc_id"]] = float(s["acc"])
    return accs


def knowflow_per_row(out: Path, by_id: bool) -> dict:
    """{row key: 1.0 if the context's answer is the likelier, else 0.0} from items.jsonl."""
    accs = {}
    for line in (out / "items.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        key = r["id"] if by_id else int(r["id"].rsplit("-", 1)[1])
        accs[key] = float(r["loglik_choice"] == "counterfactual")
    return accs


def workload_commands(name: str, args, work: Path, env: dict, folder: Path):
    """(description, lm-eval command or None, knowflow command, rows key by id?, lm out,
    knowflow out) of one workload."""
    py = sys.executable
    lm_out, kf_out = work / f"{name}_lm_eval_out", work / f"{name}_knowflow_out"
    common = ["--threads", str(args.threads), "--batch-size", str(args.batch_size),
              "--scoring", "loglik"]
    lm_base = [py, "-m", "lm_eval", "--model", "hf", "--model_args",
               f"pretrained={folder},dtype=float32", "--device", "cpu", "--batch_size",
               str(args.batch_size), "--output_path", str(lm_out), "--log_samples"]
    have_lm = importlib.util.find_spec("lm_eval") is not None
    if name == "memotrap":
        data = work / "memotrap_style.csv"
        if args.csv:
            shutil.copy(args.csv, data)
            n = sum(1 for _ in csv.DictReader(args.csv.open(encoding="utf-8")))
            desc = f"{args.csv} ({n} rows)"
        else:
            rows = memotrap_rows(args.items, work)
            with data.open("w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, ["prompt", "classes", "answer_index"])
                writer.writeheader()
                writer.writerows(rows)
            same = sum(ast.literal_eval(r["classes"])[0].lower() ==
                       ast.literal_eval(r["classes"])[1].lower() for r in rows)
            desc = (f"{len(rows)} rows in MemoTrap's layout and wording from knowflow's 111 "
                    f"sayings, {same} of them case-only pairs (the real MemoTrap file is not on "
                    "this machine)")
        lm = None
        if have_lm:
            import lm_eval
            shipped = Path(lm_eval.__file__).parent / "tasks" / "inverse_scaling" / \
                "_inverse_scaling_mc_yaml"
            tasks = work / "memotrap_task"
            tasks.mkdir(exist_ok=True)
            (tasks / "memo_trap_csv.yaml").write_text(LM_EVAL_TASK.format(shipped=shipped,
                                                                          data=data))
            lm = [*lm_base, "--include_path", str(tasks), "--tasks", "memo_trap_csv"]
        kf = [py, "-m", "knowflow", "eval", "--data", str(data), "--prompt-format", "plain",
              *common, "--out", str(kf_out)]
        return desc, lm, kf, False, lm_out, kf_out
    lm = None
    if have_lm:
        tasks = work / "suites_tasks"
        run([py, "-m", "knowflow", "export", "lm-eval", "--suite", SUITES, "--limit",
             str(args.limit), "--out", str(tasks)], env, work / "export.log")
        names = ",".join(p.stem for p in sorted(tasks.glob("*.yaml")))
        lm = [*lm_base, "--include_path", str(tasks), "--tasks", names]
    kf = [py, "-m", "knowflow", "eval", "--suite", SUITES, "--limit", str(args.limit),
          *common, "--out", str(kf_out)]
    desc = f"the four built-in suites, {args.limit} items each, chat prompts"
    return desc, lm, kf, True, lm_out, kf_out


def bench(name: str, args, work: Path, env: dict, folder: Path) -> None:
    desc, lm, kf, by_id, lm_out, kf_out = workload_commands(name, args, work, env, folder)
    print(f"\n== {name}: {desc}")
    sides = [("lm-eval", lm, lm_out)] if lm is not None else []
    if lm is None:
        print("lm-eval: skipped (not installed; pip install -e '.[lmeval]')")
    for i, extra in enumerate(args.variants.split("|")):
        label = ("knowflow " + extra.strip()).strip()
        out = kf_out.with_name(f"{kf_out.name}{i}")
        sides.append((label, [*kf[:-2], *shlex.split(extra), "--out", str(out)], out))
    rounds = []
    for r in range(args.rounds):
        got = {}
        for side, cmd, out in sides[r % len(sides):] + sides[:r % len(sides)]:  # take turns
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(env["HF_DATASETS_CACHE"], ignore_errors=True)  # each run from empty
            log = work / f"{name}_{side.replace(' ', '_')}_{r}.log"
            wall, cpu = run(cmd, env, log)
            text = log.read_text()
            if side == "lm-eval":
                scoring, extra = lm_eval_scoring_seconds(text), ""
            else:
                stages = knowflow_stages(text)
                scoring = stages.get("loglik", 0.0) + stages.get("known facts", 0.0)
                extra = "  (" + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()) + ")"
            got[side] = (wall, cpu, scoring)
            print(f"round {r + 1}  {side:28s} whole {wall:6.1f} s wall {cpu:6.1f} s CPU   "
                  f"scoring {scoring or float('nan'):6.1f} s{extra}", flush=True)
        rounds.append(got)
    lm_rows = lm_eval_per_row(lm_out, by_id) if lm is not None else {}
    if lm_rows:
        print(f"accuracy: lm-eval {sum(lm_rows.values()) / len(lm_rows):.4f} on "
              f"{len(lm_rows)} rows")
    for side, _, out in sides[1 if lm is not None else 0:]:
        kf_rows = knowflow_per_row(out, by_id)
        line = f"accuracy: {side} {sum(kf_rows.values()) / len(kf_rows):.4f} on {len(kf_rows)} rows"
        if lm_rows:
            shared = set(lm_rows) & set(kf_rows)
            differ = sorted(k for k in shared if lm_rows[k] != kf_rows[k])
            line += (f"; rows both scored {len(shared)}, scored differently {len(differ)}"
                     f"{' ' + str(differ[:10]) if differ else ''}; rows only lm-eval scored "
                     f"{len(set(lm_rows) - shared)}")
        print(line)
        if lm is None:
            continue
        for what, i in (("whole wall", 0), ("whole CPU", 1), ("scoring", 2)):
            ratios = [g["lm-eval"][i] / g[side][i] for g in rounds
                      if g["lm-eval"][i] and g[side][i]]
            if ratios:
                print(f"  lm-eval / {side}, {what:10s}: median {statistics.median(ratios):.2f}x"
                      f" (rounds: {', '.join(f'{x:.2f}' for x in ratios)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--items", type=int, default=860, help="rows of the MemoTrap-format file")
    ap.add_argument("--limit", type=int, default=40, help="items per built-in suite")
    ap.add_argument("--workloads", default="memotrap,suites")
    ap.add_argument("--csv", type=Path, help="a real MemoTrap CSV instead of the built one")
    ap.add_argument("--variants", default="|--known-filter",
                    help="knowflow sides, '|'-separated `knowflow eval` options ('' = defaults)")
    ap.add_argument("--keep", type=Path, help="keep the files here (default: a temp folder)")
    args = ap.parse_args()

    from knowflow.lens.load import SMOLLM2, model_folder

    work = args.keep or Path(tempfile.mkdtemp(prefix="kf-vs-lmeval-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_DATASETS_CACHE": str(work / "hf_datasets")}
    folder = model_folder(SMOLLM2)  # converted once, before any timing; both tools load it
    print(f"model: SmolLM2-135M-Instruct ({folder}), CPU, {args.threads} thread(s), batch "
          f"{args.batch_size}, log-likelihood of the two answers; {args.rounds} rounds, the "
          f"sides taking turns")
    for name in args.workloads.split(","):
        bench(name.strip(), args, work, env, folder)
    print(f"files: {work}")


if __name__ == "__main__":
    main()
