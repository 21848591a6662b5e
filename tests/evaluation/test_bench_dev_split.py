"""bench_decoding's dev and fresh items never overlap the held-out items it reports, nor
each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import load_benchmark


@pytest.mark.parametrize("suite", ["cf-bio", "cf-world", "cf-capitals", "cf-phrasing:where"])
def test_dev_items_are_not_held_out_items(suite, tmp_path: Path):
    bench = load_benchmark("bench_decoding")
    held = bench.suite_items(suite, bench.HELD_OUT_MAX, 0, tmp_path)
    dev = bench.suite_items(suite, 32, 0, tmp_path, dev=True)
    assert dev and len(held) == bench.HELD_OUT_MAX
    assert not {i.id for i in held} & {i.id for i in dev}
    # the held-out items at any --limit are the first of the same order
    assert [i.id for i in bench.suite_items(suite, 24, 0, tmp_path)] == \
        [i.id for i in held[:24]]


@pytest.mark.parametrize("suite", ["cf-bio", "cf-capitals"])
def test_fresh_items_are_neither_held_out_nor_dev_items(suite, tmp_path: Path):
    bench = load_benchmark("bench_decoding")
    held = {i.id for i in bench.suite_items(suite, bench.HELD_OUT_MAX, 0, tmp_path)}
    dev = {i.id for i in bench.suite_items(suite, bench.HELD_OUT_MAX, 0, tmp_path, dev=True)}
    fresh = {i.id for i in bench.suite_items(suite, bench.HELD_OUT_MAX, 0, tmp_path,
                                             fresh=True)}
    assert len(dev) == bench.DEV_MAX and fresh  # dev stops at DEV_MAX; fresh is the rest
    assert not fresh & held and not fresh & dev and not dev & held
    with pytest.raises(SystemExit):
        bench.suite_items("cf-phrasing:name", 8, 0, tmp_path, fresh=True)
