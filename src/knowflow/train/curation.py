"""Dynamic curation: drop, during finetuning, the examples the model being trained can already
answer from memory alone.

Goyal et al. (ICLR 2025) drop the finetuning examples with the lowest loss *without* their
context, scored once with the pretrained model. But C+S points only turn harmful once the C
points are fit and the model starts to answer them from memory. `DynamicCuration` re-scores
every training row's no-context loss under the *current* weights every `every` optimizer steps
(and at step 0) and drops the `fraction` with the lowest loss (with `threshold`: of those, only
the rows whose loss is below it, i.e. that the model now answers from memory alone) until the
next re-scoring, when rows may be re-admitted (with `readmit=False` they stay out, and each
re-scoring drops `fraction` of the rows still in). Three pieces do it:

- `ActiveSampler` draws training rows from the active (not dropped) rows only;
- `CuratedTrainer` uses that sampler and also masks the labels of a row dropped after its batch
  was prefetched (accelerate fetches one batch ahead), so a dropped row never adds to a gradient;
- the callback writes every re-scoring (step, dropped rows, their kinds, the loss cut-off) to
  `<out_dir>/curation.jsonl` (atomically), and on `--resume` restores the drop set in force at
  the resumed step from that file.

    curation = DynamicCuration(no_context_scorer(tokenizer, rows, "chat"), len(rows),
                               DynamicCurationConfig(every=50, fraction=0.25), out_dir)
    train_model(model, tokenizer, encoded, sft_cfg, out_dir, [curation])

The scorer is any `model -> per-row losses` callable, so the callback serves instruction rows,
tiny-world examples (`train.criticality.no_context_loss`) or anything else with a
no-context version.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from knowflow.config import option, require
from knowflow.data.instruction_rows import IGNORE
from knowflow.errors import KnowflowError
from knowflow.store.files import atomic_write_jsonl
from knowflow.store.readers import read_jsonl
from knowflow.train.criticality import instruction_rows_no_context, lowest_share, no_context_loss

log = logging.getLogger(__name__)

CURATION = "curation.jsonl"
ROW = "row_index"  # the key that carries each training row's index through the collator
MODES = ("none", "dynamic")
Scorer = Callable[[object], Sequence[float] | torch.Tensor]


@dataclass(frozen=True)
class DynamicCurationConfig:
    mode: str = option("none", "none, or dynamic: re-score every training row's no-context "
                               "loss during finetuning and drop the lowest share.", flag="curate")
    every: int = option(50, "With --curate dynamic: re-score every N steps.")  # and at step 0
    fraction: float = option(0.25, "With --curate dynamic: share of rows dropped at each "
                                   "re-scoring.")  # at most
    threshold: float | None = option(None, "With --curate dynamic: drop only rows whose "
                                           "no-context loss is below this (answered from "
                                           "memory).")
    batch_size: int = 16             # rows per scoring forward pass
    readmit: bool = option(True, "With --curate dynamic: a dropped row is never re-admitted; "
                                 "each re-scoring drops the share of the rows still in.",
                           flag="curate_keep_out")  # False: a dropped row stays out

    def validate(self, prefix: str = "curate.") -> None:
        require(self.mode in MODES, f"{prefix}mode",
                f"{self.mode!r} is not one of {', '.join(MODES)}")
        require(self.every >= 1, f"{prefix}every", f"must be at least 1, got {self.every}")
        require(0 < self.fraction < 1, f"{prefix}fraction",
                f"must lie in (0, 1), got {self.fraction}")
        require(self.batch_size >= 1, f"{prefix}batch_size", "must be at least 1")
        require(self.threshold is None or self.threshold > 0, f"{prefix}threshold",
                f"must be positive, got {self.threshold}")


class ActiveSampler(torch.utils.data.Sampler):
    """Random order over the active rows, `n` draws per epoch: each pass is a fresh seeded
    permutation of all rows, with the rows inactive *at the moment of drawing* skipped."""

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed, self.epoch = n, seed, 0
        self.active = torch.ones(n, dtype=torch.bool)  # (n,)

    def __len__(self) -> int:
        return self.n

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def set_dropped(self, dropped: Sequence[int]) -> None:
        active = torch.ones(self.n, dtype=torch.bool)
        active[list(dropped)] = False
        if not active.any():
            raise ValueError("every row is dropped; nothing left to sample")
        self.active = active

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        drawn = 0
        while drawn < self.n:
            for i in torch.randperm(self.n, generator=gen).tolist():
                if self.active[i]:
                    yield i
                    drawn += 1
                    if drawn == self.n:
                        return


class DynamicCuration(TrainerCallback):
    """Re-scores the rows every `cfg.every` steps and drops the lowest `cfg.fraction`."""

    def __init__(self, scorer: Scorer, n_rows: int, cfg: DynamicCurationConfig,
                 out_dir: str | Path | None = None, kinds: Sequence | None = None,
                 seed: int = 0):
        cfg.validate()
        require(n_rows >= 2, "curate", "dynamic curation needs at least 2 training rows")
        self.scorer, self.cfg = scorer, cfg
        self.kinds = list(kinds) if kinds is not None else None
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.sampler = ActiveSampler(n_rows, seed)
        self.history: list[dict] = []

    @property
    def dropped(self) -> frozenset[int]:
        return frozenset(self.history[-1]["dropped"]) if self.history else frozenset()

    def keep_mask(self, rows: torch.Tensor) -> torch.Tensor:
        """For a batch's row indices (batch,), True where the row is active now. (batch,)"""
        return self.sampler.active[rows.cpu()]

    def trainer(self, train_dataset: Sequence[dict], data_collator, **kwargs) -> CuratedTrainer:
        """A `CuratedTrainer` over `train_dataset` (rows get their index) using this callback
        (which must also be among `kwargs["callbacks"]`)."""
        rows = [{**row, ROW: i} for i, row in enumerate(train_dataset)]
        require(len(rows) == self.sampler.n, "curate",
                f"the scorer covers {self.sampler.n} rows but the dataset has {len(rows)}")
        return CuratedTrainer(curation=self, train_dataset=rows,
                              data_collator=IndexedCollator(data_collator), **kwargs)

    # -- callback events ------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        path = self.out_dir / CURATION if self.out_dir is not None else None
        if step > 0 and path is not None and path.exists():
            self.history = [r for r in read_jsonl(path) if r["step"] <= step]
        elif step == 0:
            self.history = []
        if self.history:
            self.sampler.set_dropped(self.history[-1]["dropped"])
            log.info("curation: restored the drop set of step %d (%d rows)",
                     self.history[-1]["step"], len(self.dropped))
        if not self.history or (step % self.cfg.every == 0 and self.history[-1]["step"] < step):
            self.rescore(model, state)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if step % self.cfg.every == 0 and step < state.max_steps:
            self.rescore(model, state)

    # -- work -----------------------------------------------------------------------------
    def rescore(self, model, state) -> dict:
        """Score every row under `model` now, drop the lowest share, record and write it."""
        start = time.perf_counter()
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                losses = torch.as_tensor(self.scorer(model), dtype=torch.float64)  # (n,)
        finally:
            model.train(was_training)
        if len(losses) != self.sampler.n:
            raise ValueError(f"the scorer returned {len(losses)} losses for "
                             f"{self.sampler.n} rows")
        before = self.dropped
        drop = next_drop(losses, before, self.cfg.fraction, self.cfg.threshold, self.cfg.readmit)
        self.sampler.set_dropped(drop)
        gone = set(drop)
        kept = losses[self.sampler.active]                        # (rows still in,)
        record = {"step": state.global_step, "n_rows": self.sampler.n, "n_dropped": len(drop),
                  "n_newly_dropped": len(gone - before),
                  "n_readmitted": len(before - gone),
                  "loss_cutoff": float(kept.min()),
                  "mean_loss": float(losses.mean()),
                  "seconds": round(time.perf_counter() - start, 3), "dropped": drop}
        if self.kinds is not None:
            kinds = sorted({str(k) for k in self.kinds})
            record["dropped_by_kind"] = {k: sum(str(self.kinds[i]) == k for i in drop)
                                         for k in kinds}
        self.history.append(record)
        if self.out_dir is not None and state.is_world_process_zero:
            atomic_write_jsonl(self.out_dir / CURATION, self.history)
        log.info("curation at step %d: %d rows dropped (%d new, %d re-admitted)",
                 record["step"], len(drop), record["n_newly_dropped"], record["n_readmitted"])
        return record

    def summary(self) -> dict:
        if not self.history:
            return {}
        last = self.history[-1]
        out = {"curation_rescorings": len(self.history),
               "curation_seconds": round(sum(r["seconds"] for r in self.history), 1),
               "curation_final_dropped": last["n_dropped"]}
        if "dropped_by_kind" in last:
            out["curation_final_dropped_by_kind"] = last["dropped_by_kind"]
        return out


