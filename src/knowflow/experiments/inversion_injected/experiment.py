"""`inversion-injected`: context-parametric inversion in a pretrained model whose memory of a
world of made-up subjects was made strong by injecting it first.

Stage 1 finetunes the model (any HF causal LM, or `model=tiny`: a tiny Llama trained from
scratch on this world alone) on plain-text statements of the memorized subjects' facts
(`experiments.inversion_injected.world`) until recall without a context reaches
`stage1.recall_target`, then
`stage1.extra_epochs` more (the memory strength; `strengths` adds more strengths, run on the
`mixed` arm). The result is cached by a hash of everything that determines it (see
`inversion_injected.jobs.stage1_key`). Stage 2 is the paper's instruction finetuning on the
injected model, one arm per job, through the `knowflow sft` path:

- `mixed`: C points (unmemorized subjects, the answer only in the context), C+S points
  (memorized subjects, agreeing context) and S points (no context) in `mixture`'s shares;
- `c_only`: the same number of rows, all C (the control);
- `filtered`: `mixed` without the `filter_fraction` with the lowest no-context loss under the
  stage-1 model (the paper's filter);
- `augmented`: `mixed` plus `aug_share` counterfactual rows (memorized subject, a context
  stating another value, answered from it);
- `dynamic`: `mixed` under dynamic curation (`dynamic.*`, as `knowflow sft --curate dynamic`).

The `RelianceTracker` scores, every `track.every` steps, counterfactual items about memorized
subjects stage 2 never shows (the context contradicts the injected fact) by log-likelihood and
by generation, with the attention to the context; a second evaluation (the same tracker's
measure) scores held-out C and C+S items and recall of the held-out subjects' injected facts
without a context. Each counterfactual item's label is audited against generated text at the
start and the end of every job (`inversion_injected.jobs.audit`).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from knowflow.config import require
from knowflow.data.instructions import MixtureShares
from knowflow.errors import ConfigError
from knowflow.evaluation.curves import InversionCriterion, curve_summary, seed_interval
from knowflow.experiments.inversion_injected.figures import plot_inversion_injected
from knowflow.experiments.inversion_injected.jobs import TINY, arm_job, stage1_job
from knowflow.experiments.inversion_injected.world import InjectedWorldConfig
from knowflow.experiments.inversion_smollm2.experiment import mitigation_goal
from knowflow.experiments.inversion_tiny.model import TinyModelConfig
from knowflow.experiments.mitigations import check_dynamic_arm, dynamic_arm
from knowflow.experiments.parallel import run_pipeline
from knowflow.experiments.registry import Summary, register
from knowflow.lens.load import SMOLLM2
from knowflow.store.files import atomic_write_jsonl
from knowflow.store.identity import METRICS
from knowflow.store.run_folder import PartStore
from knowflow.train.curation import DynamicCurationConfig
from knowflow.train.sft import SFTConfig
from knowflow.train.tracker import TrackerConfig

log = logging.getLogger(__name__)

ARMS = ("mixed", "c_only", "filtered", "augmented", "dynamic")
MITIGATIONS = ("filtered", "augmented", "dynamic")
# the reproduction's goal: mixed rises >= 0.2 then falls >= 0.1 on every seed; c_only falls
# < 0.05
CRITERION = InversionCriterion(rise=0.2, fall=0.1, no_fall=0.05)


@dataclass(frozen=True)
class Stage1Config:
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(
        train="full", lr=3e-4, steps=1, batch_size=16, max_length=48, log_every=5,
        save_limit=1, prompt_format="plain"))
    max_epochs: int = 30          # stop here even if recall never reaches the target
    recall_target: float = 0.9    # recall without context on the memorized subjects
    extra_epochs: int = 0         # epochs after the target is first reached (memory strength)

    def validate(self) -> None:
        try:
            self.sft.validate()
        except ConfigError as exc:
            raise exc.under("stage1.sft.") from None
        require(self.max_epochs >= 1, "stage1.max_epochs", "must be at least 1")
        require(0 < self.recall_target <= 1, "stage1.recall_target", "must lie in (0, 1]")
        require(self.extra_epochs >= 0, "stage1.extra_epochs", "must not be negative")


@dataclass(frozen=True)
class InjectedConfig:
    model: str = SMOLLM2          # an HF causal LM (name or folder), or "tiny"
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)
    arms: tuple[str, ...] = ARMS
    strengths: tuple[int, ...] = ()  # more stage1.extra_epochs values, run on `mixed`
    workers: int = 2              # processes, one torch thread each
    filter_fraction: float = 0.25
    aug_share: float = 0.25
    dynamic: DynamicCurationConfig = field(default_factory=lambda: dynamic_arm(20))
    # 16 subjects per group: sized for a 2-core CPU (docs/experiments/inversion-injected.md)
    world: InjectedWorldConfig = field(default_factory=lambda: InjectedWorldConfig(
        mem_train=16, mem_eval=16, unk_train=16, unk_eval=16))
    mixture: MixtureShares = field(default_factory=lambda: MixtureShares(
        size=200, c=0.1, cs=0.7, s=0.2))
    stage1: Stage1Config = field(default_factory=Stage1Config)
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(
        train="lora", lr=3e-4, steps=80, batch_size=8, max_length=128, save_every=40,
        save_limit=1, log_every=10, prompt_format="plain"))
    track: TrackerConfig = field(default_factory=lambda: TrackerConfig(
        suites=(), every=10, limit=None, prompt_format="plain", scoring="both",
        attention=True, batch_size=24))
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)  # model = "tiny" only

    def validate(self) -> None:
        require(bool(self.model.strip()), "model", "give a model name or folder, or tiny")
        require(len(self.seeds) > 0, "seeds", "choose at least one seed")
        require(len(self.arms) > 0, "arms", "choose at least one arm")
        for arm in self.arms:
            require(arm in ARMS, "arms", f"unknown arm {arm!r} (known: {', '.join(ARMS)})")
        require(all(s >= 0 for s in self.strengths), "strengths", "must not be negative")
        require(self.workers >= 1, "workers", "must be at least 1")
        require(0 < self.filter_fraction < 1, "filter_fraction", "must lie in (0, 1)")
        require(self.aug_share > 0, "aug_share", "must be positive")
        check_dynamic_arm(self.dynamic)
        self.dynamic.validate("dynamic.")
        self.world.validate("world.")
        self.mixture.validate("mixture.")
        self.stage1.validate()
        try:
            self.sft.validate()
        except ConfigError as exc:
            raise exc.under("sft.") from None
        require(self.sft.prompt_format == "plain", "sft.prompt_format",
                "the injected world is asked in the plain layout")
        self.track.validate()
        require(self.track.prompt_format == "plain", "track.prompt_format",
                "track in the layout stage 2 trains in (plain)")
        if self.model == TINY:
            t = self.tiny
            require(min(t.layers, t.heads, t.d_model, t.d_ff) >= 1, "tiny",
                    "layers, heads, d_model and d_ff must be at least 1")
            require(t.d_model % t.heads == 0, "tiny.d_model", "must be divisible by heads")

    def jobs(self) -> list[tuple[str, int, int]]:
        """(arm, seed, extra_epochs) of every stage-2 job: each arm at the default strength,
        `mixed` at every other strength too."""
        base = self.stage1.extra_epochs
        out = [(arm, seed, base) for arm in self.arms for seed in self.seeds]
        out += [("mixed", seed, e) for e in self.strengths if e != base for seed in self.seeds]
        return out


def job_key(arm: str, seed: int, extra: int) -> str:
    return f"{arm}-e{extra}-seed{seed}"


def job_row(records: list[dict], summary: dict) -> dict:
    """One job's figures: the counterfactual curve under both scorings (start, peak, peak
    step, final, rise, fall), the in-distribution and recall accuracies at the start and the
    end, the attention to the context, the audits and the times."""
    steps = [r["step"] for r in records]
    row: dict = {}
    for key in ("cf_acc", "cf_acc_gen"):  # log-likelihood and generation scoring
        if all(key in r for r in records):
            row[key] = curve_summary(steps, [r[key] for r in records])
    for key in ("c_acc", "cs_acc", "c_acc_gen", "cs_acc_gen", "recall_acc", "param_acc",
                "attn_context"):
        if key in records[0]:
            row[f"{key}_start"], row[f"{key}_final"] = records[0][key], records[-1][key]
    if "c_acc_gen_final" in row and "cs_acc_gen_final" in row:
        row["indist_start"] = (row["c_acc_gen_start"] + row["cs_acc_gen_start"]) / 2
        row["indist_final"] = (row["c_acc_gen_final"] + row["cs_acc_gen_final"]) / 2
    keep = ("audit_start", "audit_end", "seconds", "cpu_seconds", "n_train", "n_by_kind",
            "n_dropped", "curation_final_dropped_by_kind")
    row.update({k: summary[k] for k in keep if k in summary})
    row["stage1_recall"] = summary["stage1"]["recall"]
    row["stage1_reached_epoch"] = summary["stage1"]["reached_epoch"]
    row["stage1_epochs"] = summary["stage1"]["epochs"]
    return row


def arm_table(rows: dict[int, dict]) -> dict:
    """An arm over seeds: seed means of the headline numbers and each seed's own."""
    seeds = sorted(rows)
    out: dict = {"seeds": seeds}
    for name in ("cf_acc", "cf_acc_gen"):
        for part in ("start", "peak", "peak_step", "final", "rise", "fall"):
            vals = [rows[s][name][part] for s in seeds if name in rows[s]]
            if vals:
                out[f"{name}_{part}_seeds"] = vals
                out[f"{name}_{part}"] = sum(vals) / len(vals)
    if len(seeds) > 1:
        out["cf_acc_fall_ci95"] = seed_interval(out["cf_acc_fall_seeds"])
    for key in ("indist_final", "c_acc_gen_final", "cs_acc_gen_final", "recall_acc_final",
                "stage1_recall", "seconds", "cpu_seconds"):
        vals = [rows[s][key] for s in seeds if rows[s].get(key) is not None]
        if vals:
            out[key] = sum(vals) / len(vals)
    return out


