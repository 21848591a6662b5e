"""The page body of a finetuning run whose records are one reliance curve (`knowflow sft`,
`knowflow.finetune`): the tracker's verdict as its finding (inversion or not: rise, peak and
fall of counterfactual accuracy against the criterion, `report.tracker_run`), the reliance
figure (curves with 95% Wilson intervals, attention on the context, the training loss), then
the curve's numbers with their intervals and the loss, in the glossary's words."""

from __future__ import annotations

from pathlib import Path

from knowflow.report.names import label, with_interval
from knowflow.report.page import embedded_figure, run_figures, table
from knowflow.report.reliance import reliance_png
from knowflow.report.tracker_run import tracker_summary
from knowflow.store.staging import target_of

CAPTION = ("left to right: counterfactual accuracy (star: its peak), parametric accuracy, "
           "attention on the context, training loss; shaded: 95% Wilson score intervals over "
           "the items scored at each step")
SHOWN = {"findings", "cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
         "cf_acc_rise", "cf_acc_fall", "param_acc_start", "param_acc_final",
         "attn_context_start", "attn_context_final", "final_step", "n_evaluations",
         "cf_acc_peak_interval", "cf_acc_final_interval", "interval", "n_items"}  # in the table


def finding(records: list[dict]) -> str:
    """The tracker's one-sentence verdict on the curve."""
    return tracker_summary(records)["findings"]["verdict"]


def _loss(records: list[dict], summary: dict) -> tuple[object, object]:
    losses = [r["train_loss"] for r in records if r.get("train_loss") is not None]
    if losses:
        return losses[0], losses[-1]
    return summary.get("train_loss_start"), summary.get("train_loss", summary.get("loss"))


def sft_body(run_dir: Path, records: list[dict], summary: dict | None = None,
             name: str = "") -> str:
    """The figures and the curve table of one finetuning run, after its finding (`name`: the
    curve's legend, what the run ran on; default its folder's name)."""
    summary = summary or {}
    curve = tracker_summary(records)
    figures = run_figures(run_dir, {"reliance.png": CAPTION})
    if not any("reliance" in f for f in figures):
        figures.insert(0, embedded_figure(reliance_png({name or target_of(run_dir).name:
                                                        records}),
                                          "reliance curves", CAPTION))
    loss_start, loss_end = _loss(records, summary)
    rows = [
        ["counterfactual accuracy at the start", with_interval(curve["cf_acc_start"], None)],
        [f"counterfactual accuracy at the peak (step {curve['cf_acc_peak_step']})",
         with_interval(curve["cf_acc_peak"], curve["cf_acc_peak_interval"])],
        [f"counterfactual accuracy at the end (step {curve['final_step']})",
         with_interval(curve["cf_acc_final"], curve["cf_acc_final_interval"])],
        [label("cf_acc_rise"), with_interval(curve["cf_acc_rise"], None)],
        [label("cf_acc_fall"), with_interval(curve["cf_acc_fall"], None)],
        ["inversion criterion", curve["findings"]["criterion"]],
        ["inversion", "yes" if curve["findings"]["inversion"] else "no"],
        [label("param_acc_start"), with_interval(curve["param_acc_start"], None)],
        [label("param_acc_final"), with_interval(curve["param_acc_final"], None)],
        [label("attn_context_start"), with_interval(curve["attn_context_start"], None)],
        [label("attn_context_final"), with_interval(curve["attn_context_final"], None)],
        ["training loss, first logged (nats per token)", with_interval(loss_start, None)],
        ["training loss, last logged (nats per token)", with_interval(loss_end, None)],
        ["evaluations (items each)", f"{curve['n_evaluations']} ({curve['n_items'] or '–'})"],
    ]
    rows = [r for r in rows if r[1] != "–"]
    return ("\n".join(figures) + "<h3>Reliance curve</h3>"
            + table(["measure", "value (95% Wilson interval)"], rows, cls="kv",
                    numeric=[False, True]))
