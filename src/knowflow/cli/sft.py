"""`knowflow sft`, `knowflow curate` and `knowflow augment`: finetuning with context-reliance
tracking, and the data mitigations of context-parametric inversion."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from rich.table import Table

from knowflow.cli.common import (
    Opt,
    check_run_dir,
    check_seed,
    check_threads,
    console,
    print_paths,
    set_threads,
)
from knowflow.cli.progress import Bars
from knowflow.errors import ConfigError, KnowflowError

MAX_RATIO = 100  # counterfactual copies per example: beyond, the same substitutions repeat


def _rows(data: str, seed: int):
    from knowflow.train.sft_job import BUILTIN, load_rows
    from knowflow.worlds.instructions import MixtureConfig
    from knowflow.worlds.quality import warn_duplicate_keys

    if data != BUILTIN:
        warn_duplicate_keys(Path(data))
    return load_rows(data, MixtureConfig(seed=seed))


def _check_out(data: str, out: Path, derived: tuple[tuple[str, str], ...] = ()) -> None:
    """--out, and the files named after it (`derived`: (what, suffix)), are new or
    replaceable files, none the input nor another's (checked before any work)."""
    from knowflow.errors import DataError
    from knowflow.outputs import check_out_files
    from knowflow.train.sft_job import BUILTIN

    if data != BUILTIN and not Path(data).is_file():
        raise DataError(data, "no such file" if not Path(data).exists() else "not a file",
                        hint="give a JSONL instruction file or 'builtin'")
    if data != BUILTIN and out.resolve() == Path(data).resolve():
        raise ConfigError(f"{out} is the input file", "--out",
                          "write to a new file; the input is read while the output is written")
    check_out_files({"output": out, **{what: out.with_suffix(suffix) for what, suffix in derived}},
                    inputs=[] if data == BUILTIN else [Path(data)])