def findings(arms: dict[str, dict]) -> dict:
    """The reproduction's goal: `mixed` rises >= 0.2 then falls >= 0.1 on every seed (log-likelihood
    scoring), `c_only` falls < 0.05 on every seed, and a mitigation removes >= 80% of the
    (seed-mean) fall within 2 points of in-distribution accuracy."""
    out: dict = {}
    mixed = arms.get("mixed")
    if mixed is None:
        return out
    c = CRITERION
    ok = [c.inverts(r + 1e-9, f + 1e-9) for r, f in
          zip(mixed["cf_acc_rise_seeds"], mixed["cf_acc_fall_seeds"], strict=True)]
    out["mixed_inverts_seeds"] = ok
    shown = all(ok)
    if "c_only" in arms:
        worst = max(arms["c_only"]["cf_acc_fall_seeds"])
        out["c_only_worst_cf_acc_fall"] = worst
        shown = shown and c.steady(worst)
    out["inversion_shown"] = shown
    for arm in MITIGATIONS:
        if arm in arms:
            out.update({f"{arm}_{k}": v for k, v in mitigation_goal(mixed, arms[arm]).items()})
    out["goal_met"] = shown and any(out.get(f"{a}_goal_met") for a in MITIGATIONS)
    out["verdict"] = (
        f"{'Inversion' if shown else 'No inversion'}: mixed rises "
        f"{', '.join(f'{v:.3f}' for v in mixed['cf_acc_rise_seeds'])} and falls "
        f"{', '.join(f'{v:.3f}' for v in mixed['cf_acc_fall_seeds'])} (per seed; goal rise >= "
        f"{c.rise}, fall >= {c.fall} on every seed)"
        + (f", c_only falls at most {out['c_only_worst_cf_acc_fall']:.3f} (< {c.no_fall} "
           "needed)" if "c_only_worst_cf_acc_fall" in out else "") + ".")
    return out


