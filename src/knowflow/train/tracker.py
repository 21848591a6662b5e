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
given drop from the peak. It works on `transformers.Trainer` and `trl.SFTTrainer` alike.

    tracker = RelianceTracker(tokenizer, TrackerConfig(every=50), out_dir="runs/my-sft")
    tracker.attach(trainer)      # one line: adds the callback and logs through the trainer
    trainer.train()

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

from knowflow.data.facts import ConflictItem
from knowflow.errors import ConfigError
from knowflow.evaluation.items import evaluate_items, load_suites
from knowflow.evaluation.options import EvalConfig
from knowflow.probes.examples import ProbeExample, find_text
from knowflow.probes.mass import AttentionMassConfig, attention_mass
from knowflow.schema import named_curve
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


@dataclass(frozen=True)
class TrackerConfig:
    suites: tuple[str, ...] = ("cf-capitals", "cf-world")
    every: int = 20                  # evaluate every N optimizer steps (and at 0 and the end)
    limit: int | None = 32           # items per suite (a seeded sample); None: all
    prompt_format: str = "auto"      # render as the training data is rendered
    scoring: str = "loglik"          # "loglik" (cheap, FSDP-safe), "generate" or "both"
    attention: bool = True           # attention mass on the context
    batch_size: int = 16
    keep_peak: bool = False          # save the model at each new peak to <out_dir>/peak
    stop_drop: float | None = None   # stop once cf accuracy falls this far below its peak
    seed: int = 0
    dtype: str = "auto"              # evaluation precision: auto (bfloat16 autocast where the
                                     # device multiplies bf16 natively, about 2x faster on such
                                     # CPUs; else float32), float32 or bfloat16

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
        EvalConfig(scoring=self.scoring, prompt_format=self.prompt_format, limit=self.limit,
                   batch_size=self.batch_size).validate()


def _dist() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside torch.distributed."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _shard(items: Sequence, rank: int, world: int) -> tuple[list, int]:
    """This rank's equal-length share (padded by repeating its last item) and how many of
    its entries are real. Equal lengths keep collective forwards (FSDP) in step."""
    per = -(-len(items) // world)
    mine = list(items[rank * per:(rank + 1) * per])
    real = len(mine)
    pad = mine[-1] if mine else items[-1]
    return mine + [pad] * (per - real), real


def _gather(values: list, real: int, world: int) -> list:
    if world == 1:
        return values[:real]
    parts: list = [None] * world
    torch.distributed.all_gather_object(parts, (values, real))
    return [v for vals, n in parts for v in vals[:n]]


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
    one_pass = True  # loglik + attention from one prompt pass (False: a second attention pass)

    def __init__(self, tokenizer, cfg: TrackerConfig = TrackerConfig(),
                 out_dir: str | Path | None = None,
                 items: Mapping[str, list[ConflictItem]] | None = None):
        cfg.validate()
        super().__init__(self.measure, cfg.every, out_dir)
        self.tokenizer, self.cfg = tokenizer, cfg
        self.items = dict(items) if items is not None else \
            load_suites(list(cfg.suites), limit=cfg.limit, seed=cfg.seed)
        if not any(self.items.values()):
            raise ConfigError("no evaluation items", "track.suites")

    @property
    def peak(self) -> dict | None:
        """The record of highest counterfactual accuracy so far (earliest on ties)."""
        return max(self.records, key=lambda r: (r["cf_acc"], -r["step"]), default=None)

    def summary(self) -> dict:
        if not self.records:
            return {}
        first, last = self.records[0], self.records[-1]
        steps = [r["step"] for r in self.records]
        return {**named_curve("cf_acc", steps, [r["cf_acc"] for r in self.records]),
                "param_acc_start": first["param_acc"], "param_acc_final": last["param_acc"],
                "attn_context_start": first.get("attn_context"),
                "attn_context_final": last.get("attn_context"),
                "final_step": last["step"], "n_evaluations": len(self.records)}

    def measure(self, model) -> dict:
        """Counterfactual/parametric accuracy per suite and attention mass, on this process's
        share of the items (gathered across processes), at `cfg.dtype`."""
        with evaluation_precision(model, self.cfg.dtype):
            return self._measure(model)

    def _measure(self, model) -> dict:
        rank, world = _dist()
        ecfg = EvalConfig(scoring=self.cfg.scoring, prompt_format=self.cfg.prompt_format,
                          known_filter=False, batch_size=self.cfg.batch_size)
        mode = "generate" if self.cfg.scoring == "generate" else "loglik"
        out: dict = {}
        cf_all, par_all, masses, gen_all = [], [], [], []
        for name, items in self.items.items():
            if not items:
                continue
            mine, real = _shard(items, rank, world)
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
            hits = _gather(hits, real, world)
            cf = [float(h[0]) for h in hits]
            par = [float(h[1]) for h in hits]
            block = {"n": len(cf), "cf_acc": sum(cf) / len(cf), "param_acc": sum(par) / len(par)}
            if self.cfg.scoring == "both":  # generation too, as cf_acc_gen / param_acc_gen
                gen = _gather([(r["generate"]["counterfactual"], r["generate"]["parametric"])
                               for r in recs], real, world)
                block["cf_acc_gen"] = sum(float(h[0]) for h in gen) / len(gen)
                block["param_acc_gen"] = sum(float(h[1]) for h in gen) / len(gen)
                gen_all += gen
            if self.cfg.attention:
                means = [m for m in item_mass[:real] if m is not None] if fused else \
                    self._attention_pass(model, recs, mine, real)
                means = _gather(means, len(means), world)
                if means:
                    block["attn_context"] = float(torch.tensor(means).mean())
                    masses += means
            cf_all += cf
            par_all += par
            out.update({f"{name}/{key}": value for key, value in block.items()})
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

    def on_record(self, record: dict, model, state, control) -> None:
        """Mark the peak, keep its model if asked, stop after `stop_drop` below it."""
        record["is_peak"] = self.peak is record
        if record["is_peak"] and self.cfg.keep_peak and self.out_dir is not None:
            self._save_peak(model)
        peak = self.peak
        if self.cfg.stop_drop is not None and peak["cf_acc"] - record["cf_acc"] >= \
                self.cfg.stop_drop - 1e-12:
            log.info("stopping at step %d: cf accuracy %.3f is %.3f below its peak %.3f "
                     "(step %d)", state.global_step, record["cf_acc"],
                     peak["cf_acc"] - record["cf_acc"], peak["cf_acc"], peak["step"])
            control.should_training_stop = True

    def _save_peak(self, model) -> None:
        target = self.out_dir / "peak"
        tmp = target.with_name(f".{target.name}.tmp")
        rank, world = _dist()
        if self.trainer is not None:  # handles FSDP/DeepSpeed state gathering; all ranks
            self.trainer.save_model(str(tmp))
        elif rank == 0:
            model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
        if world > 1:
            torch.distributed.barrier()
        if rank == 0:
            _replace_folder(target, tmp)

