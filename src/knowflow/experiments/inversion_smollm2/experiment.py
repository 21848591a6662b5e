"""`inversion-smollm2`: context-parametric inversion in a real model, and its mitigations.

SmolLM2-135M-Instruct is finetuned on knowflow's built-in C/C+S/S mixture (its size and C+S
share set by `mixture.*`) while the `RelianceTracker` scores counterfactual accuracy on
held-out items (never in the mixture: `cf-quotes` and the held-out subjects of `cf-world`) by
log-likelihood and by generation. Arms:
- `lora`, `full`, `qk_only`: plain finetuning with LoRA, all weights, or only the query and
  key projections (each with its own learning rate: `sft.lr`, `full_lr`, `qk_lr`);
- `curated`: the mixture without the 25% of examples with the lowest no-context loss under the
  model before finetuning (`knowflow curate`, the paper's filter);
- `augmented`: entity-substituted counterfactual examples added (`knowflow augment`);
- `dynamic`: dynamic curation (`knowflow sft --curate dynamic --curate-keep-out`): every
  `dynamic.every` steps the rows' no-context loss is re-scored under the current weights, and
  of the rows still in, the lowest share whose loss is below `dynamic.threshold` (answered
  from memory) is dropped for good.
The mitigation arms train like the `base` arm (lora, full or qk_only), and are compared with it:
the share of its fall they remove, and the in-distribution accuracy they keep (held-out C and
C+S rows, scored by generation before and after finetuning). Each arm is an ordinary
`knowflow sft` run in `arms/<arm>/` (resumable on its own); arms run in parallel processes.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from knowflow.config import option, require
from knowflow.data.instruction_rows import save_instructions
from knowflow.data.instructions import MixtureConfig, builtin_mixture, heldout_rows
from knowflow.data.prompts import instruction_prompt
from knowflow.evaluation.curves import THEORY, curve_summary
from knowflow.evaluation.generate import generate
from knowflow.evaluation.normalize import alternatives, answers_present
from knowflow.experiments.mitigations import (
    SMOLLM2_ARMS,
    SMOLLM2_MITIGATIONS,
    SMOLLM2_MODES,
    check_dynamic_arm,
    dynamic_arm,
    fall_removed,
    meets_goal,
)
from knowflow.experiments.parallel import run_jobs
from knowflow.experiments.registry import Summary, register
from knowflow.lens.load import load_model
from knowflow.report.reliance import plot_arms
from knowflow.store.files import atomic_write_json, atomic_write_jsonl
from knowflow.store.identity import METRICS, SUMMARY
from knowflow.store.readers import read_jsonl
from knowflow.store.run_folder import read_result
from knowflow.train.augment import augment
from knowflow.train.criticality import CurateConfig, curate_examples
from knowflow.train.curation import DynamicCurationConfig
from knowflow.train.sft import SFTConfig
from knowflow.train.sft_job import SFTJobConfig, run_sft_job
from knowflow.train.tracker import TrackerConfig

log = logging.getLogger(__name__)

MODES, MITIGATIONS, ARMS = SMOLLM2_MODES, SMOLLM2_MITIGATIONS, SMOLLM2_ARMS
DEFAULT_ARMS = ("lora", "dynamic")  # sized for < 45 min on 2 CPU cores (README)


@dataclass(frozen=True)
class InversionSmolConfig:
    model: str = "smollm2-135m-instruct"
    arms: tuple[str, ...] = DEFAULT_ARMS
    # how the mitigation arms train: lora, full or qk_only
    base: str = option("lora", one_of=MODES)
    workers: int = 2                  # one process per arm (each one torch thread)
    qk_lr: float = option(1e-4, gt=0)  # qk_only trains full-rank weights: a smaller step
    full_lr: float = option(2e-5, gt=0)  # so does full finetuning
    # static filter: share dropped once, before finetuning
    curate_drop: float = option(0.5, gt=0, lt=1)
    augment_ratio: float = option(0.25, gt=0)
    dynamic: DynamicCurationConfig = field(default_factory=dynamic_arm)
    indist_n: int = option(24, ge=0)  # held-out C rows and C+S rows each (0: none)
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(
        train="lora", lr=1e-3, steps=300, batch_size=4, prompt_format="plain", save_every=50,
        log_every=5))
    # C+S share raised from the built-in 0.5 (the inversion is driven by C+S points)
    mixture: MixtureConfig = field(default_factory=lambda: MixtureConfig(c=0.1, cs=0.8, s=0.1))
    track: TrackerConfig = field(default_factory=lambda: TrackerConfig(
        suites=("cf-quotes", "cf-world"), every=25, limit=24, prompt_format="plain",
        scoring="both", attention=False))

    def validate(self) -> None:
        """What spans several fields; each field's own range is declared on it (`option`;
        `workers` by the generic rules), checked by `validate_config` before this."""
        require(bool(self.arms), "arms", "name at least one arm")
        for arm in self.arms:
            require(arm in ARMS, "arms", f"unknown arm {arm!r} (known: {', '.join(ARMS)})")
        check_dynamic_arm(self.dynamic)  # its fields: validate_config, as every section's
        require(self.sft.train == "lora", "sft.train",
                "sft.* configures the lora arm; choose full or qk_only by arm (or base)")
        for arm in self.arms:
            self.job(arm).validate()

    def mode(self, arm: str) -> str:
        return arm if arm in MODES else self.base

    def job(self, arm: str, data: str = "builtin"):
        mode = self.mode(arm)
        lr = {"lora": self.sft.lr, "full": self.full_lr, "qk_only": self.qk_lr}[mode]
        sft = dataclasses.replace(self.sft, train=mode, lr=lr)
        curate = self.dynamic if arm == "dynamic" else DynamicCurationConfig()
        return SFTJobConfig(model=self.model, data=data, sft=sft, mixture=self.mixture,
                            track=self.track, save_model=False, track_items="heldout",
                            curate=curate)


def _prepare_data(cfg: InversionSmolConfig, arm: str, arm_dir: Path) -> str:
    """The training file of `arm` (written once into its folder)."""
    if arm in (*MODES, "dynamic"):
        return "builtin"
    path = arm_dir / "train.jsonl"
    if path.exists():
        return str(path)
    rows = builtin_mixture(cfg.mixture)
    if arm == "augmented":
        rows = augment(rows, cfg.augment_ratio, cfg.mixture.seed)
    else:
        model, tok = load_model(cfg.model)
        ccfg = CurateConfig(drop=cfg.curate_drop, prompt_format=cfg.sft.prompt_format)
        rows, scores = curate_examples(model, tok, rows, ccfg)
        atomic_write_jsonl(arm_dir / "scores.jsonl", scores)
    save_instructions(path, rows)
    return str(path)


def indist_accuracy(model, tokenizer, rows, fmt: str, batch_size: int = 16) -> dict:
    """Share of held-out C and C+S rows whose answer the model's greedy output mentions."""
    if not rows:
        return {}
    seqs = []
    for ex in rows:
        p = instruction_prompt(tokenizer, ex.instruction, ex.input, fmt)
        seqs.append(tokenizer(p.text, add_special_tokens=p.add_special_tokens)["input_ids"])
    outs = generate(model, tokenizer, seqs, batch_size=batch_size, max_new_tokens=12)
    hits: dict[str, list[float]] = {}
    for ex, out in zip(rows, outs, strict=True):
        hit = answers_present(out, [alternatives(ex.output)])[0]
        hits.setdefault(ex.extra["kind"], []).append(float(hit))
    acc = {f"indist_{k}": sum(v) / len(v) for k, v in hits.items()}
    acc["indist"] = sum(sum(v) for v in hits.values()) / len(rows)
    return acc