@register("inversion-injected", InjectedConfig, plot_inversion_injected,
          "Inversion after injecting made-up facts into a pretrained model (stage 1 plain "
          "text, stage 2 C/C+S/S instruction finetuning; 5 arms, memory strengths)",
          columns=("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                   "cf_acc_rise", "cf_acc_fall", "cf_acc_gen_peak", "cf_acc_gen_final",
                   "indist_final", "recall_acc_final", "cpu_seconds"))
def run(cfg: InjectedConfig, out_dir: Path) -> Summary:
    """Stage 1 per (seed, strength), cached; each stage-2 job as soon as its stage 1 is done."""
    out_dir = Path(out_dir)
    store = PartStore(out_dir)
    jobs = cfg.jobs()
    todo = [(cfg, arm, seed, extra, store.dir / job_key(arm, seed, extra))
            for arm, seed, extra in jobs if store.load(job_key(arm, seed, extra)) is None]
    firsts = sorted({(seed, extra) for _, seed, extra in jobs})

    def save(job: tuple, result: dict) -> None:
        store.save(job_key(*job[1:4]), result["records"], result["summary"])
        shutil.rmtree(job[4], ignore_errors=True)

    stage1 = run_pipeline(stage1_job, [(cfg, s, e) for s, e in firsts], arm_job,
                          lambda job, _: [t for t in todo if (t[2], t[3]) == job[1:]],
                          cfg.workers, save)
    rows = {job: job_row(**store.load(job_key(*job))) for job in jobs}
    records = [{**r, "arm": arm, "seed": seed, "extra_epochs": extra}
               for (arm, seed, extra) in jobs
               for r in store.load(job_key(arm, seed, extra))["records"]]
    atomic_write_jsonl(out_dir / METRICS, records)
    base = cfg.stage1.extra_epochs
    summary: dict = {arm: arm_table({s: rows[arm, s, base] for s in cfg.seeds})
                     for arm in cfg.arms}
    summary["per_seed"] = {job_key(*job): row for job, row in rows.items()}
    if cfg.strengths and "mixed" in cfg.arms:
        summary["strengths"] = {str(e): arm_table({s: rows["mixed", s, e] for s in cfg.seeds})
                                for e in sorted({base, *cfg.strengths})}
    summary["stage1"] = {f"seed{s}-e{e}": {k: v for k, v in info.items() if k != "curve"}
                         for (s, e), info in zip(firsts, stage1, strict=True)}
    summary["findings"] = findings({a: summary[a] for a in cfg.arms})
    return summary


