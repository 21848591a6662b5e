"""`knowflow sft`, `knowflow curate` and `knowflow augment`: finetuning with context-reliance
tracking, and the data mitigations of context-parametric inversion."""

from __future__ import annotations

from rich.table import Table

from knowflow.cli.common import console, print_paths
from knowflow.cli.flags import command
from knowflow.cli.progress import Bars


def _sft_sections() -> dict[str, type]:
    from knowflow.lens.device import Threads
    from knowflow.store.run_folder import ResumeOptions
    from knowflow.train.sft_job import SFTJobConfig

    return {"cfg": SFTJobConfig, "resume": ResumeOptions, "threads": Threads}


@command(_sft_sections, job="cfg", job_if_given=True,
         sets="Any other field: key=value (see `knowflow config sft`).")
def sft_cmd(cfg, resume, threads) -> None:
    """Finetune a causal LM with the HF Trainer while tracking context reliance."""
    from knowflow.api import finetune
    from knowflow.store.identity import REPORT

    threads.apply()
    with Bars("finetuning") as progress:  # no option given: a resumed run's saved config
        result = finetune(config=cfg, runs_dir=resume.runs_dir, resume=resume.target,
                          progress=progress)
    _sft_table(result.summary)
    _sft_notes(result)
    print_paths(result.out_dir, result.out_dir / REPORT)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _sft_table(s: dict) -> None:
    table = Table("steps", "train_loss", "cf_acc_start", "cf_acc_peak (step)", "cf_acc_final",
                  "param_acc_final", "attn_context_start", "attn_context_final", "seconds")
    table.add_row(str(s["steps"]), _fmt(s["train_loss"]), _fmt(s.get("cf_acc_start")),
                  f"{_fmt(s.get('cf_acc_peak'))} ({s.get('cf_acc_peak_step', '-')})",
                  _fmt(s.get("cf_acc_final")), _fmt(s.get("param_acc_final")),
                  _fmt(s.get("attn_context_start")), _fmt(s.get("attn_context_final")),
                  f"{s['seconds']:.0f}")
    console.print(table)


def _sft_notes(result) -> None:
    """An early stop, the model's choices where none was given, dynamic curation."""
    s = result.summary
    if s.get("stopped_early"):
        console.print(s["stopped_early"]["reason"], highlight=False)
    if "prompt_format" in s:
        from knowflow.data.prompts import format_note

        asked = result.config.get("sft", {}).get("prompt_format", s["prompt_format"])
        targets = f"; LoRA targets: {', '.join(s['lora_targets'])}" if "lora_targets" in s \
            else ""
        console.print(format_note(asked, s["prompt_format"]) + targets, highlight=False)
    if "curation_rescorings" in s:
        console.print(f"dynamic curation: {s['curation_rescorings']} re-scorings "
                      f"({s['curation_seconds']:.0f} s), {s['curation_final_dropped']} rows "
                      f"dropped at the last, by kind {s.get('curation_final_dropped_by_kind')}"
                      f" -> {result.out_dir / 'curation.jsonl'}", highlight=False)


def _curate_sections() -> dict[str, type]:
    from knowflow.data.options import InstructionData
    from knowflow.lens.device import Threads
    from knowflow.lens.hub import ModelOptions
    from knowflow.store.run_folder import OutFile
    from knowflow.train.criticality import CurateConfig

    return {"data": InstructionData, "out": OutFile, "model": ModelOptions, "cfg": CurateConfig,
            "threads": Threads}


@command(_curate_sections, job="cfg")
def curate_cmd(data, out, model, cfg, threads) -> None:
    """Score each example's context-criticality with the model; drop the least critical."""
    from knowflow.api import curate

    threads.apply()
    with Bars("scoring") as progress:  # writes OUT, OUT.scores.jsonl and OUT.png
        result = curate(model.model, data.data, config=cfg, out=out.out, progress=progress,
                        **model.load_keywords)
    scores = result.records
    table = Table("kind", "examples", "dropped", "mean loss with ctx", "mean loss without",
                  "mean criticality")
    for kind in sorted({str(s["kind"]) for s in scores}):
        group = [s for s in scores if str(s["kind"]) == kind]

        def mean(k, g=group):
            return sum(s[k] for s in g) / len(g)

        table.add_row(kind if kind != "None" else "all", str(len(group)),
                      str(sum(s["dropped"] for s in group)), f"{mean('loss_with_context'):.3f}",
                      f"{mean('loss_without_context'):.3f}", f"{mean('criticality'):.3f}")
    console.print(table)
    console.print(f"kept {len(result.kept)} of {result.summary['n_rows']} -> {out.out}; "
                  f"scores: {out.out.with_suffix('.scores.jsonl')}; histogram: "
                  f"{out.out.with_suffix('.png')}", highlight=False)


def _augment_sections() -> dict[str, type]:
    from knowflow.data.options import InstructionData
    from knowflow.store.run_folder import OutFile
    from knowflow.train.augment import AugmentConfig

    return {"data": InstructionData, "out": OutFile, "cfg": AugmentConfig}


@command(_augment_sections, job="cfg")
def augment_cmd(data, out, cfg) -> None:
    """Add entity-substituted counterfactual examples (context and answer changed together)."""
    from knowflow.api import augment

    result = augment(data.data, config=cfg, out=out.out)
    added = [r for r in result.records if r.get("augmented")]
    console.print(f"{result.summary['n_rows']} examples + {len(added)} counterfactual = "
                  f"{len(result.records)} -> {out.out}", highlight=False)
    if added:
        ex = added[0]
        console.print(f"example: {ex['input']!r} -> {ex['output']!r} (was "
                      f"{ex['original_answer']!r})", highlight=False)
