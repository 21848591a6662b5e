"""`cpi-toy`: context-parametric inversion in the one-layer theory model, in five parts.

(1) `inversion`: C + C+S finetuning, W_KQ only — M_C rises, peaks, then falls.
(2) `c_only`: the same number of C points only — no fall.
(3) `with_s`: (1) plus S points on memorized facts — more attention on the subject (Prop. 2).
(4) `train_v`: (1) with W_V trainable too — fact memorization in the values (Prop. 3).
(5) `mitigations`: against the inversion setting (W_KQ only): training all weights instead,
    counterfactual augmentation, dropping the examples with the lowest no-context loss once
    (`filtered`, the paper's filter), and dynamic curation (`dynamic`: re-scoring that loss
    under the current weights every `dynamic.every` steps and leaving out, for good, the
    points the model now answers from memory); each arm also reports the
    in-distribution accuracy it keeps (accuracy on the mixture's C and C+S points).
Parts are independent runs on one seeded world; each finished part is checkpointed, so
`--resume` redoes only what is missing. Parts run in parallel processes, one torch thread each.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from knowflow.config import option, require
from knowflow.evaluation.curves import THEORY, named_curve
from knowflow.experiments.cpi_toy.figures import plot_cpi_toy
from knowflow.experiments.cpi_toy.model import (
    OneLayerCPI,
    pretrained_value_matrix,
    train_value_matrix,
)
from knowflow.experiments.cpi_toy.train import ToyFinetuneConfig, finetune, indist_accuracy
from knowflow.experiments.cpi_toy.world import CS, counterfactual_test_set, finetune_set, make_world
from knowflow.experiments.mitigations import (
    check_dynamic_arm,
    dynamic_arm,
    fall_removed,
    meets_goal,
    renamed_to_dynamic,
)
from knowflow.experiments.parallel import run_jobs
from knowflow.experiments.phase import PhaseConfig, cells, phase_summary
from knowflow.experiments.phase_figure import PHASE, with_phase
from knowflow.experiments.registry import Summary, register
from knowflow.store.files import atomic_write_json, atomic_write_jsonl
from knowflow.store.identity import METRICS
from knowflow.store.run_folder import PartStore
from knowflow.train.criticality import drop_lowest_no_context_loss
from knowflow.train.curation import DynamicCurationConfig

log = logging.getLogger(__name__)

PARTS = ("inversion", "c_only", "with_s", "train_v", "mitigations")


@dataclass(frozen=True)
class ToyWorldConfig:
    n_answers: int = option(50, ge=3)  # |A|: context / answer tokens
    n_heldout_answers: int = 10  # answers used only as counterfactual test contexts
    n_test: int = option(100, ge=1)  # held-out memorized subjects, each with a conflicting context
    delta_c: float = option(0.6, gt=0, lt=1)  # pretrained: P(c | value of context token c)
    delta_m: float = option(0.95, gt=0, lt=1)  # pretrained: P(fact | value of memorized subject)
    pretrain: Literal["constructed", "trained"] = "constructed"  # how W_V is obtained
    pretrain_steps: int = option(2000, ge=1)  # for pretrain=trained (full-batch Adam on D_pre)
    pretrain_lr: float = 0.05


@dataclass(frozen=True)
class MixtureCounts:
    """The finetuning mixture as counts of each kind (the theory model's points)."""

    # context-critical: unmemorized subject, answer only in the context
    n_c: int = option(60, ge=0)
    n_cs: int = option(140, ge=0)  # memorized subject, the context agrees with its fact
    n_s_seen: int = option(0, ge=0)  # no context, memorized fact
    n_s_unseen: int = option(0, ge=0)  # no context, a fact the pretrained model does not know
    # counterfactual augmentation: memorized subject, conflicting context
    n_aug: int = option(0, ge=0)


@dataclass(frozen=True)
class PartsConfig:
    # part 3: S points (memorized facts) added to the mixture
    with_s_points: int = option(100, ge=0)
    aug_points: int = option(60, ge=0)  # part 5: counterfactual-augmentation points added
    # part 5: share dropped (lowest no-context loss); paper: 25%
    filter_fraction: float = option(0.25, ge=0, lt=1)


@dataclass(frozen=True)
class CpiToyConfig:
    seed: int = 0
    parts: tuple[str, ...] = PARTS
    dtype: Literal["float32", "float64"] = "float32"  # float64: same numbers, 1.6x slower
    workers: int = 2  # processes; each uses one torch thread
    world: ToyWorldConfig = field(default_factory=ToyWorldConfig)
    mixture: MixtureCounts = field(default_factory=MixtureCounts)
    finetune: ToyFinetuneConfig = field(default_factory=ToyFinetuneConfig)
    part: PartsConfig = field(default_factory=PartsConfig)
    # part 5's `dynamic` arm: re-score every `every` steps, leave out at most `fraction` of the
    # points still in (lowest no-context loss), only those below `threshold` (`readmit`: they
    # come back at the next re-scoring; `batch_size` is unused: all points score at once)
    dynamic: DynamicCurationConfig = field(default_factory=dynamic_arm)
    study: Literal["parts", "phase"] = "parts"  # phase: C+S share x delta_C diagram
    phase: PhaseConfig = field(default_factory=PhaseConfig)
    RENAMED = renamed_to_dynamic("part.dynamic_")

    def validate(self) -> None:
        """What spans several fields; each field's own range is declared on it (`option`),
        and the sections are checked by `validate_config` before this."""
        w, m = self.world, self.mixture
        require(len(self.parts) > 0, "parts", "choose at least one part")
        for name in self.parts:
            require(name in PARTS, "parts", f"unknown part {name!r} (known: {', '.join(PARTS)})")
        require(0 <= w.n_heldout_answers <= w.n_answers - 2, "world.n_heldout_answers",
                "must be between 0 and n_answers - 2")
        require(m.n_c + m.n_cs + m.n_s_seen + m.n_s_unseen + m.n_aug > 0, "mixture",
                "the finetuning mixture is empty")
        check_dynamic_arm(self.dynamic)


@dataclass(frozen=True)
class Arm:
    """One finetuning run: a mixture, which weights train, and an optional filter."""

    part: str
    name: str
    mixture: MixtureCounts
    train_v: bool
    filter_fraction: float = 0.0
    dynamic: tuple | None = None  # dynamic curation: (every, fraction, threshold, readmit)


def arms_of(cfg: CpiToyConfig, part: str) -> list[Arm]:
    m, p, d = cfg.mixture, cfg.part, cfg.dynamic
    if part == "inversion":
        return [Arm(part, "mixed", m, False)]
    if part == "c_only":  # same number of points, all context-critical
        return [Arm(part, "c_only", dataclasses.replace(m, n_c=m.n_c + m.n_cs, n_cs=0), False)]
    if part == "with_s":
        return [Arm(part, "with_s", dataclasses.replace(m, n_s_seen=m.n_s_seen + p.with_s_points),
                    False)]
    if part == "train_v":
        return [Arm(part, "train_v", m, True)]
    # the baseline is the inversion setting (W_KQ only), where the attention shift operates
    return [Arm(part, "baseline", m, False),
            Arm(part, "all_weights", m, True),
            Arm(part, "augmented", dataclasses.replace(m, n_aug=m.n_aug + p.aug_points), False),
            Arm(part, "filtered", m, False, p.filter_fraction),
            Arm(part, "dynamic", m, False, dynamic=(d.every, d.fraction, d.threshold,
                                                  d.readmit))]


def world_sizes(cfg: CpiToyConfig) -> dict[str, int]:
    """Subjects per group, enough for every arm of every part (arms share the world)."""
    m, p = cfg.mixture, cfg.part
    return {"unmemorized": m.n_c + m.n_cs, "c_plus_s": m.n_cs,
            "s_seen": m.n_s_seen + p.with_s_points, "s_unseen": m.n_s_unseen,
            "augment": m.n_aug + p.aug_points, "test": cfg.world.n_test}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def trajectory_summary(records: list[dict]) -> dict:
    """The M_C curve (`schema.named_curve`: mc_start, mc_peak, ..., mc_fall); counterfactual
    and parametric accuracy and attention at its start, peak and end; the projections."""
    out = named_curve("mc", [r["step"] for r in records], [r["mc"] for r in records])
    peak = next(i for i, r in enumerate(records) if r["step"] == out["mc_peak_step"])
    first_quarter = [r for r in records if r["step"] <= records[-1]["step"] / 4]
    out.update(steps=records[-1]["step"],
               proj_theta_S_start=records[0]["proj_theta_S"],
               proj_theta_C_start=records[0]["proj_theta_C"],
               proj_theta_C_after_peak_negative_share=_share(
                   [r["proj_theta_C"] < 0 for r in records[peak + 1:]]),
               attn_subject_mean_first_quarter=_mean([r["attn_subject_test"]
                                                   for r in first_quarter]),
               attn_subject_mean=_mean([r["attn_subject_test"] for r in records]))
    if "value_conf_C+S" in records[0]:
        out["value_conf_C+S_start"] = records[0]["value_conf_C+S"]
        out["value_conf_C+S_final"] = records[-1]["value_conf_C+S"]
    for name, key in (("cf_acc", "cf_acc"), ("param_acc", "param_acc"),
                      ("attn_context", "attn_context_test"),
                      ("attn_subject", "attn_subject_test")):
        out[f"{name}_start"] = records[0][key]
        out[f"{name}_at_mc_peak"] = records[peak][key]
        out[f"{name}_final"] = records[-1][key]
    return out


def run_arm(cfg: CpiToyConfig, arm: Arm) -> tuple[list[dict], dict]:
    """Build the world, the pretrained model and the arm's data; finetune; summarize."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    dtype = getattr(torch, cfg.dtype)
    w = cfg.world
    world = make_world(world_sizes(cfg), w.n_answers, cfg.seed, w.n_heldout_answers)
    if w.pretrain == "constructed":
        w_v = pretrained_value_matrix(world, w.delta_c, w.delta_m, dtype)
    else:
        w_v = train_value_matrix(world, w.delta_c, w.delta_m, w.pretrain_steps, w.pretrain_lr,
                                 dtype)
    model = OneLayerCPI(world.vocab, w_v)
    m = arm.mixture
    train = finetune_set(world, m.n_c, m.n_cs, m.n_s_seen, m.n_s_unseen, m.n_aug, cfg.seed)
    test = counterfactual_test_set(world, cfg.seed)
    extra: dict = {"n_train": len(train), **indist_accuracy(model, train, "start")}
    full_train = train
    if arm.filter_fraction > 0:
        n_before = len(train)
        kept = drop_lowest_no_context_loss(model, train, arm.filter_fraction)
        extra.update({"n_dropped": n_before - len(kept), "n_dropped_C+S": int(
            (train.kind == CS).sum() - (kept.kind == CS).sum()), "n_train": len(kept)})
        train = kept
    records = finetune(model, train, test, cfg.finetune, arm.train_v, arm.dynamic)
    extra.update(indist_accuracy(model, full_train, "final"))
    if arm.dynamic is not None:
        extra["n_dropped_final"] = records[-1]["n_dropped"]
        extra["n_dropped_C+S_final"] = records[-1]["n_dropped_C+S"]
    with torch.no_grad():
        probs = model.value_probs(test.subject)
        extra["delta_m_measured"] = float(probs[torch.arange(len(test)), test.fact].mean())
    return records, {**trajectory_summary(records), **extra}


def _arm_key(arm: Arm) -> str:
    """Arms that train the same thing share a key (and one computation)."""
    m = arm.mixture
    return (f"c{m.n_c}-cs{m.n_cs}-s{m.n_s_seen}-u{m.n_s_unseen}-a{m.n_aug}"
            f"-v{int(arm.train_v)}-f{arm.filter_fraction:g}"
            + ("-d{}x{:g}t{}r{}".format(*arm.dynamic) if arm.dynamic else ""))


def verdict(summary: dict) -> str | None:
    """One sentence for the report: does M_C rise and then fall here, and not under C-only?
    None when the `inversion` part did not run (nothing to judge)."""
    inv, c_only = summary.get("inversion"), summary.get("c_only")
    if not inv:
        return None
    rise = inv["mc_peak"] - inv["mc_start"]
    shown = THEORY.inverts(rise, inv["mc_fall"]) and (
        c_only is None or THEORY.steady(c_only["mc_fall"]))
    curve = (f"M_C rises {inv['mc_start']:.3f} -> {inv['mc_peak']:.3f} (step "
             f"{inv['mc_peak_step']} of {inv['steps']}) and ends at {inv['mc_final']:.3f} "
             f"(fall {inv['mc_fall']:.3f})")
    control = (f", while C-only finetuning falls {c_only['mc_fall']:.3f}" if c_only
               else " (C-only control not run)")
    head = "The theory model inverts" if shown else "No inversion in the theory model"
    return (f"{head}: {curve}{control}; criterion: rise >= {THEORY.rise}, fall >= "
            f"{THEORY.fall}, C-only fall < {THEORY.no_fall}.")


def findings(summary: dict) -> dict:
    """The claims of the theory, each checked against this run's numbers."""
    out: dict = {}
    sentence = verdict(summary)
    if sentence:
        out["verdict"] = sentence
    inv = summary.get("inversion")
    if inv:
        out["inversion_mc_fall"] = inv["mc_fall"]
        out["inversion_peak_in_first_quarter"] = inv["mc_peak_step"] <= inv["steps"] / 4
    if summary.get("c_only"):
        out["c_only_mc_fall"] = summary["c_only"]["mc_fall"]
    if inv:
        peak = inv["attn_context_at_mc_peak"]
        out["inversion_attn_context_rise"] = peak - inv["attn_context_start"]
        out["inversion_attn_context_fall"] = peak - inv["attn_context_final"]
        out["inversion_proj_theta_C_start"] = inv["proj_theta_C_start"]
        out["inversion_proj_theta_C_negative_after_peak"] = inv[
            "proj_theta_C_after_peak_negative_share"]
    if inv and summary.get("with_s"):
        ws = summary["with_s"]
        out["with_s_proj_theta_S_start_ratio"] = ws["proj_theta_S_start"] / inv[
            "proj_theta_S_start"]
        out["with_s_attn_subject_gain_first_quarter"] = (
            ws["attn_subject_mean_first_quarter"] - inv["attn_subject_mean_first_quarter"])
        out["with_s_attn_subject_gain_final"] = (ws["attn_subject_final"]
                                                 - inv["attn_subject_final"])
    if inv and summary.get("train_v"):
        out["train_v_peak_step_minus_qk_only"] = (summary["train_v"]["mc_peak_step"]
                                                  - inv["mc_peak_step"])
        out["train_v_final_mc_minus_qk_only"] = summary["train_v"]["mc_final"] - inv["mc_final"]
        out["train_v_value_conf_C+S_gain"] = (summary["train_v"]["value_conf_C+S_final"]
                                              - summary["train_v"]["value_conf_C+S_start"])
    mit = summary.get("mitigations")
    if mit:
        base = mit["baseline"]["mc_final"]
        for name, arm in mit.items():
            if name != "baseline":
                out[f"{name}_final_mc_gain"] = arm["mc_final"] - base
        out.update(mitigation_findings(mit))
    return out


@register("cpi-toy", CpiToyConfig, with_phase(plot_cpi_toy),
          "Context-parametric inversion in the one-layer theory model (5 parts)",
          columns=("mc_start", "mc_peak", "mc_peak_step", "mc_final", "cf_acc_final",
                   "attn_context_at_mc_peak", "attn_context_final", "attn_subject_final"))
def run(cfg: CpiToyConfig, out_dir: Path) -> Summary:
    """Run every distinct arm once (in parallel), checkpointing each; assemble the parts.
    With `study=phase`, the phase diagram instead (see `experiments.phase`)."""
    if cfg.study == "phase":
        records, rows = toy_phase(cfg.phase, cfg.workers, cfg)
        atomic_write_jsonl(out_dir / METRICS, records)
        atomic_write_json(out_dir / PHASE, {"toy": rows})
        return {"phase": {"toy": rows}, "findings": {"verdict": phase_verdict(rows, cfg.phase)}}
    store = PartStore(out_dir)
    arms = [arm for part in cfg.parts for arm in arms_of(cfg, part)]
    unique = {_arm_key(a): a for a in reversed(arms)}  # first arm wins the label
    todo = sorted(((key, arm) for key, arm in unique.items() if store.load(key) is None),
                  key=lambda item: not item[1].train_v)  # slow (W_V) arms first
    log.info("%d distinct arms, %d to run", len(unique), len(todo))
    keys = {id(arm): key for key, arm in todo}
    run_jobs(run_arm, [(cfg, arm) for _, arm in todo], cfg.workers,
             lambda job, result: store.save(keys[id(job[1])], *result))
    summary: dict = {}
    records: list[dict] = []
    for part in cfg.parts:
        arm_summaries = {}
        for arm in arms_of(cfg, part):
            saved = store.load(_arm_key(arm))
            arm_summaries[arm.name] = saved["summary"]
            records += [{**r, "part": part, "arm": arm.name} for r in saved["records"]]
        summary[part] = (arm_summaries if part == "mitigations"
                         else next(iter(arm_summaries.values())))
    atomic_write_jsonl(out_dir / METRICS, records)
    summary["findings"] = findings(summary)
    return summary


def _phase_cell(cfg: CpiToyConfig, share: float, delta_c: float, seed: int) -> list[dict]:
    """M_C over finetuning for one cell: C+S share `share` of the C + C+S points, delta_C."""
    m = cfg.mixture
    total = m.n_c + m.n_cs
    n_cs = round(share * total)
    cell = dataclasses.replace(cfg, seed=seed,
                               world=dataclasses.replace(cfg.world, delta_c=delta_c),
                               mixture=dataclasses.replace(m, n_c=total - n_cs, n_cs=n_cs))
    return run_arm(cell, Arm("phase", "mixed", cell.mixture, False))[0]


def toy_phase(phase: PhaseConfig, workers: int, cfg: CpiToyConfig | None = None
              ) -> tuple[list[dict], list[dict]]:
    """The theory model's phase diagram (records, one row per cell) on `phase`'s grid, with
    delta_C = the grid's reliability; the curve is M_C, the theory's headline quantity."""
    cfg = cfg or CpiToyConfig()
    if phase.toy_steps is not None:
        cfg = dataclasses.replace(cfg, finetune=dataclasses.replace(cfg.finetune,
                                                                    steps=phase.toy_steps))
    grid = cells(phase)
    runs = run_jobs(_phase_cell, [(cfg, x, r, s) for x, r, s in grid], workers)
    curves, records, steps = {}, [], []
    for (x, r, s), recs in zip(grid, runs, strict=True):
        steps = [rec["step"] for rec in recs]
        curves[x, r, s] = [rec["mc"] for rec in recs]
        records += [{**rec, "model": "toy", "cs_share": x, "reliability": r, "seed": s}
                    for rec in recs]
    return records, phase_summary(curves, steps, phase, "mc")


def phase_verdict(rows: list[dict], phase: PhaseConfig) -> str:
    inv = [f"({row['cs_share']:g}, {row['reliability']:g})" for row in rows if row["inverts"]]
    return (f"The theory model inverts (seed-mean M_C fall >= {phase.threshold:g}) in "
            f"{len(inv)} of {len(rows)} cells (C+S share, delta_C): {', '.join(inv) or 'none'}.")


def mitigation_findings(mit: dict) -> dict:
    """Per mitigation arm: the share of the baseline's M_C fall it removes, the change in
    in-distribution accuracy, and whether both meet the goal."""
    base = mit["baseline"]
    out: dict = {}
    for name, arm in mit.items():
        if name == "baseline":
            continue
        removed = fall_removed(base["mc_fall"], arm["mc_fall"])
        change = arm.get("indist_final", float("nan")) - base.get("indist_final", float("nan"))
        out[f"{name}_fall_removed"] = removed
        out[f"{name}_indist_change"] = change
        out[f"{name}_goal_met"] = meets_goal(removed, change)
    return out
