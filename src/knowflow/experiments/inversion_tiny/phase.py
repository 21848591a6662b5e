"""`inversion-tiny --set study=phase`: the tiny transformer's phase diagram next to the theory
model's (see `knowflow.experiments.phase`).

Each cell finetunes the `mixed` arm with C+S share x (the rest C, no S: the theory model's
mixture) on a model pretrained with lookup reliability r, for every seed; the theory model
(`cpi-toy`) runs the same grid with delta_C = r. Pretraining and finetuning are cached and
checkpointed as in the arms study, so `--resume` redoes only missing cells.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from knowflow.experiments.cpi_toy.experiment import toy_phase
from knowflow.experiments.inversion_tiny.jobs import finetune_job, pretrain_job
from knowflow.experiments.parallel import run_pipeline
from knowflow.experiments.phase import cell_key, cells, diagram_agreement, phase_summary
from knowflow.experiments.phase_figure import PHASE
from knowflow.store.files import atomic_write_json, atomic_write_jsonl
from knowflow.store.identity import METRICS
from knowflow.store.run_folder import PartStore


def cell_config(cfg, share: float, reliability: float):
    """The inversion-tiny config of one cell: C+S share `share`, lookup reliability
    `reliability`, one arm."""
    mix = dataclasses.replace(cfg.mixture, c=round(1 - share, 12), cs=share, s=0.0, aug=0)
    pre = dataclasses.replace(cfg.pretrain, lookup_reliability=reliability)
    return dataclasses.replace(cfg, mixture=mix, pretrain=pre, arms=("mixed",))


def run_phase(cfg, out_dir: Path) -> dict:
    store = PartStore(out_dir)
    grid = cells(cfg.phase)
    pre = {(r, s): (cell_config(cfg, 0.5, r), s) for _, r, s in grid}
    todo = [(cell_config(cfg, x, r), "mixed", s, store.dir / cell_key(x, r, s))
            for x, r, s in grid if store.load(cell_key(x, r, s)) is None]

    def save(job: tuple, result: tuple[list[dict], dict]) -> None:
        store.save(job[3].name, *result)
        shutil.rmtree(job[3], ignore_errors=True)

    def cells_of(job: tuple, _info: dict) -> list[tuple]:  # the cells on this pretraining
        reliability = job[0].pretrain.lookup_reliability
        return [t for t in todo if t[2] == job[1]
                and t[0].pretrain.lookup_reliability == reliability]

    infos = run_pipeline(pretrain_job, list(pre.values()), finetune_job, cells_of, cfg.workers,
                         save)
    # whether each pretrained model learned its skills (a cell without the lookup skill
    # cannot rise, whatever the theory says)
    learned = {f"reliability {r:g}, seed {s}": {"recall": info["recall"],
                                                "lookup_acc": info["lookup_acc"]}
               for (r, s), info in zip(pre, infos, strict=True)}
    records, curves, steps = [], {}, []
    for x, r, s in grid:
        recs = store.load(cell_key(x, r, s))["records"]
        steps = [rec["step"] for rec in recs]
        curves[x, r, s] = [rec["cf_acc"] for rec in recs]
        records += [{**rec, "model": "tiny", "cs_share": x, "reliability": r, "seed": s}
                    for rec in recs]
    tiny = phase_summary(curves, steps, cfg.phase, "cf_acc")
    toy_records, toy = toy_phase(cfg.phase, cfg.workers)
    atomic_write_jsonl(out_dir / METRICS, records + toy_records)
    agree = diagram_agreement(tiny, toy)
    atomic_write_json(out_dir / PHASE, {"tiny": tiny, "toy": toy})
    return {"phase": {"tiny": tiny, "toy": toy, "agreement": agree}, "pretrain": learned,
            "findings": {"verdict": phase_verdict(agree, cfg.phase.threshold)}}


def phase_verdict(agree: dict, threshold: float) -> str:
    where = "; ".join(f"C+S share {d['cs_share']:g}, reliability {d['reliability']:g}: "
                      f"{'only the tiny model' if d['first_inverts'] else 'only the theory'}"
                      " inverts" for d in agree["disagree"]) or "nowhere"
    return (f"The tiny transformer and the one-layer theory agree on {agree['agree']} of "
            f"{agree['cells']} cells (a cell inverts when its seed-mean fall is at least "
            f"{threshold:g}); they disagree {where}.")
