"""`knowflow sft`, `knowflow curate` and `knowflow augment`: finetuning with context-reliance
tracking, and the data mitigations of context-parametric inversion."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from rich.table import Table

from knowflow.cli.common import (
    MAX_MEMORY_HELP,
    OFFLINE_HELP,
    REVISION_HELP,
    TRUST_REMOTE_CODE_HELP,
    OfflineOpt,
    Opt,
    RevisionOpt,
    ThreadsOpt,
    TrustRemoteCodeOpt,
    check_run_dir,
    check_seed,
    check_threads,
    config_flags,
    console,
    flag,
    model_source,
    print_paths,
    set_threads,
)
from knowflow.cli.progress import Bars
from knowflow.errors import ConfigError, KnowflowError

MAX_RATIO = 100  # counterfactual copies per example: beyond, the same substitutions repeat


def _rows(data: str, seed: int):
    from knowflow.data.instruction_rows import read_instruction_file
    from knowflow.data.instructions import MixtureConfig
    from knowflow.data.quality import warn_duplicate_keys
    from knowflow.train.sft_job import BUILTIN, load_rows

    if data != BUILTIN:  # one reading: load_rows gets the same file's rows
        warn_duplicate_keys(Path(data), read_instruction_file(data).duplicate_key_lines)
    return load_rows(data, MixtureConfig(seed=seed))


def _check_out(data: str, out: Path, derived: tuple[tuple[str, str], ...] = ()) -> None:
    """--out, and the files named after it (`derived`: (what, suffix)), are new or
    replaceable files, none the input nor another's (checked before any work)."""
    from knowflow.errors import DataError
    from knowflow.store.outputs import check_out_files
    from knowflow.train.sft_job import BUILTIN

    if data != BUILTIN and not Path(data).is_file():
        raise DataError(data, "no such file" if not Path(data).exists() else "not a file",
                        hint="give a JSONL instruction file or 'builtin'")
    if data != BUILTIN and out.resolve() == Path(data).resolve():
        raise ConfigError(f"{out} is the input file", "--out",
                          "write to a new file; the input is read while the output is written")
    check_out_files({"output": out, **{what: out.with_suffix(suffix) for what, suffix in derived}},
                    inputs=[] if data == BUILTIN else [Path(data)])


SFT_FLAGS = (  # each sets its config key(s) of `knowflow config sft`, declared once
    flag("model", "model", str, "HF id, local folder, or smollm2-135m-instruct."),
    flag("revision", "revision", str, REVISION_HELP),
    flag("trust_remote_code", "trust_remote_code", bool, TRUST_REMOTE_CODE_HELP, switch=True),
    flag("offline", "offline", bool, OFFLINE_HELP, switch=True),
    flag("data", "data", str, "Instruction file (JSONL: instruction/input/output or messages), "
                              "or 'builtin' (the C/C+S/S mixture)."),
    flag("train", "sft.train", str, "full, lora or qk_only."),
    flag("trainer", "sft.trainer", str, "hf (transformers.Trainer) or trl (trl.SFTTrainer, "
                                        "pip install '.[trl]')."),
    flag("lora_r", "sft.lora_r", int, "LoRA rank."),
    flag("lora_alpha", "sft.lora_alpha", int, "LoRA alpha."),
    flag("lora_targets", "sft.lora_targets", str, "LoRA target modules, comma-separated."),
    flag("lr", "sft.lr", float, "Learning rate."),
    flag("steps", "sft.steps", int, "Optimizer steps."),
    flag("batch_size", "sft.batch_size", int, "Examples per step."),
    flag("max_length", "sft.max_length", int, "Longest example in tokens."),
    flag("max_memory", "max_memory", float, MAX_MEMORY_HELP),
    flag("prompt_format", ("sft.prompt_format", "track.prompt_format"), str,
         "auto (chat with a chat template, else plain), chat, alpaca, tulu or plain."),
    flag("seed", ("sft.seed", "mixture.seed"), int, "Seed (data order, init, mixture)."),
    flag("track", "track.suites", str, "What to track, comma-separated: built-in suites and/or "
                                       "data files (any file eval --data reads)."),
    flag("track_fields", "track.fields", str, "The tracked files' columns: "
                                              "context=COL,question=COL,answer=COL,"
                                              "memory_answer=COL (as eval --fields)."),
    flag("track_preset", "track.preset", str, "The tracked files' published layout (as eval "
                                              "--preset: nq-swap, conflictqa, ...)."),
    flag("track_every", "track.every", int, "Evaluate every N steps."),
    flag("track_limit", "track.limit", int, "Tracked items per suite."),
    flag("no_track", "tracking", bool, "Do not track reliance.", switch=False),
    flag("keep_peak", "track.keep_peak", bool, "Save the model at the peak of counterfactual "
                                               "accuracy.", switch=True),
    flag("stop_drop", "track.stop_drop", float, "Stop when cf accuracy falls this far below "
                                                "its peak."),
    flag("report_to", "report_to", str, "The Trainer's loggers, comma-separated: tensorboard "
                                        "(event files in RUN/tensorboard), wandb, or none."),
    flag("curate", "curate.mode", str, "none, or dynamic: re-score every training row's "
                                       "no-context loss during finetuning and drop the lowest "
                                       "share."),
    flag("curate_every", "curate.every", int, "With --curate dynamic: re-score every N steps."),
    flag("curate_fraction", "curate.fraction", float, "With --curate dynamic: share of rows "
                                                      "dropped at each re-scoring."),
    flag("curate_threshold", "curate.threshold", float, "With --curate dynamic: drop only rows "
                                                        "whose no-context loss is below this "
                                                        "(answered from memory)."),
    flag("curate_keep_out", "curate.readmit", bool, "With --curate dynamic: a dropped row is "
                                                    "never re-admitted; each re-scoring drops "
                                                    "the share of the rows still in.",
         switch=False),
)
DEVICE_FLAGS = (
    flag("device", "device", str, "auto, cpu, cuda, mps."),
    flag("dtype", "dtype", str, "Weights: auto (float32; bf16 mixed precision on GPU), "
                                "float32, bfloat16, float16."),
)


