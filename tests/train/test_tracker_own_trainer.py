"""`RelianceTracker` in a user's own HF Trainer, on the user's own conflict file: items from
`knowflow.load_items` (any file `knowflow eval --data` reads), the tracker passed as an
ordinary callback (no `attach`), its numbers forwarded to whatever `report_to` the Trainer has
(TensorBoard event files and W&B's offline run read back), `stop_drop` saying when and why it
stopped, and `knowflow report` on the folder it leaves."""

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import knowflow
from knowflow.cli import app
from knowflow.data.facts import ConflictItem
from knowflow.errors import ConfigError, DataError
from knowflow.store.readers import read_json, read_jsonl
from knowflow.train.tracker import RelianceTracker, TrackerConfig, stop_reason, tracked_items

CAPITALS = [("France", "Paris", "Lyon"), ("Italy", "Rome", "Milan"), ("Japan", "Tokyo", "Osaka"),
            ("Spain", "Madrid", "Seville"), ("Brazil", "Brasilia", "Recife"),
            ("Egypt", "Cairo", "Giza")]
FIELDS = "context=passage,question=q,answer=ctx_answer,memory_answer=true_answer"


def _write_conflicts(path: Path) -> Path:
    """The user's own file, in a layout of their own (mapped with `fields`)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["passage", "q", "ctx_answer", "true_answer"])
        for country, true, fake in CAPITALS:
            w.writerow([f"The capital of {country} is {fake}.",
                        f"What is the capital of {country}?", fake, true])
    return path


@pytest.fixture
def conflicts(tmp_path) -> Path:
    return _write_conflicts(tmp_path / "my_conflicts.csv")


def test_load_items_reads_a_users_file_with_its_own_columns(conflicts, tmp_path):
    items = knowflow.load_items(conflicts, FIELDS)
    assert [type(i) for i in items] == [ConflictItem] * 6
    assert {i.suite for i in items} == {"my_conflicts"}
    assert (items[0].counterfactual_answer, items[0].parametric_answer) == ("Lyon", "Paris")
    assert items[0].context == "The capital of France is Lyon."
    # the same as a dict mapping; a seeded sample keeps the file's order
    assert knowflow.load_items(conflicts, dict(f.split("=") for f in FIELDS.split(","))) == items
    two = knowflow.load_items(conflicts, FIELDS, limit=2, seed=3)
    assert len(two) == 2 and two == knowflow.load_items(conflicts, FIELDS, limit=2, seed=3)
    assert [items.index(i) for i in two] == sorted(items.index(i) for i in two)
    jsonl = tmp_path / "mine.jsonl"  # knowflow's own field names need no mapping
    jsonl.write_text(json.dumps({"context": "Ann lives in Oslo.", "question": "Where does Ann "
                                 "live?", "answer": "Oslo", "memory_answer": "Rome"}) + "\n")
    assert knowflow.load_items(jsonl)[0].counterfactual_answer == "Oslo"


def test_bad_files_name_the_file_line_and_field(conflicts, tmp_path):
    with pytest.raises(ConfigError, match="track.fields"):
        TrackerConfig(suites=(str(conflicts),), fields="context").validate()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"context": "c", "question": "q", "answer": "x",
                               "memory_answer": "b"}) + "\n" + json.dumps({"context": "c"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl, line 2: field 'question'"):
        knowflow.load_items(bad)


def test_suites_and_files_mix(conflicts):
    items = tracked_items(["cf-capitals", str(conflicts)], FIELDS, limit=3, seed=0)
    assert list(items) == ["cf-capitals", "my_conflicts"]
    assert [len(v) for v in items.values()] == [3, 3]
    with pytest.raises(ConfigError, match="nothing to track"):
        tracked_items([])


def _trainer(model, tok, rows, out: Path, report_to: list[str], tracker, steps: int = 4):
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from knowflow.data.instruction_rows import encode_all

    encoded, _ = encode_all(tok, rows, "chat", 256)
    args = TrainingArguments(output_dir=str(out / "ckpt"), max_steps=steps,
                             per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1,
                             save_strategy="no", report_to=report_to, use_cpu=True,
                             disable_tqdm=True)
    return Trainer(model=model, args=args, train_dataset=list(encoded),
                   data_collator=DataCollatorForSeq2Seq(tok, padding=True),
                   callbacks=[tracker])  # an ordinary callback: no attach(trainer)


def test_own_trainer_with_a_users_file_forwards_to_tensorboard(
        conflicts, tmp_path, tok, make_tiny_llama, rows, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp_path / "tb"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(logdir))
    out = tmp_path / "my-sft"
    tracker = RelianceTracker(tok, TrackerConfig(every=2), out,
                              items=knowflow.load_items(conflicts, FIELDS))
    _trainer(make_tiny_llama(tok), tok, rows, tmp_path, ["tensorboard"], tracker).train()
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 2, 4]
    assert all(r["n"] == 6 and r["my_conflicts/n"] == 6 for r in records)
    events = EventAccumulator(str(logdir))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("train/reliance/cf_acc")]
    assert logged == [(r["step"], pytest.approx(r["cf_acc"])) for r in records]
    assert [e.step for e in events.Scalars("train/reliance/my_conflicts/attn_context")] == \
        [0, 2, 4]
    assert len(events.Scalars("train/loss")) == 4  # the Trainer's own logs still go out
    # and the folder it left is a report
    res = CliRunner().invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert "no inversion" in res.output or "inversion" in res.output
    page = (out / "report.html").read_text()
    assert "tracker my-sft" in page and "reliance.png" in page and "Wilson" in page


def test_own_trainer_forwards_to_wandb_offline(conflicts, tmp_path, tok, make_tiny_llama, rows,
                                               monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = RelianceTracker(tok, TrackerConfig(every=2, attention=False), tmp_path / "out",
                              items=knowflow.load_items(conflicts, FIELDS))
    import wandb

    logged: list[dict] = []
    real_log = wandb.sdk.wandb_run.Run.log

    def log(run, data, *args, **kwargs):  # what the W&B callback hands the (offline) run
        logged.append(dict(data))
        return real_log(run, data, *args, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", log)
    trainer = _trainer(make_tiny_llama(tok), tok, rows, tmp_path, ["wandb"], tracker, steps=2)
    try:
        trainer.train()
        assert wandb.run is not None and wandb.run.settings.mode == "offline"
        summary = dict(wandb.run.summary)
    finally:
        wandb.finish()
    steps = [(d["train/global_step"], d["train/reliance/cf_acc"]) for d in logged
             if "train/reliance/cf_acc" in d]
    assert steps == [(r["step"], r["cf_acc"]) for r in tracker.records]
    assert summary["train/reliance/cf_acc"] == pytest.approx(tracker.records[-1]["cf_acc"])
    assert summary["train/reliance/my_conflicts/n"] == 6
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))  # written offline


class _Scripted(RelianceTracker):
    """Counterfactual accuracy from a script instead of a model (the stop rule's test)."""

    def __init__(self, tok, curve, **cfg):
        super().__init__(tok, TrackerConfig(every=1, **cfg), items={"s": [_item()]})
        self.curve = list(curve)

    def measure(self, model):
        cf = self.curve.pop(0)
        return {"n": 32, "cf_acc": cf, "param_acc": 1 - cf}


def _item() -> ConflictItem:
    return knowflow.get_suite("cf-capitals", limit=1)[0]


def test_stop_drop_records_when_and_why(tok, make_tiny_llama, rows, tmp_path):
    tracker = _Scripted(tok, [0.3, 0.53, 0.45, 0.31, 0.9, 0.9], stop_drop=0.2)
    _trainer(make_tiny_llama(tok), tok, rows, tmp_path, [], tracker, steps=5).train()
    assert [r["step"] for r in tracker.records] == [0, 1, 2, 3]  # stopped after step 3
    stopped = tracker.summary()["stopped_early"]
    assert stopped == tracker.stopped == tracker.records[-1]["stopped"]
    assert stopped["reason"] == ("stopped at step 3: counterfactual accuracy 0.31 fell 0.22 "
                                 "below its peak 0.53 (step 1); --stop-drop 0.2")
    assert (stopped["step"], stopped["peak_step"], stopped["stop_drop"]) == (3, 1, 0.2)
    assert stop_reason({"step": 4, "cf_acc": 0.5}, {"step": 0, "cf_acc": 0.75}, 0.25)[
        "drop"] == 0.25
    assert _Scripted(tok, [0.5]).summary() == {} and _Scripted(tok, [0.5]).stopped is None


def test_a_tracker_folder_says_what_it_tracks(tok, make_tiny_llama, rows, tmp_path):
    """tracker.json names the model, the tracked data and the label, for the report."""
    out = tmp_path / "tracked"
    tracker = RelianceTracker(tok, TrackerConfig(every=2, label="curated"), out,
                              items={"s": [_item()]})
    tracker.measure = lambda model: {"n": 1, "cf_acc": 0.5, "param_acc": 0.5}
    model = make_tiny_llama(tok)
    model.config.name_or_path = "org/tiny-llama"
    _trainer(model, tok, rows, tmp_path, [], tracker, steps=2).train()
    assert read_json(out / "tracker.json") == {"model": "org/tiny-llama", "data": ["s"],
                                               "label": "curated"}


def test_the_limit_samples_items_given_as_it_samples_suites(tok):
    """TrackerConfig.limit holds for items passed in (a seeded sample per suite, the same
    one every run), as for the suites and files it reads itself; None keeps every item."""
    items = knowflow.get_suite("cf-capitals", limit=10)
    eight = RelianceTracker(tok, TrackerConfig(limit=8), items=items).items["cf-capitals"]
    again = RelianceTracker(tok, TrackerConfig(limit=8), items=items).items["cf-capitals"]
    assert len(eight) == 8 and eight == again and set(eight) <= set(items)
    assert len(RelianceTracker(tok, TrackerConfig(limit=None), items=items).items[
        "cf-capitals"]) == 10