def drop_set(losses, fraction: float, threshold: float | None = None,
             most: int | None = None) -> list[int]:
    """The rows to drop: the `fraction` with the lowest no-context loss, of those only the
    ones below `threshold` (the model answers them from memory: loss < -ln p for answer
    probability p) when it is given, and at most `most`."""
    losses = torch.as_tensor(losses, dtype=torch.float64)  # (n,)
    drop = lowest_share(losses, fraction)
    if threshold is not None:
        drop = [i for i in drop if losses[i] < threshold]
    return drop[:most] if most is not None else drop


def next_drop(losses, before: frozenset[int], fraction: float, threshold: float | None,
              readmit: bool) -> list[int]:
    """The drop set after a re-scoring (sorted; one row always stays in). With `readmit` it
    is `drop_set` of all rows; without, the rows dropped `before` stay out and `drop_set`
    of the rows still in is added to them."""
    losses = torch.as_tensor(losses, dtype=torch.float64)  # (n,)
    if readmit:
        return sorted(drop_set(losses, fraction, threshold, len(losses) - 1))
    live = [i for i in range(len(losses)) if i not in before]
    new = drop_set(losses[live], fraction, threshold, len(live) - 1)
    return sorted(before | {live[j] for j in new})


class IndexedCollator:
    """Wraps a collator: takes each row's `ROW` index out before padding, puts it back as a
    (batch,) tensor."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, features: list[dict]) -> dict:
        index = torch.tensor([f[ROW] for f in features])  # (batch,)
        batch = self.inner([{k: v for k, v in f.items() if k != ROW} for f in features])
        batch[ROW] = index
        return batch


class CuratedTrainer(Trainer):
    """A `transformers.Trainer` that samples through a `DynamicCuration`'s sampler and gives
    no loss to rows dropped after their batch was fetched."""

    def __init__(self, *args, curation: DynamicCuration, **kwargs):
        self.curation = curation
        super().__init__(*args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        return self.curation.sampler

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        rows = inputs.pop(ROW)                                      # (batch,)
        keep = self.curation.keep_mask(rows).to(inputs["labels"].device)  # (batch,)
        if not keep.all():
            labels = inputs["labels"].masked_fill(~keep[:, None], IGNORE)  # (batch, seq)
            inputs = {**inputs, "labels": labels if keep.any() else inputs["labels"]}
        out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if keep.any():
            return out
        return (out[0] * 0, out[1]) if return_outputs else out * 0  # a wholly dropped batch


def no_context_scorer(tokenizer, rows: Sequence, prompt_format: str, batch_size: int = 16
                      ) -> Scorer:
    """`model -> no-context loss of each instruction row` (rows encoded once, here)."""
    encoded = instruction_rows_no_context(tokenizer, rows, prompt_format)
    return lambda model: no_context_loss(model, encoded, tokenizer, batch_size=batch_size)


def dynamic_curation(tokenizer, rows: Sequence, too_long: Sequence[int],
                     cfg: DynamicCurationConfig, sft, out_dir: str | Path) -> DynamicCuration:
    """The callback of `knowflow sft --curate dynamic` for instruction `rows` (those at
    `too_long` are not trained on, so not scored); `sft` is the run's SFTConfig."""
    skip = set(too_long)
    trained = [ex for i, ex in enumerate(rows) if i not in skip]
    if any(ex.messages for ex in trained):
        raise KnowflowError("dynamic curation needs Alpaca-form rows (the context is their "
                            "'input'); chat 'messages' rows have no separate context",
                            "convert them to instruction/input/output rows")
    return DynamicCuration(no_context_scorer(tokenizer, trained, sft.prompt_format,
                                             cfg.batch_size),
                           len(trained), cfg, out_dir,
                           kinds=[ex.extra.get("kind") for ex in trained], seed=sft.seed)
