"""Which torch thread count is fastest for each kind of knowflow job: the measurement behind
`--threads`' default. Never asserts on time.

Each cell is one fresh process (`--job NAME --threads N`) that sets up untimed (model load,
data), then times the job's work. Thread counts run in alternating order over several rounds,
so a noisy stretch of a shared machine falls on every count; the table prints the median
seconds per count and each count's speed relative to one thread.

Jobs:
  eval      SmolLM2-135M-Instruct, log-likelihood evaluation of 24 cf-capitals items
  sft       SmolLM2-135M-Instruct, 3 LoRA steps on 8 rows of the built-in mixture
  explain   SmolLM2-135M-Instruct, one explain (32 context ablations) on a needle item
  tiny      inversion-tiny's default model (2 layers, d_model 64), 40 training steps of 32

    .venv/bin/python benchmarks/scale/bench_threads.py [--rounds 3] [--jobs eval,sft,explain,tiny]
        [--threads 1,2,4,8]   (counts above the CPUs this process may use are skipped)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def _job_eval() -> float:
    from knowflow.evaluation.options import EvalConfig
    from knowflow.evaluation.run import evaluate
    from knowflow.lens.load import load_model

    model, tok = load_model()
    cfg = EvalConfig(limit=24, scoring="loglik")
    start = time.perf_counter()
    evaluate(model, "cf-capitals", tokenizer=tok, config=cfg)
    return time.perf_counter() - start


def _job_sft() -> float:
    from knowflow.data.instruction_rows import encode_all
    from knowflow.data.instructions import MixtureConfig, builtin_mixture
    from knowflow.lens.load import load_model
    from knowflow.train.sft import SFTConfig, train_model

    model, tok = load_model()
    rows = builtin_mixture(MixtureConfig())[:32]
    data, _ = encode_all(tok, rows, "chat", 128)
    cfg = SFTConfig(steps=3, batch_size=8, train="lora")
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        train_model(model, tok, data, cfg, out)
    return time.perf_counter() - start


def _job_explain() -> float:
    from knowflow.api import explain

    item = ("The Eiffel Tower is in Paris. It was planned for Rome first. The city hosts "
            "many museums. The tower is made of iron. Visitors climb it every day.")
    explain("smollm2-135m-instruct", item, "Where is the Eiffel Tower?", answer="Paris")
    start = time.perf_counter()
    explain("smollm2-135m-instruct", item, "Where is the Eiffel Tower?", answer="Paris")
    return time.perf_counter() - start


def _job_tiny() -> float:
    import torch

    from knowflow.experiments.inversion_tiny.model import TinyModelConfig, make_model

    model = make_model(TinyModelConfig(), vocab_size=400, max_len=48, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 400, (32, 48), generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    for _ in range(40):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    return time.perf_counter() - start


JOBS = {"eval": _job_eval, "sft": _job_sft, "explain": _job_explain, "tiny": _job_tiny}


def _cell(job: str, threads: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--job", job, "--threads", str(threads)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{job} at {threads} thread(s) failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--threads", default="1,2,4,8")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:  # one cell, in its own process
        import torch

        torch.set_num_threads(int(args.threads))
        print(f"{JOBS[args.job]():.4f}")
        return
    cpus = _cpus()
    counts = [n for n in map(int, args.threads.split(",")) if n <= cpus]
    jobs = args.jobs.split(",")
    print(f"CPUs this process may use: {cpus}; thread counts: {counts}; "
          f"{args.rounds} rounds, order alternating")
    times: dict[tuple[str, int], list[float]] = {}
    for r in range(args.rounds):
        for job in jobs:
            for n in (counts if r % 2 == 0 else counts[::-1]):
                times.setdefault((job, n), []).append(_cell(job, n))
    print(f"{'job':<8}" + "".join(f"{f'{n} thr (s)':>12}" for n in counts)
          + "".join(f"{f'x{n} vs 1':>10}" for n in counts[1:]) + "   fastest")
    for job in jobs:
        med = {n: statistics.median(times[(job, n)]) for n in counts}
        best = min(med, key=med.get)
        print(f"{job:<8}" + "".join(f"{med[n]:>12.2f}" for n in counts)
              + "".join(f"{med[1] / med[n]:>10.2f}" for n in counts[1:]) + f"   {best}")


if __name__ == "__main__":
    main()
