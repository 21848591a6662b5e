"""`RelianceTracker`: context reliance measured during anyone's HF Trainer run.

Goyal et al. (ICLR 2025) find that counterfactual accuracy (the model follows a context that
contradicts its memory) peaks early in instruction finetuning and then declines while the
training loss keeps improving. The tracker makes that visible: every `every` steps it scores
knowledge-conflict suites with the model being trained (counterfactual and parametric
accuracy; the attention mass from the answer position on the context, averaged over layers
and heads; with `scoring="both"`, generation's accuracies too as `cf_acc_gen` and
`param_acc_gen`), writes one flat record per evaluation step to `metrics.jsonl` (rewritten
atomically; per-suite numbers as `<suite>/cf_acc`, ..., so `pandas.read_json(path,
lines=True)` gives one column each), forwards the numbers to the Trainer's loggers, marks the
step of peak counterfactual accuracy, and can keep that checkpoint or stop training after a
given drop from the peak (the record where it stopped says why, in `stopped`, and so does
`summary()`). It works on `transformers.Trainer` and `trl.SFTTrainer` alike.

    tracker = RelianceTracker(tokenizer, TrackerConfig(every=50), out_dir="runs/my-sft")
    tracker.attach(trainer)      # one line: adds the callback and logs through the trainer
    trainer.train()

What it scores: `TrackerConfig.suites` names built-in suites, data files (any file `knowflow
eval --data` reads: JSONL, JSON, CSV, parquet, a `save_to_disk` folder) or `hf:` datasets,
with `fields` mapping their columns; or pass `items=` (`knowflow.load_items(path)`, a list of
`ConflictItem`s, or a dict of them by suite). `knowflow report <out_dir>` draws the curves.

Under `accelerate launch` / torchrun every process scores an equal share of the items and the
results are gathered (so FSDP's collective forwards stay in step); only the main process
writes. With FSDP use `scoring="loglik"`: generation takes a varying number of forwards.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from knowflow.config import option
from knowflow.data.facts import ConflictItem
from knowflow.data.hub import is_hub
from knowflow.data.loaders import load_items as read_items
from knowflow.data.suites import get_suite, sample
from knowflow.data.tables import parse_fields
from knowflow.errors import ConfigError
from knowflow.evaluation.curves import named_curve
from knowflow.evaluation.items import evaluate_items
from knowflow.evaluation.options import EvalConfig
from knowflow.lens.batching import dist_rank, gather, shard
from knowflow.probes.examples import ProbeExample, find_text
from knowflow.probes.mass import AttentionMassConfig, attention_mass
from knowflow.store.files import atomic_write_json
from knowflow.store.identity import TRACKER
from knowflow.train.callback import EvalCallback
from knowflow.train.reliance_pass import loglik_and_attention

log = logging.getLogger(__name__)


DTYPES = ("float32", "bfloat16", "auto")


def fast_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 matrices natively (CUDA with bf16 support; a CPU
    with AVX512-BF16 or AMX, as oneDNN reports it)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def evaluates_in_bf16(dtype: str, device: torch.device) -> bool:
    """Whether the tracker's `dtype` setting means bfloat16 on `device`."""
    return dtype == "bfloat16" or (dtype == "auto" and fast_bf16(device))


def evaluation_precision(model, dtype: str):
    """A context in which to evaluate `model` at `dtype`: bfloat16 autocast for float32
    weights, or nothing (float32, weights already in low precision, or `auto` without fast
    bf16)."""
    param = next(model.parameters())
    if not evaluates_in_bf16(dtype, param.device) or param.dtype != torch.float32:
        return nullcontext()
    return torch.autocast(param.device.type, dtype=torch.bfloat16)


def is_data(entry: str | Path) -> bool:
    """Whether a tracked entry names data (an existing file or folder, an `hf:` dataset or a
    benchmark's name) rather than a built-in suite."""
    return isinstance(entry, Path) or is_hub(entry) or Path(entry).exists()


