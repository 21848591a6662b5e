"""One complete `knowflow sft` job: load a model and instruction data, finetune it with the
reliance tracker, save the model, and summarize the reliance curve.

The run directory gets `data.jsonl` (the exact training rows), `metrics.jsonl` (one tracker
record per evaluation), `checkpoints/` (Trainer checkpoints, for resuming), `model/` (the final
weights: only the adapter for LoRA), with `track.keep_peak`, `peak/`, and with
`curate.mode=dynamic`, `curation.jsonl` (the rows dropped at each re-scoring), and with
`report_to` naming TensorBoard, `tensorboard/` (its event files: the Trainer's losses and the
tracker's `reliance/...` numbers; W&B's offline files go to `wandb/`). `track.suites` may name
data files (any file `knowflow eval --data` reads) beside built-in suites.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from knowflow.config import option, require
from knowflow.data.instruction_rows import (
    BUILTIN,
    encode_all,
    load_rows,
    read_instruction_file,
    save_instructions,
)
from knowflow.data.instructions import MixtureConfig, heldout_items
from knowflow.data.prompts import resolve_format
from knowflow.errors import DataError
from knowflow.lens.adapt import check_targets, lora_targets
from knowflow.lens.arch import model_window
from knowflow.lens.checks import check_pad_token
from knowflow.lens.hub import (
    MODEL_HELP,
    OFFLINE_HELP,
    REVISION_HELP,
    SMOLLM2,
    TRUST_REMOTE_CODE_HELP,
    ModelSource,
)
from knowflow.lens.load import resolve_model
from knowflow.lens.memory import MAX_MEMORY_HELP, check_max_memory, check_step_memory
from knowflow.store.run_folder import Progress
from knowflow.store.staging import staged_dir
from knowflow.train.curation import DynamicCurationConfig, dynamic_curation
from knowflow.train.resume import check_checkpoints
from knowflow.train.sft import SFTConfig, StepProgress, train_model
from knowflow.train.tracker import RelianceTracker, TrackerConfig, is_data, tracked_items

log = logging.getLogger(__name__)

TENSORBOARD, WANDB = "tensorboard", "wandb"
EXTRAS = {TENSORBOARD: "tensorboard", WANDB: "wandb"}  # report_to name -> knowflow's extra


@dataclass(frozen=True)
class SFTJobConfig:
    model: str = option(SMOLLM2, MODEL_HELP)
    revision: str | None = option(None, REVISION_HELP)  # a hub id's branch, tag or commit
    trust_remote_code: bool = option(False, TRUST_REMOTE_CODE_HELP)  # its auto_map's code
    offline: bool = option(False, OFFLINE_HELP)  # the Hugging Face cache only
    data: str = option(BUILTIN, "Instruction file (JSONL: instruction/input/output or "
                                "messages), or 'builtin' (the C/C+S/S mixture).")
    device: str = option("auto", "auto, cpu, cuda, mps.")
    dtype: str = option("auto", "Weights: auto (float32; bf16 mixed precision on GPU), "
                                "float32, bfloat16, float16.")
    tracking: bool = option(True, "Do not track reliance.", flag="no_track")
    # what to track: "auto" = the built-in mixture's held-out items when data is builtin, else
    # track.suites; "heldout" = those held-out items (for files derived from the mixture, as
    # curated or augmented ones); "suites" = track.suites
    track_items: str = "auto"
    save_model: bool = True
    # TrainingArguments.report_to: the Trainer's loggers (tensorboard, wandb, ... or none),
    # which receive the training loss and the tracker's numbers
    report_to: tuple[str, ...] = option((), "The Trainer's loggers, comma-separated: "
                                            "tensorboard (event files in RUN/tensorboard), "
                                            "wandb, or none.")
    max_memory: float | None = option(None, MAX_MEMORY_HELP)  # weights + one training step
    sft: SFTConfig = option(factory=SFTConfig, flags="")
    mixture: MixtureConfig = option(factory=MixtureConfig, flags="mixture_")
    track: TrackerConfig = option(factory=TrackerConfig, flags="track_")
    curate: DynamicCurationConfig = option(factory=DynamicCurationConfig, flags="curate_")

    @property
    def source(self) -> ModelSource:
        """How `model` loads (`knowflow.lens.hub.ModelSource`)."""
        return ModelSource(self.revision, self.trust_remote_code, self.offline)

    def validate(self) -> None:
        self.source.validate()
        self.sft.validate()
        self.curate.validate()
        self.mixture.validate()
        self.track.validate()
        require(self.dtype in ("auto", "float32", "bfloat16", "float16"), "dtype",
                f"{self.dtype!r} is not one of auto, float32, bfloat16, float16")
        require(self.track_items in ("auto", "heldout", "suites"), "track_items",
                f"{self.track_items!r} is not one of auto, heldout, suites")
        check_report_to(self.report_to)
        check_max_memory(self.max_memory)
        require(self.track.prompt_format == self.sft.prompt_format, "track.prompt_format",
                f"{self.track.prompt_format!r} differs from sft.prompt_format "
                f"{self.sft.prompt_format!r}: track in the layout you train in")
        if self.data != BUILTIN:
            if not Path(self.data).is_file():
                raise DataError(self.data, "no such file (or use data=builtin)")
            read_instruction_file(self.data)  # a malformed file fails before anything is
            #                                   written (read once: see read_instruction_file)


def check_report_to(report_to: tuple[str, ...]) -> None:
    """Each logger is one transformers knows and is installed (`none` alone, or nothing)."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    names = [n for n in report_to if n != "none"]
    require("none" not in report_to or not names, "report_to",
            "'none' goes alone: drop it or the other loggers")
    for name in names:
        require(name in INTEGRATION_TO_CALLBACK, "report_to",
                f"unknown logger {name!r} (known: none, "
                f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))})")
        extra = EXTRAS.get(name)
        require(name in get_available_reporting_integrations(), "report_to",
                f"{name!r} is not installed; " + (f"pip install 'knowflow[{extra}]'" if extra
                                                  else f"install {name}"))


