"""--max-memory: the estimate against measured peak memory, the refusal's numbers, refusals
before anything is written, and probes sizing their variant rows down without changing a
result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from helpers import SHARP, byte_bpe, save_model_folder
from knowflow.cli import app
from knowflow.errors import ConfigError
from knowflow.lens import memory
from knowflow.lens.memory import GIB, Shape, check_budget, fit_rows, largest_batch

runner = CliRunner()
SHAPE = Shape(params=100_000_000, bytes_per=4, layers=12, d_model=768, d_ff=3072, heads=12,
              kv_heads=12, head_dim=64, vocab=50_000)


def test_largest_batch_bisects():
    assert largest_batch(lambda n: 10 * n, 95, 64) == 9
    assert largest_batch(lambda n: 10 * n, 5, 64) == 0
    assert largest_batch(lambda n: 10 * n, 10_000, 64) == 64


def test_refusal_names_the_numbers_and_a_batch_that_fits():
    act = memory.eval_bytes(SHAPE, 1000, 8)
    fits = largest_batch(act, 2 * GIB - SHAPE.weights, 64)
    assert 1 <= fits < 64
    with pytest.raises(ConfigError) as err:
        check_budget(SHAPE, act, 64, 2.0, what="prompts of up to 1000 tokens")
    text = str(err.value)
    needed = (SHAPE.weights + act(64)) / GIB
    assert f"needs about {needed:.2f} GiB at batch 64" in text
    assert "--max-memory 2 GiB" in text and f"try --batch-size {fits}" in text
    assert err.value.field == "max_memory"  # named --max-memory by a command
    assert check_budget(SHAPE, act, fits, 2.0) <= 2 * GIB          # the suggestion fits


def test_batch_one_too_big_says_what_would_fit():
    with pytest.raises(ConfigError, match="even batch 1 needs about"):
        check_budget(SHAPE, memory.eval_bytes(SHAPE, 1000, 8), 16, 0.2)


def test_rows_sized_down_not_refused():
    act = memory.variant_bytes(SHAPE, 2048)
    rows = fit_rows(SHAPE, act, 128, 1.0)
    assert 1 <= rows < 128 and SHAPE.weights + act(rows) <= GIB < SHAPE.weights + act(rows + 1)
    assert fit_rows(SHAPE, act, 128, None) == 128


def test_memory_grows_linearly_in_batch_and_context_for_flash_attention():
    """No term quadratic in the context outside eager attention's scores and the masks."""
    act = memory.variant_bytes(SHAPE, 1000)
    assert act(12) - act(8) == act(8) - act(4)
    kv = [memory.inference_bytes(SHAPE, 1, 1, cached=c) for c in (1000, 2000, 3000)]
    assert kv[2] - kv[1] == kv[1] - kv[0]


# Measured on the script's 3-layer random Llama (sdpa attention, float32, one thread): the
# estimate within a factor of two of the peak resident memory the job added.
@pytest.mark.slow
# Sizes other than the ones the constants were set from (lens/memory.py's docstring).
@pytest.mark.parametrize("job,chars,batch", [("eval-loglik", 2500, 6),
                                             ("eval-generate", 2500, 6), ("sft", 1500, 3),
                                             ("knockout", 2500, 48)])
def test_estimate_within_a_factor_of_two_of_measured_peak(job, chars, batch):
    ratio, row = _estimate_over_measured(job, chars, batch)
    assert 0.5 <= ratio <= 2.0, row