def load_items(path: str | Path, fields: Mapping[str, str] | str | None = None, *,
               preset: str | None = None, limit: int | None = None, seed: int = 0
               ) -> list[ConflictItem]:
    """The knowledge-conflict items of a data file, for `RelianceTracker(items=...)` (or
    `knowflow.evaluate`): any file `knowflow eval --data` reads (JSONL, JSON, CSV, parquet, a
    `save_to_disk` folder, `hf:ORG/NAME[:CONFIG][@SPLIT]`), by the same loader. `fields` maps
    knowflow's fields to the file's columns (a dict, or `--fields`' text
    "context=COL,question=COL,answer=COL,memory_answer=COL"); `preset` names a published
    layout (`--preset`); `limit` keeps a seeded sample. The items' suite is the file's stem.
    A malformed file raises a `DataError` naming the file, line and field."""
    if not isinstance(path, (str, Path)):
        raise ConfigError(f"expected a file path, got {type(path).__name__} {path!r:.60}",
                          "path")
    mapping = parse_fields(fields) if isinstance(fields, str) else dict(fields or {})
    items = read_items(path, mapping, **({"preset": preset} if preset else {}))
    return sample(items, limit, seed, items[0].suite)


def tracked_items(entries: Sequence[str | Path], fields: Mapping[str, str] | str | None = None,
                  limit: int | None = None, seed: int = 0, preset: str | None = None
                  ) -> dict[str, list[ConflictItem]]:
    """The items of `entries` by suite: built-in suite names and data (`is_data`) mixed, each
    file read by `load_items` (its suite is the file's stem), a seeded sample of `limit` per
    suite."""
    out: dict[str, list[ConflictItem]] = {}
    for entry in entries:
        if is_data(entry):
            items = load_items(entry, fields, preset=preset, limit=limit, seed=seed)
            out[items[0].suite] = items
        else:
            out[str(entry)] = get_suite(str(entry), seed=seed, limit=limit)
    if not out:
        raise ConfigError("nothing to track", "track.suites", "give a suite name or a data file")
    return out


@dataclass(frozen=True)
class TrackerConfig:
    suites: tuple[str, ...] = option(("cf-capitals", "cf-world"), "What to track, "
                                     "comma-separated: built-in suites and/or data files (any "
                                     "file eval --data reads).", flag="track")
    fields: str = option("", "The tracked files' columns: context=COL,question=COL,answer=COL,"
                             "memory_answer=COL (as eval --fields).")
    preset: str = option("", "The tracked files' published layout (as eval --preset: "
                             "nq-swap, conflictqa, ...).")
    every: int = option(20, "Evaluate every N steps.")  # optimizer steps (and at 0, the end)
    limit: int | None = option(32, "Tracked items per suite.")  # a seeded sample; None: all
    prompt_format: str = option("auto", flag="prompt_format")  # as the training data
    scoring: str = "loglik"          # "loglik" (cheap, FSDP-safe), "generate" or "both"
    attention: bool = True           # attention mass on the context
    batch_size: int = 16
    keep_peak: bool = option(False, "Save the model at the peak of counterfactual accuracy.",
                             flag="keep_peak")  # to <out_dir>/peak
    stop_drop: float | None = option(None, "Stop when cf accuracy falls this far below its "
                                           "peak.", flag="stop_drop")
    seed: int = 0
    dtype: str = "auto"              # evaluation precision: auto (bfloat16 autocast where the
                                     # device multiplies bf16 natively, about 2x faster on such
                                     # CPUs; else float32), float32 or bfloat16
    label: str = ""                  # the run's name in reports (the arm: "lora", "curated")

    def validate(self) -> None:
        if self.every < 1:
            raise ConfigError("must be at least 1", "track.every")
        if self.scoring not in ("loglik", "generate", "both"):
            raise ConfigError(f"{self.scoring!r} is not one of loglik, generate, both",
                              "track.scoring")
        if self.dtype not in DTYPES:
            raise ConfigError(f"{self.dtype!r} is not one of {', '.join(DTYPES)}", "track.dtype")
        if self.stop_drop is not None and not 0 < self.stop_drop <= 1:
            raise ConfigError("must lie in (0, 1]", "track.stop_drop")
        try:
            parse_fields(self.fields)
        except ConfigError as exc:
            raise ConfigError(exc.message, "track.fields", exc.hint) from None
        EvalConfig(scoring=self.scoring, prompt_format=self.prompt_format, limit=self.limit,
                   batch_size=self.batch_size).validate()


def _replace_folder(target: Path, tmp: Path) -> None:
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