def run_arm(cfg: InversionSmolConfig, arm: str, out_dir: Path) -> dict:
    arm_dir = out_dir / "arms" / arm
    if (arm_dir / SUMMARY).exists():
        return read_result(arm_dir, SUMMARY)
    data = _prepare_data(cfg, arm, arm_dir)
    job = cfg.job(arm, data)
    model, tok = load_model(cfg.model, device=job.device, dtype=job.dtype)
    held = heldout_rows(cfg.mixture, cfg.indist_n) if cfg.indist_n else []
    fmt = cfg.sft.prompt_format
    start = indist_accuracy(model, tok, held, fmt)
    summary = run_sft_job(job, arm_dir, model=model, tokenizer=tok)  # trains `model` in place
    summary.update({f"{k}_start": v for k, v in start.items()})
    summary.update({f"{k}_final": v for k, v in indist_accuracy(model, tok, held, fmt).items()})
    if arm == "curated":
        scores = read_jsonl(arm_dir / "scores.jsonl")
        dropped = [s for s in scores if s["dropped"]]
        summary["dropped_by_kind"] = {k: sum(s["kind"] == k for s in dropped)
                                      for k in ("C", "C+S", "S")}
    summary["curves"] = curves(read_jsonl(arm_dir / METRICS))
    atomic_write_json(arm_dir / SUMMARY, summary)
    return summary


