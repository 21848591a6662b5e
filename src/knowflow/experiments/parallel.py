"""Independent jobs of an experiment in worker processes (spawned; one torch thread each,
which is the fast configuration for small models on CPU)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait


def _one_thread(fn, *args):
    import torch

    torch.set_num_threads(1)
    return fn(*args)


def run_jobs(fn: Callable, jobs: Sequence[tuple], workers: int,
             done: Callable | None = None) -> list:
    """`fn(*job)` for every job, in `workers` processes; `done(job, result)` as each ends."""
    return run_pipeline(fn, jobs, fn, lambda job, result: [], workers if len(jobs) > 1 else 1,
                        first_done=done)


def run_pipeline(first: Callable, first_jobs: Sequence[tuple], then: Callable,
                 follow: Callable[[tuple, object], Sequence[tuple]], workers: int,
                 done: Callable | None = None, first_done: Callable | None = None) -> list:
    """Two stages in one pool: `first(*job)` for every job of `first_jobs`, and as each ends,
    `then(*job2)` for every `job2` of `follow(job, result)`. A second-stage job starts as soon
    as its own first-stage job has ended, so no worker idles at the end of the first stage
    while another still runs (e.g. finetuning seed 0 while seed 4 pretrains). Returns the
    first stage's results in the order of `first_jobs`; `first_done(job, result)` and
    `done(job2, result)` are called in this process as jobs end. Each job's result depends
    only on its arguments, so the order in which jobs end changes nothing they compute."""
    firsts: list = [None] * len(first_jobs)
    if workers <= 1:
        for i, job in enumerate(first_jobs):
            firsts[i] = first(*job)
            if first_done:
                first_done(job, firsts[i])
            for job2 in follow(job, firsts[i]):
                result = then(*job2)
                if done:
                    done(job2, result)
        return firsts
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=ctx)
    try:
        pending = {pool.submit(_one_thread, first, *job): (i, job)
                   for i, job in enumerate(first_jobs)}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                i, job = pending.pop(fut)
                result = fut.result()
                if i is None:
                    if done:
                        done(job, result)
                    continue
                firsts[i] = result
                if first_done:
                    first_done(job, result)
                for job2 in follow(job, result):
                    pending[pool.submit(_one_thread, then, *job2)] = (None, job2)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return firsts
