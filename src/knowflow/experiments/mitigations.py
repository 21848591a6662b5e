"""What every context-parametric-inversion experiment judges with: the arms, the inversion
criterion, and the goal a mitigation must meet.

**Criterion.** A curve *inverts* when counterfactual accuracy (M_C for the theory model) rises
by at least `rise` from its start to its peak and then falls by at least `fall` from its peak
to the end, while the context-only control falls by less than `no_fall`. Each experiment keeps
the thresholds it was calibrated with (`schema.InversionCriterion`, beside the curve summary,
so that `knowflow report` judges tracker folders by the same rule): the theory model
(`cpi-toy`) and SmolLM2 (`inversion-smollm2`) use `THEORY` (0.2 / 0.15), the tiny
transformer (`inversion-tiny`, judged on every seed) uses `TINY` (0.3 / 0.2).

**Goal.** A mitigation meets the goal when it removes at least `GOAL_REMOVED` of the
unmitigated arm's fall (`fall_removed`) and keeps in-distribution accuracy within
`GOAL_INDIST` of it.

**Dynamic curation.** Every experiment's `dynamic` arm is configured by one section,
`dynamic` (`train.curation.DynamicCurationConfig`, as `knowflow sft --curate dynamic`), from
`dynamic_arm`'s defaults.
"""

from __future__ import annotations

from knowflow.config import require
from knowflow.train.criticality import ARM_FRACTION, MEMORY_LOSS
from knowflow.train.curation import DynamicCurationConfig

GOAL_REMOVED, GOAL_INDIST = 0.8, 0.02


def fall_removed(base_fall: float, arm_fall: float) -> float | None:
    """The share of the unmitigated arm's fall a mitigation removes (None: nothing fell)."""
    return 1 - max(arm_fall, 0.0) / base_fall if base_fall > 0 else None


def meets_goal(removed: float | None, indist_change: float) -> bool:
    """`removed` (from `fall_removed`) and the in-distribution accuracy change meet the goal
    (1e-12: a change of exactly -GOAL_INDIST computed in floating point still counts)."""
    return removed is not None and removed >= GOAL_REMOVED and \
        indist_change >= -GOAL_INDIST - 1e-12


# The arms: the finetuning modes each experiment trains, and the mitigations it compares.
TINY_ARMS = ("mixed", "c_only", "filtered", "augmented", "qk_only", "lora", "dynamic")
# inversion-tiny's default: the paper's study and its mitigations; `dynamic` (which does not
# help there: README) is opt-in, so that `make demo` stays under 6 minutes
TINY_DEFAULT_ARMS = TINY_ARMS[:-1]
TINY_MITIGATIONS = ("filtered", "augmented", "qk_only", "lora", "dynamic")
SMOLLM2_MODES = ("lora", "full", "qk_only")
SMOLLM2_MITIGATIONS = ("curated", "augmented", "dynamic")
SMOLLM2_ARMS = (*SMOLLM2_MODES, *SMOLLM2_MITIGATIONS)


def dynamic_arm(every: int = 50) -> DynamicCurationConfig:
    """The `dynamic` arm's curation as the experiments start it: re-score the no-context loss
    every `every` steps and leave out for good (no re-admission) at most `ARM_FRACTION` of the
    rows still in, of those only the ones below `MEMORY_LOSS` (answered from memory)."""
    return DynamicCurationConfig(mode="dynamic", every=every, fraction=ARM_FRACTION,
                                 threshold=MEMORY_LOSS, readmit=False)


def check_dynamic_arm(cfg: DynamicCurationConfig) -> None:
    """An experiment's `dynamic` section configures its dynamic arm: its mode is dynamic."""
    require(cfg.mode == "dynamic", "dynamic.mode", "the dynamic arm's mode is dynamic")


def renamed_to_dynamic(old_prefix: str) -> dict[str, str]:
    """{old key: new key} for the flat keys the `dynamic` section replaced (`curate_every`
    -> `dynamic.every`), for a config's `RENAMED` (`config.refuse_renamed` names the new key)."""
    return {f"{old_prefix}{name}": f"dynamic.{name}"
            for name in ("every", "fraction", "threshold", "readmit")}
