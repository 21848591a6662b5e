"""`RelianceTracker` on TRL's `SFTTrainer` (tiny random Llama, a few steps): with and without a
peft config, with TRL's own prompt/completion dataset and collator, and `train_model(...,
trainer="trl")` giving the same records as the plain HF Trainer. Skipped without the `trl`
extra (`pip install '.[trl]'`)."""

import math

import pytest

from knowflow.data.instruction_rows import encode_all, prompt_and_response
from knowflow.data.suites import get_suite
from knowflow.errors import ConfigError
from knowflow.store.readers import read_jsonl
from knowflow.train.sft import SFTConfig, train_model
from knowflow.train.tracker import RelianceTracker, TrackerConfig

trl = pytest.importorskip("trl", reason="TRL is an optional extra: pip install '.[trl]'")


def _tracker(tok, out_dir):
    # float32 evaluation: the two trainers' weights differ by float rounding, which bfloat16
    # scoring would magnify
    cfg = TrackerConfig(every=2, batch_size=4, prompt_format="plain", dtype="float32")
    return RelianceTracker(tok, cfg,
                           out_dir, items={"cf-capitals": get_suite("cf-capitals", limit=3)})


def _trl_args(tmp_path, **extra):
    return trl.SFTConfig(output_dir=str(tmp_path / "ckpt"), max_steps=4,
                         per_device_train_batch_size=4, learning_rate=1e-2, logging_steps=1,
                         save_strategy="no", report_to=[], use_cpu=True, seed=0,
                         disable_tqdm=True, **extra)


def _prompt_completion(tok, rows):
    """TRL's own conversational-free format: prompt and completion text."""
    from datasets import Dataset

    pairs = [prompt_and_response(tok, r, "plain", True) for r in rows]
    return Dataset.from_list([{"prompt": p, "completion": c} for p, _, c in pairs])


def _check_records(records, steps):
    assert [r["step"] for r in records] == steps
    for r in records:
        assert 0 <= r["cf_acc"] <= 1 and r["cf-capitals/n"] == 3
        assert 0 < r["attn_context"] < 1
    # the loss is logged at every step (logging_steps=1): each record after the first has it
    assert all(r["train_loss"] is not None for r in records[1:])


@pytest.mark.parametrize("lora", [False, True], ids=["full", "peft_config"])
def test_tracker_on_sft_trainer(make_tiny_llama, tmp_path, tok, rows, lora):
    """TRL tokenizes and collates its own prompt/completion dataset; the tracker attaches."""
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                 task_type="CAUSAL_LM")
    trainer = trl.SFTTrainer(model=make_tiny_llama(tok), args=_trl_args(tmp_path),
                             train_dataset=_prompt_completion(tok, rows),
                             processing_class=tok, peft_config=peft_config)
    tracker = _tracker(tok, tmp_path).attach(trainer)
    trainer.train()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    _check_records(records, [0, 2, 4])
    assert records == tracker.records
    logged = [h for h in trainer.state.log_history if "reliance/cf_acc" in h]
    assert [h["reliance/cf_acc"] for h in logged] == [r["cf_acc"] for r in records]
    assert any("loss" in h for h in trainer.state.log_history)  # the loss log survived
    if lora:
        from peft import PeftModel

        assert isinstance(trainer.model, PeftModel)
        trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
        assert trainable and all("lora_" in n for n in trainable)


@pytest.mark.parametrize("train", ["full", "lora"])
def test_trl_trainer_matches_hf_trainer(make_tiny_llama, tmp_path, tok, rows, train):
    """The same tokenized rows, seed and steps through TRL's SFTTrainer and the HF Trainer:
    the same tracker records. Accuracies are equal; losses and attention agree to float
    rounding only, because TRL computes the loss itself (a fused LM head's per-token
    log-probabilities, summed and divided by the token count) instead of the model's
    cross-entropy: the same number, summed in another order."""
    data, _ = encode_all(tok, rows, "plain", 512)
    runs = {}
    for trainer in ("hf", "trl"):
        out = tmp_path / trainer
        cfg = SFTConfig(steps=4, batch_size=4, lr=1e-2, save_every=10, prompt_format="plain",
                        log_every=1, train=train, lora_targets=("q_proj", "v_proj"),
                        trainer=trainer)
        train_model(make_tiny_llama(tok), tok, data, cfg, out, [_tracker(tok, out)])
        runs[trainer] = read_jsonl(out / "metrics.jsonl")
    hf, tr = runs["hf"], runs["trl"]
    _check_records(tr, [0, 2, 4])
    for a, b in zip(hf, tr, strict=True):
        assert a.keys() == b.keys()
        for key in a.keys() - {"eval_seconds"}:
            if isinstance(a[key], float) and "acc" not in key.split("/")[-1]:
                assert math.isclose(a[key], b[key], rel_tol=1e-5), key
            elif key == "attn_context_layers":
                assert a[key] == pytest.approx(b[key], abs=1e-5)
            else:
                assert a[key] == b[key], key


def test_trainer_name_checked():
    with pytest.raises(ConfigError, match="'trainer': 'deepspeed' is not one of hf, trl"):
        SFTConfig(trainer="deepspeed").validate()


def test_cli_sft_trainer_trl(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from knowflow.cli import app
    from knowflow.store.readers import read_json

    res = CliRunner().invoke(app, [
        "sft", "--model", str(tiny_model_dir), "--trainer", "trl", "--steps", "2",
        "--batch-size", "4", "--track-every", "1", "--track-limit", "2", "--prompt-format",
        "plain", "--runs-dir", str(tmp_path), "--set", "mixture.size=40"])
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "sft").iterdir()
    assert read_json(run / "config.json")["sft"]["trainer"] == "trl"
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2]
