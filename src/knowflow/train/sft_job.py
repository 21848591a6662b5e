"""One complete `knowflow sft` job: load a model and instruction data, finetune it with the
reliance tracker, save the model, and summarize the reliance curve.

The run directory gets `data.jsonl` (the exact training rows), `metrics.jsonl` (one tracker
record per evaluation), `checkpoints/` (Trainer checkpoints, for resuming), `model/` (the final
weights: only the adapter for LoRA), with `track.keep_peak`, `peak/`, and with
`curate.mode=dynamic`, `curation.jsonl` (the rows dropped at each re-scoring).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from knowflow.config import require
from knowflow.data.instruction_rows import (
    Instruction,
    encode_all,
    load_instructions,
    read_instruction_file,
    save_instructions,
)
from knowflow.data.instructions import MixtureConfig, builtin_mixture, heldout_items
from knowflow.data.prompts import resolve_format
from knowflow.errors import DataError
from knowflow.io import atomic_write_folder
from knowflow.lens.adapt import check_targets, lora_targets
from knowflow.lens.load import load_model
from knowflow.runs import Progress
from knowflow.train.curation import DynamicCurationConfig, dynamic_curation
from knowflow.train.sft import SFTConfig, StepProgress, train_model
from knowflow.train.tracker import RelianceTracker, TrackerConfig

log = logging.getLogger(__name__)

BUILTIN = "builtin"


@dataclass(frozen=True)
class SFTJobConfig:
    model: str = "smollm2-135m-instruct"
    data: str = BUILTIN              # an instruction file (JSONL/JSON), or "builtin"
    device: str = "auto"
    dtype: str = "auto"
    tracking: bool = True
    # what to track: "auto" = the built-in mixture's held-out items when data is builtin, else
    # track.suites; "heldout" = those held-out items (for files derived from the mixture, as
    # curated or augmented ones); "suites" = track.suites
    track_items: str = "auto"
    save_model: bool = True
    sft: SFTConfig = field(default_factory=SFTConfig)
    mixture: MixtureConfig = field(default_factory=MixtureConfig)
    track: TrackerConfig = field(default_factory=TrackerConfig)
    curate: DynamicCurationConfig = field(default_factory=DynamicCurationConfig)

    def validate(self) -> None:
        self.sft.validate()
        self.curate.validate()
        self.mixture.validate()
        self.track.validate()
        require(self.dtype in ("auto", "float32", "bfloat16", "float16"), "dtype",
                f"{self.dtype!r} is not one of auto, float32, bfloat16, float16")
        require(self.track_items in ("auto", "heldout", "suites"), "track_items",
                f"{self.track_items!r} is not one of auto, heldout, suites")
        require(self.track.prompt_format == self.sft.prompt_format, "track.prompt_format",
                f"{self.track.prompt_format!r} differs from sft.prompt_format "
                f"{self.sft.prompt_format!r}: track in the layout you train in")
        if self.data != BUILTIN:
            if not Path(self.data).is_file():
                raise DataError(self.data, "no such file (or use data=builtin)")
            read_instruction_file(self.data)  # a malformed file fails before anything is
            #                                   written (read once: see read_instruction_file)


def load_rows(data: str, mixture: MixtureConfig) -> list[Instruction]:
    """The rows of an instruction file, or of the built-in mixture for "builtin"."""
    return builtin_mixture(mixture) if data == BUILTIN else load_instructions(data)


def tracked_items(cfg: SFTJobConfig):
    """The counterfactual items to track: for the built-in mixture (or `track_items=heldout`),
    the held-out subjects' items (never in the training data); else the named suites."""
    if cfg.track_items == "heldout" or (cfg.track_items == "auto" and cfg.data == BUILTIN):
        return heldout_items(cfg.mixture, cfg.track.suites, cfg.track.limit)
    return None  # the tracker loads cfg.track.suites itself