def sft_cmd(
    model: Annotated[str | None, Opt(help="HF id, local folder, or smollm2-135m-instruct.")]
    = None,
    data: Annotated[str | None, Opt(help="Instruction file (JSONL: instruction/input/output or "
                                         "messages), or 'builtin' (the C/C+S/S mixture).")]
    = None,
    train: Annotated[str | None, Opt(help="full, lora or qk_only.")] = None,
    trainer: Annotated[str | None, Opt(help="hf (transformers.Trainer) or trl (trl.SFTTrainer, "
                                            "pip install '.[trl]').")] = None,
    lora_r: Annotated[int | None, Opt(help="LoRA rank.")] = None,
    lora_alpha: Annotated[int | None, Opt(help="LoRA alpha.")] = None,
    lora_targets: Annotated[str | None, Opt(help="LoRA target modules, comma-separated.")]
    = None,
    lr: Annotated[float | None, Opt(help="Learning rate.")] = None,
    steps: Annotated[int | None, Opt(help="Optimizer steps.")] = None,
    batch_size: Annotated[int | None, Opt(help="Examples per step.")] = None,
    max_length: Annotated[int | None, Opt(help="Longest example in tokens.")] = None,
    prompt_format: Annotated[str | None, Opt(help="chat, alpaca, tulu or plain.")] = None,
    seed: Annotated[int | None, Opt(help="Seed (data order, init, mixture).")] = None,
    track: Annotated[str | None, Opt(help="Suites to track, comma-separated.")] = None,
    track_every: Annotated[int | None, Opt(help="Evaluate every N steps.")] = None,
    track_limit: Annotated[int | None, Opt(help="Tracked items per suite.")] = None,
    no_track: Annotated[bool, Opt("--no-track", help="Do not track reliance.")] = False,
    keep_peak: Annotated[bool, Opt("--keep-peak", help="Save the model at the peak of "
                                                       "counterfactual accuracy.")] = False,
    stop_drop: Annotated[float | None, Opt(help="Stop when cf accuracy falls this far below "
                                                "its peak.")] = None,
    curate: Annotated[str | None, Opt(help="none, or dynamic: re-score every training row's "
                                           "no-context loss during finetuning and drop the "
                                           "lowest share.")] = None,
    curate_every: Annotated[int | None, Opt(help="With --curate dynamic: re-score every N "
                                                 "steps.")] = None,
    curate_fraction: Annotated[float | None, Opt(help="With --curate dynamic: share of rows "
                                                      "dropped at each re-scoring.")] = None,
    curate_threshold: Annotated[float | None, Opt(help="With --curate dynamic: drop only rows "
                                                       "whose no-context loss is below this "
                                                       "(answered from memory).")] = None,
    curate_keep_out: Annotated[bool, Opt("--curate-keep-out", help="With --curate dynamic: a "
                                         "dropped row is never re-admitted; each re-scoring "
                                         "drops the share of the rows still in.")] = False,
    set_: Annotated[list[str] | None, Opt("--set", help="Any other field: key=value "
                                                        "(see `knowflow config sft`).")] = None,
    runs_dir: Annotated[Path, Opt(help="Where run directories go.")] = Path("runs"),
    resume: Annotated[bool, Opt("--resume", help="Continue the newest unfinished sft run.")]
    = False,
    run_dir: Annotated[Path | None, Opt(help="With --resume: the run to continue.")] = None,
    device: Annotated[str | None, Opt(help="auto, cpu, cuda, mps.")] = None,
    dtype: Annotated[str | None, Opt(help="Weights: auto (float32; bf16 mixed precision on "
                                          "GPU), float32, bfloat16, float16.")] = None,
    threads: Annotated[int, Opt(help="torch CPU threads.")] = 1,
) -> None:
    """Finetune a causal LM with the HF Trainer while tracking context reliance."""
    from knowflow.experiments.runner import run_experiment

    given = {"model": model, "data": data, "device": device, "dtype": dtype,
             "sft.train": train,
             "sft.trainer": trainer,
             "sft.lora_r": lora_r, "sft.lora_alpha": lora_alpha, "sft.lora_targets":
             lora_targets, "sft.lr": lr, "sft.steps": steps, "sft.batch_size": batch_size,
             "sft.max_length": max_length, "sft.seed": seed, "mixture.seed": seed,
             "track.suites": track, "track.every": track_every, "track.limit": track_limit,
             "track.stop_drop": stop_drop, "curate.mode": curate,
             "curate.every": curate_every, "curate.fraction": curate_fraction,
             "curate.threshold": curate_threshold}
    if prompt_format is not None:
        given["sft.prompt_format"] = given["track.prompt_format"] = prompt_format
    overrides = [f"{k}={v}" for k, v in given.items() if v is not None]
    overrides += [f"{k}=true" for k, on in (("track.keep_peak", keep_peak),) if on]
    overrides += ["curate.readmit=false"] if curate_keep_out else []
    overrides += ["tracking=false"] if no_track else []
    overrides += list(set_ or [])
    check_threads(threads)
    check_run_dir(run_dir, resume)
    set_threads(threads)
    with Bars("finetuning") as progress:
        result = run_experiment("sft", overrides, runs_root=runs_dir,
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
    if "curation_rescorings" in s:
        console.print(f"dynamic curation: {s['curation_rescorings']} re-scorings "
                      f"({s['curation_seconds']:.0f} s), {s['curation_final_dropped']} rows "
                      f"dropped at the last, by kind {s.get('curation_final_dropped_by_kind')}"
                      f" -> {result.run_dir / 'curation.jsonl'}", highlight=False)
    print_paths(result.run_dir, result.report)


def curate_cmd(
    data: Annotated[str, Opt(help="Instruction file in Alpaca form, or 'builtin'.")],
    out: Annotated[Path, Opt(help="The filtered file to write (JSONL).")],
    model: Annotated[str, Opt(help="The model to be finetuned (scores the examples).")]
    = "smollm2-135m-instruct",
    drop: Annotated[float, Opt(help="Share of examples to drop.")] = 0.25,
    by: Annotated[str, Opt(help="no_context_loss (the paper's rule) or criticality.")]
    = "no_context_loss",
    prompt_format: Annotated[str, Opt(help="chat, alpaca, tulu or plain.")] = "chat",
    batch_size: Annotated[int, Opt(help="Examples per forward pass.")] = 8,
    seed: Annotated[int, Opt(help="Seed of the built-in mixture.")] = 0,
    device: Annotated[str, Opt(help="auto, cpu, cuda, mps.")] = "auto",
    dtype: Annotated[str, Opt(help="auto, float32, bfloat16, float16.")] = "auto",
    threads: Annotated[int, Opt(help="torch CPU threads.")] = 1,
) -> None:
    """Score each example's context-criticality with the model; drop the least critical."""
    from knowflow.api import curate
    from knowflow.config import validate_config
    from knowflow.curate.criticality import CurateConfig
    from knowflow.models.hf import check_device, check_model

    check_threads(threads)
    cfg = CurateConfig(drop=drop, by=by, prompt_format=prompt_format, batch_size=batch_size)
    validate_config(cfg)
    check_seed(seed)
    _check_out(data, out, (("scores", ".scores.jsonl"), ("histogram", ".png")))
    check_device(device)
    check_model(model)
    set_threads(threads)
    rows = _rows(data, seed)
    if any(r.messages for r in rows):
        raise KnowflowError(f"{data}: curation needs Alpaca-form rows (the context is "
                            "their 'input'); chat 'messages' rows have no separate context",
                            "convert them to instruction/input/output rows")
    with Bars("scoring") as progress:
        result = curate(model, rows, config=cfg, device=device, dtype=dtype, progress=progress)
    _, scores_path, figure = result.write(out)  # the same files as knowflow.curate(...).write
    kept, scores = result.kept, result.scores
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

    check_seed(seed)
    if not 0 < ratio <= MAX_RATIO:  # also refuses nan and inf
        raise ConfigError(f"must be a positive number up to {MAX_RATIO}, got {ratio}",
                          "--ratio", "e.g. 0.25 adds one counterfactual per four examples")
    _check_out(data, out)
    rows = _rows(data, seed)
    result = augment(rows, ratio=ratio, seed=seed)
    result.write(out)
    added = result.added
    console.print(f"{len(rows)} examples + {len(added)} counterfactual = {len(result)} -> {out}",
                  highlight=False)
    if added:
        ex = added[0]
        console.print(f"example: {ex.input!r} -> {ex.output!r} (was "
                      f"{ex.extra['original_answer']!r})", highlight=False)