def curves(records: list[dict]) -> dict:
    """`schema.curve_summary` of every counterfactual-accuracy series (overall and per suite;
    `_gen`: generation scoring), from the tracker's records."""
    keys = sorted({k for r in records for k in r
                   if k.endswith("cf_acc") or k.endswith("cf_acc_gen")})
    out = {}
    for key in keys:
        pts = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        out[key] = curve_summary(*zip(*pts, strict=True))
    return out


def _row(s: dict) -> dict:
    keys = ("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final", "cf_acc_rise",
            "cf_acc_fall", "param_acc_start", "param_acc_final", "attn_context_start",
            "attn_context_final",
            "train_loss", "n_examples", "trainable_params", "seconds", "tracking_seconds",
            "indist_start", "indist_final", "indist_C_final", "indist_C+S_final",
            "curation_rescorings", "curation_seconds", "curation_final_dropped_by_kind")
    row = {k: s.get(k) for k in keys if k in s or k.startswith("cf_acc")}
    gen = s.get("curves", {}).get("cf_acc_gen")
    if gen:
        row.update({f"cf_acc_gen_{k}": gen[k] for k in ("start", "peak", "peak_step", "final",
                                                        "fall")})
    if "dropped_by_kind" in s:
        row["dropped_by_kind"] = s["dropped_by_kind"]
    row["curves"] = s.get("curves", {})
    return row


@register("inversion-smollm2", InversionSmolConfig, plot_arms,
          "Reliance during SmolLM2-135M finetuning (LoRA/full/QK-only), and curated/"
          "augmented/dynamic-curation runs",
          columns=("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                   "cf_acc_rise", "cf_acc_fall", "cf_acc_gen_fall", "indist_final", "seconds"))
def run(cfg: InversionSmolConfig, out_dir: Path) -> Summary:
    """Run the arms (in parallel), then gather their records and summaries."""
    out_dir = Path(out_dir)
    if "curated" in cfg.arms:  # score with the model once, before the workers start
        _prepare_data(cfg, "curated", out_dir / "arms" / "curated")
    results = run_jobs(run_arm, [(cfg, arm, out_dir) for arm in cfg.arms], cfg.workers)
    summary = {arm: _row(s) for arm, s in zip(cfg.arms, results, strict=True)}
    records = [{**r, "arm": arm} for arm in cfg.arms
               for r in read_jsonl(out_dir / "arms" / arm / METRICS)]
    atomic_write_jsonl(out_dir / METRICS, records)
    summary["findings"] = findings(summary, cfg.base)
    return summary


def mitigation_goal(base: dict, arm: dict) -> dict:
    """How much of the base arm's fall `arm` removes, the in-distribution accuracy it keeps,
    and whether that meets the goal (>= 80% removed, within 2 points)."""
    out: dict = {}
    removed = fall_removed(base["cf_acc_fall"], arm["cf_acc_fall"])
    if removed is not None:
        out["fall_removed"] = removed
    if base.get("indist_final") is not None and arm.get("indist_final") is not None:
        out["indist_change"] = arm["indist_final"] - base["indist_final"]
    if "fall_removed" in out and "indist_change" in out:
        out["goal_met"] = meets_goal(out["fall_removed"], out["indist_change"])
    return out


def findings(summary: dict, base_arm: str = "lora") -> dict:
    """Each arm's fall, each mitigation against the `base_arm` (fall removed, accuracy kept),
    and a verdict on the base arm (the inversion criterion of the toy models); no verdict
    when the base arm did not run."""
    arms = {k: v for k, v in summary.items() if isinstance(v, dict) and "cf_acc_fall" in v}
    out: dict = {f"{arm}_cf_acc_fall": row["cf_acc_fall"] for arm, row in arms.items()}
    base = arms.get(base_arm)
    if base is None:
        return out
    for arm in MITIGATIONS:
        if arm in arms:
            out.update({f"{arm}_{k}": v for k, v in mitigation_goal(base, arms[arm]).items()})
    shown = THEORY.inverts(base["cf_acc_rise"], base["cf_acc_fall"])
    others = ", ".join(f"{arm} {row['cf_acc_fall']:.3f}" for arm, row in arms.items()
                       if arm != base_arm)
    label = {"lora": "LoRA", "full": "full", "qk_only": "QK-only"}[base_arm]
    verdict = (
        f"{'Inversion' if shown else 'No inversion'} in {label} finetuning: counterfactual "
        f"accuracy {base['cf_acc_start']:.3f} -> peak {base['cf_acc_peak']:.3f} (step "
        f"{base['cf_acc_peak_step']}) -> {base['cf_acc_final']:.3f}, fall {base['cf_acc_fall']:.3f}"
        + (f" (the other arms fall {others})" if others else "")
        + f"; criterion: rise >= {THEORY.rise}, fall >= {THEORY.fall}.")
    return {"verdict": verdict, **out}
