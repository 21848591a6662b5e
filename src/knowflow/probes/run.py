"""One probe run, by name (`knowflow.probe`, `knowflow probe <kind>`): its examples read, the
probe run over them, its summary, and (with an output folder) the run folder written.

The examples are read in two steps, so that bad input costs no model load: `probe_inputs`
reads what needs no tokenizer (a prompts file, a heads probe's conflict items) before the
model loads, `probe_examples` the rest after it (a built-in suite's prompts, rendered with the
model's tokenizer). The run folder (`run_probe`) gets config.json first, then records.jsonl,
figures, summary.json and report.html (`finish`); bad input found once it is made (a window
larger than the model) or Ctrl-C removes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from knowflow.config import config_to_dict
from knowflow.data.loaders import load_suites
from knowflow.data.prompts import resolve_format
from knowflow.data.quality import warn_duplicate_keys
from knowflow.data.suites import list_suites
from knowflow.errors import ConfigError
from knowflow.lens.arch import arch_of, check_fits
from knowflow.probes import ON_CONFLICT_ITEMS, PROBES
from knowflow.probes.examples import as_example, builtin_facts, load_examples
from knowflow.probes.head_attention import example_attention
from knowflow.probes.mass import mean_attention_mass
from knowflow.probes.suites import suite_examples
from knowflow.store.identity import RECORDS
from knowflow.store.result import Result
from knowflow.store.run_folder import Progress, RunFolder, start_run

HEADS_SUITE = "cf-capitals"  # the conflict items a heads probe reads by default


def _is_suite(data) -> bool:
    return isinstance(data, str) and all(n.strip() in list_suites() for n in data.split(","))


def probe_label(kind: str, data) -> str:
    """What config.json's `data` says of a probe's examples."""
    if kind in ON_CONFLICT_ITEMS:
        if data is None or _is_suite(data):
            return f"suite:{data or HEADS_SUITE}"
        return f"file:{data}" if isinstance(data, (str, Path)) else \
            f"{len(data)} items in memory"
    if data is None:
        return "builtin:known_facts"
    if _is_suite(data):
        return f"suite:{data}"
    return str(data) if isinstance(data, (str, Path)) else f"{len(data)} examples in memory"


def probe_inputs(kind: str, data, limit: int | None = None, seed: int = 0):
    """`data` with what needs no tokenizer read (before the model loads): a prompts file's
    examples, a heads probe's conflict items (suites, default cf-capitals, or a file); a
    built-in suite of prompts, None (the shipped facts) and examples in memory as given."""
    if kind in ON_CONFLICT_ITEMS:
        if data is not None and not isinstance(data, (str, Path)):
            return list(data)[:limit] if limit else list(data)
        suites = str(data or HEADS_SUITE) if data is None or _is_suite(data) else None
        files = None if suites is not None else data
        return [it for items in load_suites(suites, files, limit, seed).values()
                for it in items]
    if isinstance(data, (str, Path)) and not _is_suite(data):
        examples = load_examples(data)
        warn_duplicate_keys(Path(data))
        return examples
    return data


def probe_examples(kind: str, data, tokenizer, limit: int | None = None,
                   prompt_format: str = "plain") -> list:
    """A probe's examples from `probe_inputs`' `data`: a built-in suite's prompts rendered by
    `tokenizer` (with their contexts for the attention probe), the shipped facts for None."""
    if kind in ON_CONFLICT_ITEMS:
        return list(data)
    if _is_suite(data):
        return suite_examples(data, tokenizer, kind == "attention", prompt_format, limit=limit)
    examples = builtin_facts() if data is None else [as_example(e) for e in data]
    return examples[:limit] if limit else examples


def probe_summary(kind: str, records: list[dict], n_layers: int, cfg) -> dict:
    """The summary of one probe's records (each probe summarizes in its own terms)."""
    summarize = PROBES[kind][2]
    if kind == "attention":
        grid = mean_attention_mass(records)
        return {"mean_mass": grid, "layer_mean": [sum(row) / len(row) for row in grid],
                "n_examples": len(records)}
    if kind in ("knockout", "sublayer"):
        return summarize(records, n_layers)
    if kind == "project":
        return summarize(records)
    return summarize(records, cfg)


def check_probe_data(kind: str, data) -> None:
    """What a probe cannot run on: the attention probe without contexts (the shipped facts
    have none)."""
    if kind == "attention" and data is None:
        raise ConfigError("the attention probe needs examples with a context: give --data "
                          "(with a `context` field) or --suite", "data")


def run_probe(kind: str, model, tokenizer, examples: Sequence, cfg, model_name: str,
              data_label: str, out: str | Path | None = None,
              runs_dir: str | Path | None = None, progress: Progress | None = None,
              finish: Callable[[Result, RunFolder], None] | None = None) -> Result:
    """Probe, then (with `out` or `runs_dir`) write the run folder and `finish` it (see the
    module docstring)."""
    arch = arch_of(model)
    if "prompt_format" in type(cfg).__dataclass_fields__:  # auto: chat with a template
        cfg = dataclasses.replace(cfg, prompt_format=resolve_format(cfg.prompt_format,
                                                                    tokenizer))
    for ex in examples:  # before the run folder is made: a prompt past the window
        prompt = getattr(ex, "prompt", None)
        if isinstance(prompt, str):
            check_fits(model, len(tokenizer(prompt)["input_ids"]) + 1,
                       f"example {getattr(ex, 'id', '?')}", "the prompt with its next token")
    config = {"probe": kind, "model": model_name, "data": data_label,
              "n_examples": len(examples), "n_layers": arch.n_layers, "n_heads": arch.n_heads,
              "config": config_to_dict(cfg)}
    fn = PROBES[kind][0]
    command = f"probe-{kind}"

    def summarize(records: list[dict]) -> dict:
        summary = probe_summary(kind, records, arch.n_layers, cfg)
        if kind == "heads":  # where the ranked heads look, on one item (the report draws it)
            summary["example_attention"] = example_attention(model, tokenizer, examples,
                                                             summary, cfg.prompt_format)
        return summary

    if out is None and runs_dir is None:
        records = fn(model, tokenizer, list(examples), cfg, progress=progress)
        return Result(records, summarize(records), config, command)
    with start_run(config, command, runs_dir=runs_dir, out_dir=out) as run:  # staged
        records = fn(model, tokenizer, list(examples), cfg, progress=progress)
        result = Result(records, summarize(records), config, command)
        run.write_records(RECORDS, records)
        if finish is not None:
            finish(result, run)
    result.out_dir = run.path
    return result
