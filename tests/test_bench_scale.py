"""bench_scale's rounds: each cell's median over its rounds, and knowflow / peer ratios paired
round by round (the figures docs/findings/scale.md reports)."""

import pytest

from helpers import load_benchmark


def _row(job: str, cpu: float, rnd: int | None) -> dict:
    row = {"model": "m", "job": job, "context": 256, "n": 1, "params": 1, "context_tokens": 265,
           "cpu_s": cpu, "wall_s": 2 * cpu, "peak_mib": 100.0 + cpu, "built_mib": 90.0}
    return row if rnd is None else {**row, "round": rnd}


def test_medians_and_round_paired_ratios():
    bench = load_benchmark("scale/bench_scale")
    rows = [_row("explain", c, r) for r, c in enumerate((12.0, 30.0, 13.0))] + \
        [_row("contextcite", c, r) for r, c in enumerate((15.0, 31.0, 14.0))]
    (explain, cite) = sorted(bench.medians(rows), key=lambda r: r["job"] != "explain")
    assert (explain["cpu_s"], explain["rounds"], explain["cpu_lo"], explain["cpu_hi"]) == \
        (13.0, 3, 12.0, 30.0)
    assert explain["wall_s"] == 26.0 and "round" not in explain and cite["cpu_s"] == 15.0
    paired = bench.round_ratios(rows)[("m", "explain", "contextcite", 256, 1)]
    assert paired == pytest.approx([12 / 15, 30 / 31, 13 / 14])     # round with round
    line = bench.ratios(bench.medians(rows), bench.round_ratios(rows))[0]
    assert "cpu 0.87" in line and f"median {13 / 14:.2f} over 3 rounds" in line
    # a row of an older run (no round) is its cell's one round
    assert bench.medians([_row("explain", 5.0, None)])[0]["rounds"] == 1


def test_sft_against_both_plain_trainers():
    """sft is compared with the plain Trainer and with the Trainer that evaluates the same
    items through lm-eval, each round with its own round."""
    bench = load_benchmark("scale/bench_scale")
    rows = [_row("sft", 11.0, 0), _row("trainer-sft", 10.0, 0),
            _row("trainer-sft-lmeval", 12.0, 0)]
    pairs = bench.round_ratios(rows)
    assert pairs[("m", "sft", "trainer-sft", 256, 1)] == pytest.approx([1.1])
    assert pairs[("m", "sft", "trainer-sft-lmeval", 256, 1)] == pytest.approx([11 / 12])
    lines = bench.ratios(bench.medians(rows), pairs)
    assert [line.split(":")[0] for line in lines] == ["sft / trainer-sft",
                                                       "sft / trainer-sft-lmeval"]


def test_a_capped_cell_holds_malloc_before_building_and_runs_the_plain_job(monkeypatch):
    """JOB+capped: glibc's malloc is held as --max-memory holds it before the model is built,
    the job run is JOB's own, and the pair's ratio is reported against JOB."""
    import knowflow.lens.allocator as allocator

    bench = load_benchmark("scale/bench_scale")
    calls = []
    monkeypatch.setattr(allocator, "hold_to_budget", lambda: calls.append("hold"))

    class Tiny:
        def parameters(self):
            return []

    class Item:
        context = "a b c"

    def tok(text):
        return {"input_ids": text.split()}

    monkeypatch.setattr(bench, "build_model", lambda name: calls.append("build") or (Tiny(), tok))
    monkeypatch.setattr(bench, "long_items", lambda tok, n, ctx: [Item()] * n)
    monkeypatch.setattr(bench, "run_job", lambda job, *a: calls.append(job) or {})
    row = bench.cell("m", "eval-loglik+capped", 0, 1)
    assert calls[:2] == ["hold", "build"] and calls[2:] == ["eval-loglik", "eval-loglik"]
    assert row["job"] == "eval-loglik+capped" and row["n"] == bench.ITEMS["eval-loglik"]
    calls.clear()
    bench.cell("m", "eval-loglik", 0, 1)
    assert "hold" not in calls
    rows = [_row("eval-loglik+capped", 11.5, 0), _row("eval-loglik", 10.0, 0)]
    assert bench.round_ratios(rows)[("m", "eval-loglik+capped", "eval-loglik", 256, 1)] == \
        pytest.approx([1.15])
