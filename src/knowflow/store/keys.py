"""One spelling per quantity: the keys of earlier run folders under their current names.

Every summary, record and table names a quantity as docs/concepts.md's left column does
(`cf_acc`, `cf_acc_rise`, `cf_acc_fall`, `attn_context_*`, `indist`, ...). Folders written
before the names were unified spelt some of them otherwise (`counterfactual_accuracy`,
`rise`, `loglik_fall`, `mixed_fall`, `attn_ctx_final`, `in_dist`, `fall_mean`, ...);
`current(value, command)` renames those keys, once, where a run folder's results are read
(`store.run_folder.read_result`, `PartStore.load`, `Result.load`), so such folders still
load, report and resume. Names written today never match a rule, so mapping a current folder
changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

# anywhere in a key
_PARTS = (("counterfactual_accuracy", "cf_acc"), ("parametric_accuracy", "param_acc"))
_TOKENS = ((re.compile(r"(^|_)attn_ctx(?=_|$)"), r"\1attn_context"),
           (re.compile(r"(^|_)attn_subj(?=_|$)"), r"\1attn_subject"),
           (re.compile(r"(^|_)in_dist(?=_|$)"), r"\1indist"),
           (re.compile(r"^(L\d+)_ctx_(.*?)(_corr_cf)?$"), r"\1_attn_context_\2\3"),
           (re.compile(r"^(L\d+)_subj_(.*?)(_corr_cf)?$"), r"\1_attn_subject_\2\3"),
           (re.compile(r"_corr_cf$"), "_corr_cf_acc"))
_CURVE = r"(start|peak|peak_step|final|rise|fall)"
_CURVE_PARTS = {"start", "peak", "peak_step", "final", "rise", "fall"}
# whole keys, any command
_ANY = ((re.compile(rf"^loglik_{_CURVE}(_seeds)?$"), r"cf_acc_\1\2"),
        (re.compile(rf"^gen_{_CURVE}(_seeds)?$"), r"cf_acc_gen_\1\2"),
        (re.compile(r"^(\w+)_fall_minus_mixed$"), r"\1_cf_acc_fall_minus_mixed"))
# whole keys of the counterfactual-accuracy experiments (a bare rise or fall was cf_acc's)
_ARMS = r"(mixed|c_only|filtered|augmented|qk_only|lora|full|curated|dynamic)"
_CF_ACC = ((re.compile(r"^(rise|fall)(_seeds)?$"), r"cf_acc_\1\2"),
           (re.compile(r"^fall_ci95$"), "cf_acc_fall_ci95"),
           (re.compile(r"^fall_gen$"), "cf_acc_gen_fall"),
           (re.compile(r"^c_only_worst_fall$"), "c_only_worst_cf_acc_fall"),
           (re.compile(rf"^{_ARMS}_(rise|fall)$"), r"\1_cf_acc_\2"))
# cpi-toy's parts follow M_C
_MC = ((re.compile(r"^(inversion|c_only)_fall$"), r"\1_mc_fall"),)
# inversion-tiny-heads' steering: counterfactual accuracy on the held-out half
_STEERING = ((re.compile(r"^cf_(peak|final|steered)$"), r"cf_acc_\1"),)
_BY_COMMAND = {"inversion-tiny": _CF_ACC, "inversion-injected": _CF_ACC,
               "inversion-smollm2": _CF_ACC, "cpi-toy": _MC, "inversion-tiny-heads": _STEERING}
# a nested curve under its scoring's old name (inversion-injected's per-seed rows)
_NESTED = {"loglik": "cf_acc", "gen": "cf_acc_gen"}
# a phase-diagram cell: its curve's metric by the diagram it belongs to
_PHASE = {"tiny": "cf_acc", "toy": "mc"}


def current_key(key: str, command: str | None = None) -> str:
    """`key` under its current name (see the module docstring)."""
    for old, new in _PARTS:
        key = key.replace(old, new)
    for pattern, new in _TOKENS:
        key = pattern.sub(new, key)
    for pattern, new in (*_ANY, *_BY_COMMAND.get(command or "", ())):
        if pattern.match(key):
            return pattern.sub(new, key)
    return key


def current(value: Any, command: str | None = None) -> Any:
    """`value` (a summary, a record, a list of them) with every key under its current name."""
    if isinstance(value, list):
        return [current(v, command) for v in value]
    if not isinstance(value, dict) or set(value) <= _CURVE_PARTS:  # a curve's own parts
        return value
    if "fall_mean" in value and "cs_share" in value:  # a phase cell written before
        return _phase_cell(value, _PHASE["toy" if command == "cpi-toy" else "tiny"])
    out = {}
    for key, item in value.items():
        if key in _PHASE and isinstance(item, list) and item and \
                isinstance(item[0], dict) and "fall_mean" in item[0]:
            out[key] = [_phase_cell(row, _PHASE[key]) for row in item]
        elif key in _NESTED and isinstance(item, dict) and "fall" in item:
            out[_NESTED[key]] = item
        else:
            out[current_key(key, command)] = current(item, command)
    return out


def _phase_cell(row: dict, metric: str) -> dict:
    names = {"fall_mean": f"{metric}_fall", "rise_mean": f"{metric}_rise",
             "fall_seeds": f"{metric}_fall_seeds"}
    return {"metric": metric, **{names.get(k, k): v for k, v in row.items()}}
