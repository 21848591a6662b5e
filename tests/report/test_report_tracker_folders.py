"""`knowflow report` on folders a `RelianceTracker` wrote in someone's own Trainer
(`metrics.jsonl`, no config.json): the curve's peak, fall and Wilson intervals, the verdict by
the inversion criterion, several folders overlaid (one colour per run, legend = folder names),
and one clear error (file, line, field; exit 2; nothing written) for a bad folder."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.errors import DataError
from knowflow.evaluation.curves import THEORY, wilson_interval
from knowflow.report.html import render_report
from knowflow.report.tracker_run import read_tracker_records, tracker_summary

runner = CliRunner()
RISE_FALL = [0.30, 0.55, 0.50, 0.33]   # rises 0.25, falls 0.22: an inversion by THEORY
STEADY = [0.30, 0.40, 0.45, 0.47]


def _folder(root: Path, name: str, curve, n: int = 64, **extra) -> Path:
    folder = root / name
    folder.mkdir()
    recs = [{"step": 10 * i, "epoch": i / 4, "cf_acc": cf, "param_acc": 1 - cf, "n": n,
             "attn_context": 0.3 + i / 100, "train_loss": 2.0 - i / 10, **extra}
            for i, cf in enumerate(curve)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return folder


def test_wilson_interval_matches_hand_values():
    assert wilson_interval(0, 10) == pytest.approx([0.0, 0.27754], abs=1e-5)
    assert wilson_interval(0.5, 32) == pytest.approx([0.33631, 0.66369], abs=1e-5)
    assert wilson_interval(1, 10) == pytest.approx([0.72246, 1.0], abs=1e-5)
    assert wilson_interval(0.5, 0) is None


def test_summary_peak_fall_intervals_and_verdict(tmp_path):
    s = tracker_summary(read_tracker_records(_folder(tmp_path, "inv", RISE_FALL)))
    assert (s["cf_acc_peak"], s["cf_acc_peak_step"], s["final_step"]) == (0.55, 10, 30)
    assert s["cf_acc_rise"] == pytest.approx(0.25) and s["cf_acc_fall"] == pytest.approx(0.22)
    assert s["cf_acc_peak_interval"] == wilson_interval(0.55, 64)
    assert s["cf_acc_final_interval"] == wilson_interval(0.33, 64)
    f = s["findings"]
    assert f["inversion"] is True and f["fall_beyond_interval"] is False  # 64 items: overlap
    assert f["verdict"].startswith("inversion: counterfactual accuracy went from 0.30 to its "
                                   "peak 0.55 at step 10 (rise 0.25), then to 0.33 at step 30 "
                                   "(fall 0.22)")
    assert f"rise >= {THEORY.rise} and fall >= {THEORY.fall}" in f["verdict"]
    big = tracker_summary(read_tracker_records(_folder(tmp_path, "big", RISE_FALL, n=1000)))
    assert big["findings"]["fall_beyond_interval"] is True
    assert "intervals do not overlap" in big["findings"]["verdict"]
    steady = tracker_summary(read_tracker_records(_folder(tmp_path, "steady", STEADY)))
    assert steady["findings"]["inversion"] is False
    assert steady["findings"]["verdict"].startswith("no inversion: ")


def test_a_stopped_run_says_why(tmp_path):
    why = {"step": 30, "reason": "stopped at step 30: counterfactual accuracy 0.33 fell 0.22 "
                                 "below its peak 0.55 (step 10); --stop-drop 0.2"}
    folder = _folder(tmp_path, "stopped", RISE_FALL)
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    lines[-1] = json.dumps({**json.loads(lines[-1]), "stopped": why})
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    s = tracker_summary(read_tracker_records(folder))
    assert s["stopped_early"] == why and why["reason"] in s["findings"]["verdict"]


def test_report_one_tracker_folder(tmp_path):
    folder = _folder(tmp_path, "my-sft", RISE_FALL)
    res = runner.invoke(app, ["report", str(folder)])
    assert res.exit_code == 0, res.output
    assert "inversion: counterfactual accuracy went from 0.30" in " ".join(res.output.split())
    page = (folder / "report.html").read_text()
    assert (folder / "figures" / "reliance.png").exists()
    assert "tracker my-sft" in page and "data:image/png;base64," in page
    peak = f"0.550 ({wilson_interval(0.55, 64)[0]:.3f}–{wilson_interval(0.55, 64)[1]:.3f})"
    assert peak in page and "Wilson" in page and "cf_acc_peak_interval" not in page
    assert 'id="overlay"' not in page  # one run: nothing to overlay


def test_report_overlays_several_folders(tmp_path, drawn):
    a, b = _folder(tmp_path, "lora", RISE_FALL), _folder(tmp_path, "full", STEADY)
    out = tmp_path / "both.html"
    res = runner.invoke(app, ["report", str(a), str(b), "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert page.count("<section") == 3 and 'id="overlay"' in page
    overlay = drawn[-1]  # the page's own figure, drawn after each folder's
    cf = overlay.axes[0]
    labelled = {line.get_label(): list(line.get_ydata()) for line in cf.lines
                if not line.get_label().startswith("_")}
    assert labelled == {"lora": RISE_FALL, "full": STEADY}
    colours = {line.get_label(): line.get_color() for line in cf.lines
               if not line.get_label().startswith("_")}
    assert colours["lora"] != colours["full"]
    assert len(cf.collections) == 2  # one shaded Wilson band per run
    assert [t.get_text() for t in cf.get_legend().get_texts()] == ["lora", "full"]


def test_same_folder_names_are_told_apart(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a, b = _folder(tmp_path / "x", "run", RISE_FALL), _folder(tmp_path / "y", "run", STEADY)
    page = render_report([a, b])
    assert 'id="overlay"' in page and "tracker run" in page



def test_runs_are_named_by_model_data_and_arm(tmp_path, drawn):
    """Two sft runs of the same command (folders named by time) and a tracker folder that
    wrote its tracker.json: each verdict line and the overlay's legend say what the run ran
    on — the arm, the model and the data — not a timestamp."""
    runs = []
    for i, (train, curve) in enumerate((("lora", RISE_FALL), ("full", STEADY))):
        run = _folder(tmp_path, f"2026120{i}-000000", curve)
        (run / "config.json").write_text(json.dumps(
            {"model": "models/SmolLM2-135M", "data": "data/train.jsonl",
             "sft": {"train": train}, "curate": {"mode": "none"}}))
        (run / "run.json").write_text(json.dumps({"command": "sft"}))
        runs.append(run)
    tracked = _folder(tmp_path, "mine", STEADY)
    (tracked / "tracker.json").write_text(json.dumps(
        {"model": "org/tiny", "data": ["cf-capitals"], "label": "curated"}))
    page = render_report([*runs, tracked])
    assert "<b>sft</b></a> (lora on SmolLM2-135M, train.jsonl):" in page
    assert "<b>sft</b></a> (full on SmolLM2-135M, train.jsonl):" in page
    assert "(curated on tiny, cf-capitals):" in page
    legend = [t.get_text() for t in drawn[-1].axes[0].get_legend().get_texts()]
    assert legend == ["lora on SmolLM2-135M, train.jsonl", "full on SmolLM2-135M, train.jsonl",
                      "curated on tiny, cf-capitals"]
    res = runner.invoke(app, ["report", *map(str, runs), str(tracked), "--out",
                              str(tmp_path / "all.html")], terminal_width=200)
    assert res.exit_code == 0, res.output
    # the command prints every run's verdict, an sft run's as a tracker folder's
    assert f"{runs[0]}: (lora on SmolLM2-135M, train.jsonl) " in res.output
    assert f"{tracked}: (curated on tiny, cf-capitals) " in res.output

@pytest.mark.parametrize("content,where", [
    ('{"step": 0, "cf_acc": 0.5}\n{"step": 1, "cf_acc": 0.5\n', "line 2: damaged JSON line"),
    ('{"step": 0, "cf_acc": 0.5}\n\n{"step": 2, "cf_acc": 1.5}\n', "line 3: field 'cf_acc'"),
    ('{"step": 0, "cf_acc": 0.5}\n{"step": "x", "cf_acc": 0.5}\n', "line 2: field 'step'"),
    ('{"step": 5, "cf_acc": 0.5}\n{"step": 5, "cf_acc": 0.5}\n', "line 2: field 'step'"),
    ('{"step": 0, "param_acc": 0.5}\n', "line 1: field 'cf_acc'"),
    ('{"step": 0, "cf_acc": 0.5, "n": 0}\n', "line 1: field 'n'"),
    ('{"step": 0, "cf_acc": 0.5, "train_loss": "low"}\n', "line 1: field 'train_loss'"),
    ('[1, 2]\n', "line 1: must be a JSON object, got a list"),
    ('{"step": 0, "cf_acc": NaN}\n', "line 1: field 'cf_acc': must be a finite number"),
    ('{"step": 0, "cf_acc": 0.5, "n": true}\n', "line 1: field 'n': must be an integer"),
    ("\n", "no records"),
])
def test_bad_folders_name_the_file_line_and_field(tmp_path, content, where):
    good = _folder(tmp_path, "good", RISE_FALL)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.jsonl").write_text(content)
    with pytest.raises(DataError, match="metrics.jsonl"):
        read_tracker_records(bad)
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(good), str(bad), "--out", str(out)])
    assert res.exit_code == 2
    assert f"{bad / 'metrics.jsonl'}" in res.output and where in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not out.exists() and not (good / "figures").exists()  # nothing half-written


def test_a_folder_without_metrics_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(app, ["report", str(empty)])
    assert res.exit_code == 2 and "no metrics.jsonl" in res.output and "no config.json" in \
        res.output
    assert list(empty.iterdir()) == []
    res = runner.invoke(app, ["report", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such" in res.output