@config_flags(*SFT_FLAGS, "set_", "runs_dir", "resume", "run_dir", *DEVICE_FLAGS, "threads")
def sft_cmd(
    given: dict,
    set_: Annotated[list[str] | None, Opt("--set", help="Any other field: key=value "
                                                        "(see `knowflow config sft`).")] = None,
    runs_dir: Annotated[Path, Opt(help="Where run directories go.")] = Path("runs"),
    resume: Annotated[bool, Opt("--resume", help="Continue the newest unfinished sft run.")]
    = False,
    run_dir: Annotated[Path | None, Opt(help="With --resume: the run to continue.")] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Finetune a causal LM with the HF Trainer while tracking context reliance."""
    from knowflow.experiments.runner import run_experiment
    from knowflow.store.identity import REPORT

    overrides = [f"{k}={v}" for k, v in given.items()] + list(set_ or [])
    check_threads(threads)
    check_run_dir(run_dir, resume)
    set_threads(threads)
    with Bars("finetuning") as progress:
        result = run_experiment("sft", overrides, runs_dir=runs_dir,
                                resume=(run_dir or True) if resume else False,
                                progress=progress)
    s = result.summary
    table = Table("steps", "train loss", "cf acc start", "cf acc peak (step)", "cf acc final",
                  "param acc final", "attn ctx start", "attn ctx final", "seconds")
    def fmt(v):
        return ("-" if v is None else f"{v:.3f}")
    table.add_row(str(s["steps"]), fmt(s["train_loss"]), fmt(s.get("cf_acc_start")),
                  f"{fmt(s.get('cf_acc_peak'))} ({s.get('cf_acc_peak_step', '-')})",
                  fmt(s.get("cf_acc_final")), fmt(s.get("param_acc_final")),
                  fmt(s.get("attn_context_start")), fmt(s.get("attn_context_final")),
                  f"{s['seconds']:.0f}")
    console.print(table)
    if s.get("stopped_early"):
        console.print(s["stopped_early"]["reason"], highlight=False)
    if "prompt_format" in s:  # the model's choices where none was given
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
    print_paths(result.out_dir, result.out_dir / REPORT)


CURATE_FLAGS = (  # CurateConfig's fields, one to one
    flag("drop", "drop", float, "Share of examples to drop.", 0.25),
    flag("by", "by", str, "no_context_loss (the paper's rule) or criticality.",
         "no_context_loss"),
    flag("prompt_format", "prompt_format", str, "auto (chat with a chat template, else plain), "
         "chat, alpaca, tulu or plain.", "auto"),
    flag("batch_size", "batch_size", int, "Examples per forward pass.", 8),
)


@config_flags("data", "out", "model", "revision", "trust_remote_code", "offline", *CURATE_FLAGS,
              "seed", "device", "dtype", "threads")
def curate_cmd(
    given: dict,
    data: Annotated[str, Opt(help="Instruction file in Alpaca form, or 'builtin'.")],
    out: Annotated[Path, Opt(help="The filtered file to write (JSONL).")],
    model: Annotated[str, Opt(help="The model to be finetuned (scores the examples).")]
    = "smollm2-135m-instruct",
    revision: RevisionOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    offline: OfflineOpt = False,
    seed: Annotated[int, Opt(help="Seed of the built-in mixture.")] = 0,
    device: Annotated[str, Opt(help="auto, cpu, cuda, mps.")] = "auto",
    dtype: Annotated[str, Opt(help="auto, float32, bfloat16, float16.")] = "auto",
    threads: ThreadsOpt = None,
) -> None:
    """Score each example's context-criticality with the model; drop the least critical."""
    from knowflow.api import curate
    from knowflow.config import resolve_config
    from knowflow.lens.load import check_device, check_model
    from knowflow.train.criticality import CurateConfig

    check_threads(threads)
    cfg = resolve_config(CurateConfig, CurateConfig(**given))
    check_seed(seed)
    _check_out(data, out, (("scores", ".scores.jsonl"), ("histogram", ".png")))
    check_device(device)
    check_model(model, model_source(revision, trust_remote_code, offline))
    set_threads(threads)
    rows = _rows(data, seed)
    if any(r.messages for r in rows):
        raise KnowflowError(f"{data}: curation needs Alpaca-form rows (the context is "
                            "their 'input'); chat 'messages' rows have no separate context",
                            "convert them to instruction/input/output rows")
    with Bars("scoring") as progress:
        result = curate(model, rows, config=cfg, device=device, dtype=dtype, progress=progress,
                        revision=revision, trust_remote_code=trust_remote_code,
                        offline=offline)
    _, scores_path, figure = result.write(out)  # the same files as knowflow.curate(...).write
    kept, scores = result.kept, result.records
    table = Table("kind", "examples", "dropped", "mean loss with ctx", "mean loss without",
                  "mean criticality")
    for kind in sorted({str(s["kind"]) for s in scores}):
        group = [s for s in scores if str(s["kind"]) == kind]
        def mean(k, g=group):
            return (sum(s[k] for s in g) / len(g))
        table.add_row(kind if kind != "None" else "all", str(len(group)),
                      str(sum(s["dropped"] for s in group)), f"{mean('loss_with_context'):.3f}",
                      f"{mean('loss_without_context'):.3f}", f"{mean('criticality'):.3f}")
    console.print(table)
    console.print(f"kept {len(kept)} of {len(rows)} -> {out}; scores: "
                  f"{scores_path}; histogram: {figure}", highlight=False)


def augment_cmd(
    data: Annotated[str, Opt(help="Instruction file in Alpaca form, or 'builtin'.")],
    out: Annotated[Path, Opt(help="The augmented file to write (JSONL).")],
    ratio: Annotated[float, Opt(help="Counterfactual examples added per original example.")]
    = 0.25,
    seed: Annotated[int, Opt(help="Seed.")] = 0,
) -> None:
    """Add entity-substituted counterfactual examples (context and answer changed together)."""
    from knowflow.api import augment
    from knowflow.store.files import atomic_write_jsonl

    check_seed(seed)
    if not 0 < ratio <= MAX_RATIO:  # also refuses nan and inf
        raise ConfigError(f"must be a positive number up to {MAX_RATIO}, got {ratio}",
                          "--ratio", "e.g. 0.25 adds one counterfactual per four examples")
    _check_out(data, out)
    rows = _rows(data, seed)
    result = augment(rows, ratio=ratio, seed=seed)
    atomic_write_jsonl(out, result.records)  # the rows, as the instruction file holds them
    added = [r for r in result.records if r.get("augmented")]
    console.print(f"{len(rows)} examples + {len(added)} counterfactual = "
                  f"{len(result.records)} -> {out}", highlight=False)
    if added:
        ex = added[0]
        console.print(f"example: {ex['input']!r} -> {ex['output']!r} (was "
                      f"{ex['original_answer']!r})", highlight=False)
