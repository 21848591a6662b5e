"""`experiments.parallel`: jobs in worker processes give what they give in this process, and a
pipeline's second stage starts from each first-stage result."""

import operator

import pytest

from knowflow.experiments.parallel import run_jobs, run_pipeline


@pytest.mark.parametrize("workers", [1, 2])
def test_run_jobs_returns_results_in_job_order(workers):
    jobs = [(2, k) for k in range(6)]
    seen = []
    assert run_jobs(pow, jobs, workers, lambda job, r: seen.append((job, r))) == [
        1, 2, 4, 8, 16, 32]
    assert sorted(seen) == [((2, k), 2 ** k) for k in range(6)]


@pytest.mark.parametrize("workers", [1, 2])
def test_pipeline_runs_each_follow_up_once_on_its_first_result(workers):
    firsts = [(2, k) for k in range(4)]
    done = []
    out = run_pipeline(pow, firsts, operator.mul,
                       lambda job, result: [(result, m) for m in range(job[1])],
                       workers, lambda job, result: done.append((job, result)))
    assert out == [1, 2, 4, 8]
    # job (2, k) gives 2**k and then k second-stage jobs 2**k * m
    assert sorted(done) == sorted(((2 ** k, m), 2 ** k * m) for k in range(4)
                                  for m in range(k))


def test_pipeline_error_in_a_job_reaches_the_caller():
    with pytest.raises(ZeroDivisionError):
        run_pipeline(operator.truediv, [(1, 1), (1, 0)], operator.truediv,
                     lambda job, result: [(result, 1)], 2)
