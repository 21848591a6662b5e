"""bench_explain's CPU ratio spread: the median over items and the ratio of each round of
consecutive items (summed seconds over summed seconds)."""

import pytest

from helpers import load_benchmark


def _row(cc: float, method: float) -> dict:
    return {"id": "x", "contextcite-batched_64": {"cpu": cc}, "gradient_0": {"cpu": method}}


def test_ratio_spread_per_item_and_per_round():
    bench = load_benchmark("peers/bench_explain")
    rows = [_row(10.0, 1.0), _row(30.0, 1.0), _row(20.0, 2.0)] * 3 + [_row(4.0, 2.0)]
    item, per_round = bench.ratio_spread(rows, "contextcite-batched_64", "gradient_0")
    assert item == 10.0                     # ratios 10, 30, 10 three times, then 2
    assert bench.ROUND == 8 and len(per_round) == 2
    # round 1: items 0-7 (cc 10+30+20+10+30+20+10+30 = 160, method 1+1+2+1+1+2+1+1 = 10)
    assert per_round[0] == pytest.approx(16.0)
    assert per_round[1] == pytest.approx((20.0 + 4.0) / (2.0 + 2.0))
    # an item the method did not run on is left out of both
    assert bench.ratio_spread([{"id": "y", "contextcite-batched_64": {"cpu": 5.0}}],
                              "contextcite-batched_64", "gradient_0")[1] == []


def test_labels_and_reference_rows_of_corrected_gradients():
    bench = load_benchmark("peers/bench_explain")
    assert bench._label("gradient_0") == "gradient (1 pass)"
    assert bench._label("gradient_2") == "gradient @2"
    assert bench._label("gradient+8_2") == "gradient @2 +8 ablations"
    assert bench._label("gradient+16_0") == "gradient (1 pass) +16 ablations"
    base = ["contextcite-batched_32", "contextcite-batched_64"]
    # a corrected gradient is a one-pass method: against the largest ContextCite count
    assert bench._reference("gradient+8_2", base) == "contextcite-batched_64"
    assert bench._reference("knowflow_32", base) == "contextcite-batched_32"