def _estimate_over_measured(job: str, chars: int, batch: int) -> tuple[float, dict]:
    script = Path(__file__).parents[1] / "memory_peak_script.py"
    proc = subprocess.run([sys.executable, str(script), job, str(chars), str(batch)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    return row["estimate"] / row["measured"], row


# The probes' rows in several batches (10 knockout rows by 4; 19 heads rows by 4 or at once):
# each batch's copy of the prompt's cache must be gone before the next is made (it was not:
# two batches' copies, about half the estimate at 4 rows), and the estimate counts the
# prompt's own cache and the copy being repeated. Measured: 0.78-1.11.
@pytest.mark.slow
@pytest.mark.parametrize("job,batch", [("knockout", 4), ("heads", 4), ("heads", 19)])
def test_probe_estimate_tracks_measured_peak_over_batches(job, batch):
    ratio, row = _estimate_over_measured(job, 2500, batch)
    assert 0.7 <= ratio <= 1.45, row


@pytest.fixture(scope="module")
def model_dir(make_tiny_llama, tmp_path_factory):
    tok = byte_bpe()
    return save_model_folder(tmp_path_factory.mktemp("tiny-llama"),
                             make_tiny_llama(tok, layers=2, **{**SHARP, "max_positions": 512}),
                             tok)


def _refused(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert lines[0].startswith("error:") and "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in result.output, result.output


def test_eval_refused_before_anything_is_written(model_dir, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--model", str(model_dir), "--suite", "cf-capitals",
                                 "--limit", "2", "--threads", "1", "--max-memory", "0.0001",
                                 "--out", str(out)])
    _refused(result, "--max-memory", "needs about")
    assert not out.exists()


def test_eval_batch_zero_sized_to_the_budget(model_dir, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--model", str(model_dir), "--suite", "cf-capitals",
                                 "--limit", "3", "--threads", "1", "--scoring", "loglik",
                                 "--batch-size", "0", "--max-memory", "0.05", "--out", str(out)])
    assert result.exit_code == 0, result.output
    from knowflow.lens.load import load_model

    model, tok = load_model(str(model_dir), device="cpu", dtype="float32")
    shape = memory.shape_of(model)
    longest = max(len(tok(json.loads(line)["prompt"])["input_ids"])
                  for line in (out / "items.jsonl").read_text().splitlines())
    expected = largest_batch(memory.eval_bytes(shape, longest, 8),
                             int(0.05 * GIB) - shape.weights, 1024)
    assert 1 < expected < 1024
    assert json.loads((out / "config.json").read_text())["batch_size"] == expected


def test_sft_refused_before_anything_is_written(model_dir, tmp_path):
    runs = tmp_path / "runs"
    result = runner.invoke(app, ["sft", "--model", str(model_dir), "--steps", "1",
                                 "--batch-size", "4", "--no-track", "--threads", "1",
                                 "--set", "mixture.size=8", "--max-memory", "0.0001",
                                 "--runs-dir", str(runs)])
    _refused(result, "--max-memory", "needs about", "batch 4")
    assert not any(p.is_file() for p in runs.rglob("*")) if runs.exists() else True


def test_knockout_rows_sized_down_give_the_same_records(model_dir, tmp_path):
    """A budget that leaves room for a few variant rows per pass changes no number."""
    from knowflow.lens.load import load_model
    from knowflow.probes.examples import builtin_facts
    from knowflow.probes.knockout import KnockoutConfig, knockout

    model, tok = load_model(str(model_dir), device="cpu", dtype="float32")
    shape = memory.shape_of(model)
    act = memory.variant_bytes(shape, 40)
    rows = next(r for r in range(2, 128) if act(r) > act(r - 1))  # above the prompt pass's
    budget = (shape.weights + act(rows)) / GIB                    # floor: rows decide
    assert 1 < memory.prompt_rows(model, 40, 128, budget) == rows < 7  # of 7 variant rows
    facts = builtin_facts()[:2]
    cfg = KnockoutConfig(known_only=False, window=1)
    full = knockout(model, tok, facts, cfg)
    small = knockout(model, tok, facts, KnockoutConfig(known_only=False, window=1,
                                                        max_memory=budget))
    assert [r["rel_change"] for r in small] == pytest.approx([r["rel_change"] for r in full],
                                                              abs=1e-5)


def test_explain_refused_before_anything_is_written(model_dir, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["explain", "--model", str(model_dir), "--context",
                                 "Paris is in Italy. The sky is green.", "--question",
                                 "Where is Paris?", "--threads", "1", "--max-memory", "0.0001",
                                 "--out", str(out)])
    _refused(result, "--max-memory", "needs about", "even batch 1")
    assert not out.exists()
