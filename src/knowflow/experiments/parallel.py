"""Independent jobs of an experiment in worker processes (spawned; one torch thread each,
which is the fast configuration for small models on CPU).

Workers never outlive the run: they are started with SIGINT blocked (a Ctrl-C at the terminal
reaches the whole process group; the parent alone handles it, so no worker prints a
KeyboardInterrupt traceback, even while still importing), on Linux they are killed when the
parent dies (`PR_SET_PDEATHSIG`), and when the parent stops early (Ctrl-C, SIGTERM, an error)
it kills them rather than waiting for their jobs, so no worker, and no multiprocessing
resource tracker held open by them, is left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

_PR_SET_PDEATHSIG = 1


def _worker_init() -> None:
    """In each worker: die with the parent (Linux), ignore SIGINT (the parent handles it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _one_thread(fn, *args):
    import torch

    torch.set_num_threads(1)
    return fn(*args)


@contextlib.contextmanager
def _sigint_blocked():
    """SIGINT held back (not lost: delivered on exit) while workers are started, so they
    start with it blocked and never see a terminal's Ctrl-C."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - Windows
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Kill the workers now (their jobs are lost; a resumed run redoes them), then close."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError):
            proc.kill()
    pool.shutdown(wait=True, cancel_futures=True)


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
    with _sigint_blocked():  # the resource tracker starts here
        pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init)

    def submit(fn, *args):
        with _sigint_blocked():  # a worker started now inherits the blocked SIGINT
            return pool.submit(_one_thread, fn, *args)

    try:
        pending = {submit(first, *job): (i, job) for i, job in enumerate(first_jobs)}
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
                    pending[submit(then, *job2)] = (None, job2)
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
    return firsts