def job_tracked_items(cfg: SFTJobConfig):
    """The counterfactual items to track: for the built-in mixture (or `track_items=heldout`),
    the held-out subjects' items of the named suites (never in the training data), with any
    data files' items as they are; else the named suites and files (`tracker.tracked_items`)."""
    if cfg.track_items == "heldout" or (cfg.track_items == "auto" and cfg.data == BUILTIN):
        names = tuple(s for s in cfg.track.suites if not is_data(s))
        files = [s for s in cfg.track.suites if is_data(s)]
        items = heldout_items(cfg.mixture, names, cfg.track.limit) if names else {}
        if files:
            items.update(tracked_items(files, cfg.track.fields, cfg.track.limit,
                                       cfg.track.seed, cfg.track.preset or None))
        return items
    return None  # the tracker loads cfg.track.suites itself


@contextmanager
def logger_folders(report_to: tuple[str, ...], out_dir: Path) -> Iterator[None]:
    """TensorBoard's event files in `<out_dir>/tensorboard` and W&B's files in `<out_dir>`
    (`wandb/`), unless the environment already says where (TENSORBOARD_LOGGING_DIR,
    WANDB_DIR); the variables are restored afterwards."""
    wanted = {}
    if TENSORBOARD in report_to:
        wanted["TENSORBOARD_LOGGING_DIR"] = str(out_dir / "tensorboard")
    if WANDB in report_to:
        wanted["WANDB_DIR"] = str(out_dir)
    added = [k for k in wanted if k not in os.environ]
    os.environ.update({k: wanted[k] for k in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


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
    window = model_window(model)  # longer rows are left out, as longer than max_length are
    sft = replace(cfg.sft, prompt_format=fmt,
                  lora_targets=tuple(lora_targets(model, cfg.sft.lora_targets)),
                  max_length=min(cfg.sft.max_length, window or cfg.sft.max_length))
    return replace(cfg, sft=sft, track=replace(cfg.track, prompt_format=fmt))


def run_sft_job(cfg: SFTJobConfig, out_dir: str | Path, progress: Progress | None = None,
                model=None, tokenizer=None) -> dict:
    """Run the job into `out_dir` (continuing from its checkpoints if it has any)."""
    cfg.validate()
    out_dir = Path(out_dir)
    rows = load_rows(cfg.data, cfg.mixture)  # a bad file fails before the model loads
    # trainable weights stay float32 unless asked; the Trainer adds bf16 autocast on GPU
    model, tokenizer, _ = resolve_model(cfg.model if model is None else model, tokenizer,
                                        device=cfg.device, source=cfg.source,
                                        dtype="float32" if cfg.dtype == "auto" else cfg.dtype)
    check_pad_token(tokenizer, str(cfg.model))
    cfg = resolved(cfg, model, tokenizer)
    if cfg.sft.train == "lora":
        check_targets(model, cfg.sft.lora_targets)
    check_checkpoints(out_dir, cfg.sft, model)  # a resumed run: before any file is written
    if not (out_dir / "data.jsonl").exists():  # resumed: the rows it started with, as they are
        save_instructions(out_dir / "data.jsonl", rows)
    encoded, dropped = encode_all(tokenizer, rows, cfg.sft.prompt_format, cfg.sft.max_length)
    if cfg.max_memory is not None and encoded:
        check_step_memory(model, max(len(r["input_ids"]) for r in encoded), cfg.sft.batch_size,
                          cfg.sft.train == "full", cfg.max_memory)
    if dropped:
        log.warning("%d of %d examples are longer than sft.max_length=%d tokens and were "
                    "left out", len(dropped), len(rows), cfg.sft.max_length)
    callbacks = []
    tracker = None
    if cfg.tracking:
        tracker = RelianceTracker(tokenizer, cfg.track, out_dir, items=job_tracked_items(cfg))
        callbacks.append(tracker)
    curation = None
    if cfg.curate.mode == "dynamic":
        curation = dynamic_curation(tokenizer, rows, dropped, cfg.curate, cfg.sft, out_dir)
        callbacks.append(curation)
    if progress is not None:
        callbacks.append(StepProgress(progress))
    start = time.time()
    with logger_folders(cfg.report_to, out_dir):
        result = train_model(model, tokenizer, encoded, cfg.sft, out_dir, callbacks,
                             resume=True, report_to=[n for n in cfg.report_to if n != "none"])
    seconds = time.time() - start
    if cfg.save_model:
        with staged_dir(out_dir / "model", complete="config.json") as folder:
            result.model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
    summary = {"steps": result.steps, **logged_loss(result.log_history, cfg.sft),
               "seconds": round(seconds, 1), "n_examples": len(encoded),
               "n_dropped_too_long": len(dropped), "max_length": cfg.sft.max_length,
               "trainable_params": result.trainable_params,
               "total_params": result.total_params, "prompt_format": cfg.sft.prompt_format,
               **({"lora_targets": list(cfg.sft.lora_targets)} if cfg.sft.train == "lora"
                  else {})}
    if tracker is not None:
        summary.update(tracker.summary())
        summary["tracking_seconds"] = round(sum(r["eval_seconds"] for r in tracker.records), 1)
    if curation is not None:
        summary.update(curation.summary())
    return summary