def smoke_config(**over) -> InjectedConfig:
    """A seconds-long configuration on the tiny model (tests)."""
    W = InjectedWorldConfig  # noqa: N806
    cfg = InjectedConfig(
        model=TINY, workers=1, arms=("mixed", "c_only"),
        world=W(relations=("city", "job"), values=4, mem_train=6, mem_eval=4, unk_train=6,
                unk_eval=4, paraphrases=2),
        mixture=MixtureShares(size=32, c=0.25, cs=0.5, s=0.25),
        stage1=Stage1Config(sft=SFTConfig(train="full", lr=1e-2, steps=1, batch_size=8,
                                          max_length=48, log_every=1, prompt_format="plain"),
                            max_epochs=3, recall_target=0.9),
        sft=SFTConfig(train="full", lr=3e-3, steps=4, batch_size=8, max_length=64,
                      save_every=2, log_every=1, prompt_format="plain"),
        track=TrackerConfig(suites=(), every=2, limit=None, prompt_format="plain",
                            scoring="both", attention=True, batch_size=8),
        dynamic=DynamicCurationConfig(mode="dynamic", every=2, fraction=0.5, threshold=None,
                                      readmit=False),
        tiny=TinyModelConfig(layers=1, heads=2, d_model=16, d_ff=32))
    return dataclasses.replace(cfg, **over)
