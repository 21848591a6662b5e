"""The README's and docs' fast examples rerun to the outputs they show
(benchmarks/docs_examples.py --check: timings, timestamps and temporary paths masked)."""

import pytest

from helpers import load_benchmark

pytestmark = pytest.mark.slow  # loads SmolLM2 and runs its examples: minutes on two cores


def test_the_fast_examples_print_what_the_docs_show(capsys):
    docs_examples = load_benchmark("docs_examples")
    code = docs_examples.main(["--check"])
    assert code == 0, capsys.readouterr().out


def test_masking_hides_timings_and_timestamps_only():
    docs_examples = load_benchmark("docs_examples")
    assert docs_examples.mask("results: runs/eval/20261206-012611 (21.2 s: load 0.6 s)") == \
        "results: runs/eval/<timestamp> (<time>: load <time>)"
    assert docs_examples.mask("(40, 25)") == "(40, 25)"