class RelianceTracker(EvalCallback):
    """Scores context reliance every `cfg.every` steps; see the module docstring."""

    log_prefix = "reliance"
    unlogged = (*EvalCallback.unlogged, "stopped")
    one_pass = True  # loglik + attention from one prompt pass (False: a second attention pass)

    def __init__(self, tokenizer, cfg: TrackerConfig = TrackerConfig(),
                 out_dir: str | Path | None = None,
                 items: Mapping[str, list[ConflictItem]] | Sequence[ConflictItem] | None = None):
        cfg.validate()
        super().__init__(self.measure, cfg.every, out_dir)
        self.tokenizer, self.cfg = tokenizer, cfg
        # items given are sampled to `limit` per suite as the tracked suites and files are
        self.items = {suite: sample(its, cfg.limit, cfg.seed, suite)
                      for suite, its in by_suite(items).items()} if items is not None else \
            tracked_items(cfg.suites, cfg.fields, cfg.limit, cfg.seed, cfg.preset or None)
        if not any(self.items.values()):
            raise ConfigError("no evaluation items", "track.suites")

    @property
    def peak(self) -> dict | None:
        """The record of highest counterfactual accuracy so far (earliest on ties)."""
        return max(self.records, key=lambda r: (r["cf_acc"], -r["step"]), default=None)

    @property
    def stopped(self) -> dict | None:
        """Why `stop_drop` stopped training (`stop_reason`); None while it has not."""
        return next((r["stopped"] for r in self.records if r.get("stopped")), None)

    def summary(self) -> dict:
        if not self.records:
            return {}
        first, last = self.records[0], self.records[-1]
        steps = [r["step"] for r in self.records]
        stopped = self.stopped
        return {**named_curve("cf_acc", steps, [r["cf_acc"] for r in self.records]),
                "param_acc_start": first["param_acc"], "param_acc_final": last["param_acc"],
                "attn_context_start": first.get("attn_context"),
                "attn_context_final": last.get("attn_context"),
                "final_step": last["step"], "n_evaluations": len(self.records),
                **({"stopped_early": stopped} if stopped else {})}

    def measure(self, model) -> dict:
        """Counterfactual/parametric accuracy per suite and attention mass, on this process's
        share of the items (gathered across processes), at `cfg.dtype`."""
        with evaluation_precision(model, self.cfg.dtype):
            return self._measure(model)

    def _measure(self, model) -> dict:
        rank, world = dist_rank()
        ecfg = EvalConfig(scoring=self.cfg.scoring, prompt_format=self.cfg.prompt_format,
                          known_filter=False, batch_size=self.cfg.batch_size)
        mode = "generate" if self.cfg.scoring == "generate" else "loglik"
        out: dict = {}
        cf_all, par_all, masses, gen_all = [], [], [], []
        for name, items in self.items.items():
            if not items:
                continue
            mine, real = shard(items, rank, world)
            fused = self.one_pass and self.cfg.scoring == "loglik" and self.cfg.attention
            if fused:  # one prompt pass gives both the choice and the attention mass
                recs, item_mass = loglik_and_attention(model, self.tokenizer, mine, ecfg)
            else:
                recs = evaluate_items(model, self.tokenizer, name, mine, ecfg, None)
            if mode == "loglik":
                hits = [(r["loglik"]["choice"] == "counterfactual",
                         r["loglik"]["choice"] == "parametric") for r in recs]
            else:
                hits = [(r["generate"]["counterfactual"], r["generate"]["parametric"])
                        for r in recs]
            hits = gather(hits, real, world)
            cf = [float(h[0]) for h in hits]
            par = [float(h[1]) for h in hits]
            block = {"n": len(cf), "cf_acc": sum(cf) / len(cf), "param_acc": sum(par) / len(par)}
            if self.cfg.scoring == "both":  # generation too, as cf_acc_gen / param_acc_gen
                gen = gather([(r["generate"]["counterfactual"], r["generate"]["parametric"])
                               for r in recs], real, world)
                block["cf_acc_gen"] = sum(float(h[0]) for h in gen) / len(gen)
                block["param_acc_gen"] = sum(float(h[1]) for h in gen) / len(gen)
                gen_all += gen
            if self.cfg.attention:
                means = [m for m in item_mass[:real] if m is not None] if fused else \
                    self._attention_pass(model, recs, mine, real)
                means = gather(means, len(means), world)
                if means:
                    block["attn_context"] = float(torch.tensor(means).mean())
                    masses += means
            cf_all += cf
            par_all += par
            out.update({f"{name}/{key}": value for key, value in block.items()})
        out["n"] = len(cf_all)
        out["cf_acc"] = sum(cf_all) / len(cf_all)
        out["param_acc"] = sum(par_all) / len(par_all)
        if gen_all:
            out["cf_acc_gen"] = sum(float(h[0]) for h in gen_all) / len(gen_all)
            out["param_acc_gen"] = sum(float(h[1]) for h in gen_all) / len(gen_all)
        if masses:
            per_layer = torch.tensor(masses).mean(0)  # (layers,)
            out["attn_context"] = float(per_layer.mean())
            out["attn_context_layers"] = [round(float(v), 6) for v in per_layer]
        return out

    def _attention_pass(self, model, recs: list[dict], mine: list[ConflictItem], real: int
                        ) -> list[list[float]]:
        """Per-layer attention mass of this process's real items, by a separate pass (when
        scoring is not log-likelihood alone)."""
        examples, real_flags = [], []
        for i, (r, it) in enumerate(zip(recs, mine, strict=True)):
            span = find_text(r["prompt"], it.context) if it.context else None
            if span is not None:
                examples.append(ProbeExample(r["prompt"], context=span))
                real_flags.append(i < real)
        mass = attention_mass(model, self.tokenizer, examples,
                              AttentionMassConfig(self.cfg.batch_size)) if examples else []
        return [m["layer_mean"] for m, keep in zip(mass, real_flags, strict=True) if keep]

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Say, once, what is tracked (`tracker.json`: the model, the tracked data, the label),
        so a report names the run by them rather than by its folder."""
        if self.out_dir is not None and state.is_world_process_zero and model is not None:
            atomic_write_json(self.out_dir / TRACKER, {
                "model": str(getattr(model.config, "name_or_path", "") or
                             type(model).__name__),
                "data": list(self.items), "label": self.cfg.label})
        return super().on_train_begin(args, state, control, model=model, **kwargs)

    def on_record(self, record: dict, model, state, control) -> None:
        """Mark the peak, keep its model if asked, stop after `stop_drop` below it."""
        record["is_peak"] = self.peak is record
        if record["is_peak"] and self.cfg.keep_peak and self.out_dir is not None:
            self._save_peak(model)
        peak = self.peak
        if self.cfg.stop_drop is not None and peak["cf_acc"] - record["cf_acc"] >= \
                self.cfg.stop_drop - 1e-12:
            record["stopped"] = stop_reason(record, peak, self.cfg.stop_drop)
            log.info("%s", record["stopped"]["reason"])
            control.should_training_stop = True

    def _save_peak(self, model) -> None:
        target = self.out_dir / "peak"
        tmp = target.with_name(f".{target.name}.tmp")
        rank, world = dist_rank()
        if self.trainer is not None:  # handles FSDP/DeepSpeed state gathering; all ranks
            self.trainer.save_model(str(tmp))
        elif rank == 0:
            model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
        if world > 1:
            torch.distributed.barrier()
        if rank == 0:
            _replace_folder(target, tmp)


def by_suite(items: Mapping[str, list[ConflictItem]] | Sequence[ConflictItem]
             ) -> dict[str, list[ConflictItem]]:
    """Items grouped by suite: a mapping as it is, a list (`knowflow.load_items`) by each
    item's `suite`."""
    if isinstance(items, Mapping):
        return {name: list(group) for name, group in items.items()}
    out: dict[str, list[ConflictItem]] = {}
    for item in items:
        if not isinstance(item, ConflictItem):
            raise ConfigError(f"items holds a {type(item).__name__}, not a ConflictItem",
                              "items", "give knowflow.load_items(path) or a suite's items")
        out.setdefault(item.suite, []).append(item)
    return out


def stop_reason(record: dict, peak: dict, stop_drop: float) -> dict:
    """Why `stop_drop` stopped training at `record`: the step, the accuracy, its peak (and
    the peak's step), the drop, and one sentence saying so."""
    drop = peak["cf_acc"] - record["cf_acc"]
    return {"step": record["step"], "cf_acc": record["cf_acc"], "peak": peak["cf_acc"],
            "peak_step": peak["step"], "drop": drop, "stop_drop": stop_drop,
            "reason": f"stopped at step {record['step']}: counterfactual accuracy "
                      f"{record['cf_acc']:.2f} fell {drop:.2f} below its peak "
                      f"{peak['cf_acc']:.2f} (step {peak['step']}); --stop-drop {stop_drop:g}"}
