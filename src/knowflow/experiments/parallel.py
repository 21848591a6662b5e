"""Independent jobs of an experiment in worker processes (spawned; one torch thread each,
which is the fast configuration for small models on CPU)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor


def _one_thread(fn, *args):
    import torch

    torch.set_num_threads(1)
    return fn(*args)


def run_jobs(fn: Callable, jobs: Sequence[tuple], workers: int,
             done: Callable | None = None) -> list:
    """`fn(*job)` for every job, in `workers` processes; `done(job, result)` as each ends."""
    results = []
    if workers > 1 and len(jobs) > 1:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=ctx) as pool:
            for job, fut in [(job, pool.submit(_one_thread, fn, *job)) for job in jobs]:
                results.append(fut.result())
                if done:
                    done(job, results[-1])
        return results
    for job in jobs:
        results.append(fn(*job))
        if done:
            done(job, results[-1])
    return results