def logged_loss(history: list[dict], sft) -> dict:
    """`train_loss`: the mean of the losses the Trainer logged over the whole run (its log
    history, which a checkpoint keeps), not the Trainer's own figure, which averages only the
    steps of the last process; `train_loss_from` says so. A resumed run's first log after the
    checkpoint averages the steps since the checkpoint, so the two agree when sft.save_every
    is a multiple of sft.log_every."""
    losses = [h["loss"] for h in history if isinstance(h.get("loss"), (int, float))]
    return {"train_loss": sum(losses) / len(losses) if losses else None,
            "train_loss_from": f"mean of {len(losses)} losses logged every {sft.log_every} "
                               "steps over the whole run (log_history)"}


def resolved(cfg: SFTJobConfig, model, tokenizer) -> SFTJobConfig:
    """`cfg` with what depends on the model made explicit: the prompt format ("auto": chat
    when the tokenizer has a chat template, else plain) and the LoRA targets (none given:
    the family's, `lens.adapt.lora_targets`)."""
    fmt = resolve_format(cfg.sft.prompt_format, tokenizer, "sft.prompt_format")
    sft = replace(cfg.sft, prompt_format=fmt,
                  lora_targets=tuple(lora_targets(model, cfg.sft.lora_targets)))
    return replace(cfg, sft=sft, track=replace(cfg.track, prompt_format=fmt))


def run_sft_job(cfg: SFTJobConfig, out_dir: str | Path, progress: Progress | None = None,
                model=None, tokenizer=None) -> dict:
    """Run the job into `out_dir` (continuing from its checkpoints if it has any)."""
    cfg.validate()
    out_dir = Path(out_dir)
    rows = load_rows(cfg.data, cfg.mixture)  # a bad file fails before the model loads
    if model is None:
        # trainable weights stay float32 unless asked; the Trainer adds bf16 autocast on GPU
        dtype = "float32" if cfg.dtype == "auto" else cfg.dtype
        model, tokenizer = load_model(cfg.model, device=cfg.device, dtype=dtype)
    cfg = resolved(cfg, model, tokenizer)
    if cfg.sft.train == "lora":
        check_targets(model, cfg.sft.lora_targets)
    save_instructions(out_dir / "data.jsonl", rows)
    encoded, dropped = encode_all(tokenizer, rows, cfg.sft.prompt_format, cfg.sft.max_length)
    if dropped:
        log.warning("%d of %d examples are longer than sft.max_length=%d tokens and were "
                    "left out", len(dropped), len(rows), cfg.sft.max_length)
    callbacks = []
    tracker = None
    if cfg.tracking:
        tracker = RelianceTracker(tokenizer, cfg.track, out_dir, items=tracked_items(cfg))
        callbacks.append(tracker)
    curation = None
    if cfg.curate.mode == "dynamic":
        curation = dynamic_curation(tokenizer, rows, dropped, cfg.curate, cfg.sft, out_dir)
        callbacks.append(curation)
    if progress is not None:
        callbacks.append(StepProgress(progress))
    start = time.time()
    result = train_model(model, tokenizer, encoded, cfg.sft, out_dir, callbacks, resume=True)
    seconds = time.time() - start
    if cfg.save_model:
        def write(folder: Path) -> None:
            result.model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        atomic_write_folder(out_dir / "model", write, marker="config.json")
    summary = {"steps": result.steps, **logged_loss(result.log_history, cfg.sft),
               "seconds": round(seconds, 1), "n_examples": len(encoded),
               "n_dropped_too_long": len(dropped), "trainable_params": result.trainable_params,
               "total_params": result.total_params, "prompt_format": cfg.sft.prompt_format,
               **({"lora_targets": list(cfg.sft.lora_targets)} if cfg.sft.train == "lora"
                  else {})}
    if tracker is not None:
        summary.update(tracker.summary())
        summary["tracking_seconds"] = round(sum(r["eval_seconds"] for r in tracker.records), 1)
    if curation is not None:
        summary.update(curation.summary())
    return summary
