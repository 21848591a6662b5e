"""Tracker folders: what `knowflow report` makes of a folder a `RelianceTracker` wrote.

A tracker attached to anyone's Trainer leaves `<out_dir>/metrics.jsonl` (one record per
evaluation) and nothing else: no config.json, no summary.json. This module reads such a folder
and checks every record (a damaged line, or a record without a usable `step` or `cf_acc`, is a
`DataError` naming the file, the line and the field), then summarizes the counterfactual
accuracy curve the way every experiment does (`schema.named_curve`: start, peak and its step,
final, rise, fall), with 95% Wilson score intervals at the peak and at the end over the `n`
items each evaluation scored (`schema.wilson_interval`), and judges it by the inversion
criterion the SmolLM2 experiment uses (`schema.THEORY`: a rise of at least 0.2 from the start
to the peak, then a fall of at least 0.15 to the end). The verdict is one sentence; a run that
`stop_drop` ended says so (`stopped_early`).
"""

from __future__ import annotations

from pathlib import Path

from knowflow.errors import DataError
from knowflow.evaluation.curves import THEORY, InversionCriterion, named_curve, wilson_interval
from knowflow.report.reliance import reliance_figure
from knowflow.store.identity import CONFIG, METRICS
from knowflow.store.readers import decode_json, read_text
from knowflow.store.schemas import TrackerRecord, check

INTERVAL = "95% Wilson score interval over the n items scored at that step"
HINT = "give the out_dir of a RelianceTracker, or a run folder runs/<experiment>/<timestamp>"


def is_tracker_folder(folder: str | Path) -> bool:
    """A folder with a tracker's `metrics.jsonl` and no run `config.json`."""
    folder = Path(folder)
    return not (folder / CONFIG).exists() and (folder / METRICS).is_file()


def read_tracker_records(folder: str | Path) -> list[dict]:
    """The checked records of a tracker folder, in step order."""
    folder = Path(folder)
    path = folder / METRICS
    if not folder.is_dir():
        raise DataError(folder, "no such folder" if not folder.exists() else
                        "a file, not a folder", hint=HINT)
    if not path.is_file():
        raise DataError(folder, f"not a knowflow run directory (no {CONFIG}) nor a "
                        f"RelianceTracker folder (no {METRICS})", hint=HINT)
    records: list[dict] = []
    for line, text in enumerate(read_text(path).splitlines(), start=1):
        if not text.strip():
            continue
        rec = decode_json(text, path, line=line, what="damaged JSON line", strict=False)
        check(TrackerRecord, rec, path, line=line)
        if records and rec["step"] <= records[-1]["step"]:
            raise DataError(path, f"step {rec['step']} after step {records[-1]['step']}: "
                            "the steps must increase", line=line, field="step")
        records.append(rec)
    if not records:
        raise DataError(path, "no records", hint="the tracker writes one per evaluation")
    return records


def _interval(rec: dict) -> list[float] | None:
    return wilson_interval(rec["cf_acc"], rec["n"]) if rec.get("n") else None


def tracker_summary(records: list[dict], criterion: InversionCriterion = THEORY) -> dict:
    """The curve's summary, its intervals and the verdict (`findings`)."""
    steps = [r["step"] for r in records]
    curve = named_curve("cf_acc", steps, [r["cf_acc"] for r in records])
    first, last = records[0], records[-1]
    peak = records[steps.index(curve["cf_acc_peak_step"])]
    peak_iv, final_iv = _interval(peak), _interval(last)
    stopped = next((r["stopped"] for r in records if isinstance(r.get("stopped"), dict)), None)
    inverts = criterion.inverts(curve["cf_acc_rise"], curve["cf_acc_fall"])
    apart = peak_iv[0] > final_iv[1] if peak_iv and final_iv else None
    summary = {**curve, "cf_acc_peak_interval": peak_iv, "cf_acc_final_interval": final_iv,
               "interval": INTERVAL if peak_iv else "none (the records give no n)",
               "param_acc_start": first.get("param_acc"),
               "param_acc_final": last.get("param_acc"),
               "attn_context_start": first.get("attn_context"),
               "attn_context_final": last.get("attn_context"),
               "final_step": last["step"], "n_evaluations": len(records),
               "n_items": last.get("n")}
    if stopped:
        summary["stopped_early"] = stopped
    summary["findings"] = {
        "verdict": verdict(curve, last["step"], inverts, apart, criterion, stopped),
        "inversion": inverts, "fall_beyond_interval": apart,
        "criterion": f"rise >= {criterion.rise} and fall >= {criterion.fall}"}
    return summary


def verdict(curve: dict, final_step: int, inverts: bool, apart: bool | None,
            criterion: InversionCriterion, stopped: dict | None = None) -> str:
    """One sentence: inversion or not, the curve's peak and fall, whether the fall exceeds
    the intervals, and the criterion."""
    c = curve
    shape = (f"counterfactual accuracy went from {c['cf_acc_start']:.2f} to its peak "
             f"{c['cf_acc_peak']:.2f} at step {c['cf_acc_peak_step']} (rise "
             f"{c['cf_acc_rise']:.2f}), then to {c['cf_acc_final']:.2f} at step {final_step} "
             f"(fall {c['cf_acc_fall']:.2f})")
    noise = ""
    if apart is not None and c["cf_acc_fall"] > 0:
        noise = ("; the peak's and the final 95% Wilson intervals do not overlap" if apart else
                 "; the peak's and the final 95% Wilson intervals overlap")
    stop = f"; {stopped['reason']}" if stopped and stopped.get("reason") else ""
    head = "inversion" if inverts else "no inversion"
    return (f"{head}: {shape}{noise}{stop} (criterion: rise >= {criterion.rise} and fall >= "
            f"{criterion.fall})")


def tracker_figure(folder: str | Path, records: list[dict] | None = None) -> Path:
    """`<folder>/figures/reliance.png`: the folder's curves (shaded: Wilson intervals)."""
    folder = Path(folder)
    records = read_tracker_records(folder) if records is None else records
    return reliance_figure({folder.name or str(folder): records},
                           folder / "figures" / "reliance.png")


def curve_records(folder: str | Path) -> list[dict] | None:
    """A folder's reliance records, for overlaying runs: a tracker folder's, or a run
    folder's `metrics.jsonl` when its records are one tracker curve (a `knowflow sft` run);
    None otherwise (an experiment's per-arm records, an eval, a probe)."""
    folder = Path(folder)
    if is_tracker_folder(folder):
        return read_tracker_records(folder)
    path = folder / METRICS
    if not path.is_file():
        return None
    try:
        records = read_tracker_records(folder) if (folder / CONFIG).exists() else None
    except DataError:
        return None
    return None if not records or any("arm" in r for r in records) else records
