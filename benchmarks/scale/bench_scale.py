"""How each job's CPU cost and peak memory grow with model size and context length.

Random-weight models of real shapes (the configs of SmolLM2-135M, SmolLM2-360M, Qwen2.5-0.5B
and Llama-3.2-1B, written below; the vocabulary stays real-size; speed and memory do not depend
on the weights' values, so nothing is downloaded) and SmolLM2's tokenizer. Items are cf-capitals
conflict items whose context is padded with other items' statements to about N tokens.

Each cell (model, job, context) runs in a fresh subprocess, which builds the model, runs the job
once untimed on one item (warm-up), then times it: CPU seconds (process time, every thread) and
wall seconds per item (per step for sft), and the child's peak resident memory
(`resource.getrusage(RUSAGE_SELF).ru_maxrss` at its end; this includes Python, torch and the
model's float32 weights, printed beside it as `weights`). The parent prints one table per job,
fitted log-log exponents (seconds ~ params^a at a fixed context, ~ context^b at a fixed model)
and writes a log-log PNG. Never asserts on time; on a shared machine the figures are noisy:
`--rounds N` runs every cell N times, each round in the opposite order to the one before (a
job beside its peer, so the two alternate which goes first), and the tables give each cell's
median with its range and the median of the per-round knowflow / peer ratios.
With no flags (as `make bench` runs it): SmolLM2-135M's shape, eval-loglik and explain, contexts
256 and 1k; `--full`: the whole grid.

Jobs: eval-loglik (items), eval-generate (items, greedy, 8 new tokens), explain (ablation
attribution, 8 subsets + 4 held out, per item, one flat ablation stage at any length as
`explain` runs by default; explain-flat forces it), explain-hier (the same, attributing
documents first past 24 sentences, about 350 tokens here, as explain did by default until
2026-12-06: `--set hierarchy_above=24`), knockout (attention knockout sweep, per prompt: the
context then a well-known-fact prompt), heads (probe heads, zero ablation, per item), sft
(LoRA, steps of batch 1 at the context length, with the reliance tracker; trainer-sft: a
plain Trainer without it).
JOB+capped (e.g. `eval-loglik+capped`) runs JOB with glibc's malloc held as `--max-memory`
holds it and nothing else changed; its ratio to JOB is that setting's cost.

    .venv/bin/python benchmarks/scale/bench_scale.py --models smollm2-135m,smollm2-360m \\
        --jobs eval-loglik,knockout,sft --contexts 256,1024 --threads 2 --plot /tmp/scale.png

`--grid cpu-short` is the grid for an hour of a shared core (see short_grid); `--scorer-ab
1024,2048` times the log-likelihood scorer's long-prompt paths against each other.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

# Real shapes; `model_type` picks the transformers class. Vocabulary and tying as released.
CONFIGS: dict[str, dict] = {
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                         rms_norm_eps=1e-5, max_position_embeddings=8192),
    "smollm2-360m": dict(model_type="llama", hidden_size=960, intermediate_size=2560,
                         num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5,
                         vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                         rms_norm_eps=1e-5, max_position_embeddings=8192),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0,
                         rms_norm_eps=1e-6, max_position_embeddings=32768),
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=131072,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                       "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 8192}),
}
JOBS = ("forward", "eval-loglik", "eval-generate", "explain", "explain-flat", "explain-hier",
        "knockout", "heads", "sft")
# The peer each job is timed against, where one exists (same model object, same items):
# lm-eval's HFLM.loglikelihood on knowflow's exported prompts and continuations; ContextCite
# (12 ablations, batch 4, its own greedy 8-token answer) for explain's 8 + 4 held-out subsets;
# a plain transformers Trainer with the same peft LoRA, data and steps, without the tracker
# (trainer-sft), and the same with lm-eval scoring the tracker's items at the tracker's steps
# (trainer-sft-lmeval: what a user would do to follow reliance without knowflow).
PAIRS = (("eval-loglik", "lmeval-loglik"), ("explain", "contextcite"), ("sft", "trainer-sft"),
         ("sft", "trainer-sft-lmeval"))
PEERS = dict(PAIRS[:3])
ALL_JOBS = JOBS + tuple(dict.fromkeys(peer for _, peer in PAIRS))
# JOB+capped: the job with glibc's malloc held as `--max-memory` holds it (one arena, blocks
# from 1 MiB mapped alone: `lens.allocator.hold_to_budget`, set before the model is built),
# with nothing else changed, so that its ratio to JOB is what that setting costs
CAPPED = "+capped"
PAIRS += tuple((job + CAPPED, job) for job in JOBS if job != "forward")
ITEMS = {"forward": 3, "eval-loglik": 4, "eval-generate": 2, "explain": 1, "explain-flat": 1,
         "explain-hier": 1,
         "knockout": 1, "heads": 1, "sft": 10, "lmeval-loglik": 4, "contextcite": 1,
         "trainer-sft": 10, "trainer-sft-lmeval": 10}
UNIT = {"sft": "step", "trainer-sft": "step", "trainer-sft-lmeval": "step", "forward": "pass"}
TRACK_EVERY = 5  # the tracker's evaluations in an sft cell: at step 0, every 5 and the last


def base_job(job: str) -> str:
    """The job a cell runs: JOB for JOB+capped."""
    return job.removesuffix(CAPPED)


def build_model(name: str):
    """A random-weight model of `name`'s shape (float32, eval mode) and SmolLM2's tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from knowflow.lens.load import load_tokenizer

    spec = dict(CONFIGS[name])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    tok = load_tokenizer("smollm2-135m-instruct")
    config.bos_token_id, config.eos_token_id = tok.bos_token_id, tok.eos_token_id
    config.pad_token_id = tok.pad_token_id
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                             attn_implementation="sdpa")
    # Qwen's and Llama's vocabularies are larger than SmolLM2's tokenizer: zero the (tied)
    # embedding rows past it, so that their logits are 0 and greedy decoding (explain's and
    # ContextCite's answers) never picks a token the tokenizer cannot decode; shapes, and so
    # cost and memory, are unchanged
    with torch.no_grad():
        model.get_input_embeddings().weight[len(tok):] = 0
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok


def long_items(tok, n: int, tokens: int):
    """`n` cf-capitals items, each context padded (before the item's own statement) with
    other items' statements to about `tokens` tokens."""
    from knowflow.data.suites import get_suite

    pool = get_suite("cf-capitals")
    filler = [it.context for it in pool]
    out = []
    for i, it in enumerate(pool[:n]):
        parts, count, j = [], 0, i + 1
        while count < tokens - len(tok(it.context)["input_ids"]):
            s = filler[j % len(filler)]
            parts.append(s)
            count += len(tok(s)["input_ids"])
            j += 1
        out.append(replace(it, context=" ".join(parts + [it.context])))
    return out


def run_job(job: str, model, tok, items, context: int, n: int) -> dict:
    """Run `job` once on `n` items (or `n` sft steps, `n` forward passes); returns extra
    figures for the cell's row (sft: the CPU seconds of its evaluations)."""
    from knowflow.evaluation.run import evaluate

    if job == "forward":
        forward_passes(model, tok, items[0], n)
    elif job in ("eval-loglik", "eval-generate"):
        scoring = job.split("-")[1]
        evaluate(model, items[:n], tokenizer=tok, scoring=scoring, known_filter=False,
                 batch_size=4, max_new_tokens=8)
    elif job in ("explain", "explain-flat", "explain-hier"):
        from knowflow.explanation.run import explain

        # explain is flat at every length (the default since the hierarchy became opt-in);
        # explain-flat forces it, explain-hier attributes documents first past 24 sentences
        # (32 more ablations: hierarchy.py), as explain did before
        flat = {"explain-flat": {"hierarchy_above": None},
                "explain-hier": {"hierarchy_above": 24}}.get(job, {})
        explain(model, items[:n], tokenizer=tok, levels=("source", "sentences"),
                attribution="ablation", ablations=8, holdout=4, max_new_tokens=8, **flat)
    elif job == "knockout":
        from knowflow.probes.examples import builtin_facts
        from knowflow.probes.knockout import KnockoutConfig, knockout

        facts = builtin_facts()
        examples = []
        for it, ex in zip(items[:n], facts, strict=False):
            prefix = it.context + "\n"
            examples.append(replace(ex, prompt=prefix + ex.prompt, context=(0, len(prefix))))
        knockout(model, tok, examples, KnockoutConfig(known_only=False,
                                                      max_memory=probe_memory(model)))
    elif job == "heads":
        from knowflow.probes.heads import HeadsConfig, heads

        heads(model, tok, items[:n], HeadsConfig(ablations=("zero",), rank_by="zero",
                                                 n_bootstrap=10,
                                                 max_memory=probe_memory(model)))
    elif job in ("sft", "trainer-sft", "trainer-sft-lmeval"):
        return run_sft(job, model, tok, items, context, n)
    elif job == "lmeval-loglik":
        run_lmeval(model, tok, items[:n])
    elif job == "contextcite":
        run_contextcite(model, tok, items[:n])
    else:
        raise SystemExit(f"unknown job {job!r} (known: {', '.join(JOBS)})")
    return {}


def forward_passes(model, tok, item, n: int) -> None:
    """`n` plain forward passes of one item's prompt (its padded context and question) at
    batch 1, no KV cache kept, only the last position's logits: the floor every job's cost
    is built from (attention makes one pass itself superlinear in context)."""
    import torch

    ids = tok(f"{item.context}\n{item.question}", return_tensors="pt")["input_ids"]  # (1, seq)
    with torch.no_grad():
        for _ in range(n):
            model(input_ids=ids, use_cache=False, logits_to_keep=1)

# The probes copy the prompt's KV cache once per variant row (128 knockout, 64 heads rows by
# default): at 1k tokens on 135M that peaked at 5.2 GiB. `--max-memory` (weights + this much)
# sizes their rows down, which changes no result; this machine has 23 GiB for everyone.
PROBE_ROWS_GIB = 1.5


def probe_memory(model) -> float:
    """The probes' --max-memory in GiB: the float32 weights plus PROBE_ROWS_GIB."""
    return sum(p.numel() for p in model.parameters()) * 4 / 2**30 + PROBE_ROWS_GIB


def sft_rows(tok, items, context: int):
    from knowflow.data.facts import Instruction
    from knowflow.data.instruction_rows import encode_all

    rows = [Instruction(instruction=it.question, input=it.context,
                        output=it.counterfactual_answer) for it in items]
    return encode_all(tok, rows, "chat", context + 128)[0]


def run_sft(job: str, model, tok, items, context: int, n: int) -> dict:
    """`n` LoRA steps of batch 1 at the context length: knowflow's train_model with the
    reliance tracker (every TRACK_EVERY steps, and at 0 and the end, on 2 of the long items),
    or a plain transformers Trainer with the same LoRA (knowflow's per-family targets),
    learning rate and data: without evaluations (trainer-sft) or with lm-eval scoring the
    same 2 items' two answers at the same steps (trainer-sft-lmeval). Returns the
    evaluations' CPU seconds (all of them, `eval_cpu_s`) and count (`n_evals`)."""
    from knowflow.train.sft import SFTConfig, train_model

    data = sft_rows(tok, items, context)
    cfg = SFTConfig(steps=n, batch_size=1, save_every=10_000, max_length=context + 128)
    evals = {"eval_cpu_s": 0.0, "n_evals": 0}

    def timed(evaluate):
        def run(model):
            cpu = time.process_time()
            try:
                return evaluate(model)
            finally:
                evals["eval_cpu_s"] += time.process_time() - cpu
                evals["n_evals"] += 1
        return run

    with tempfile.TemporaryDirectory() as tmp:
        if job == "sft":
            from knowflow.train.tracker import RelianceTracker, TrackerConfig

            tracker = RelianceTracker(tok, TrackerConfig(every=TRACK_EVERY, batch_size=2,
                                                         dtype="float32"),
                                      tmp, items={"scale": items[:2]})
            tracker.evaluator = timed(tracker.evaluator)
            train_model(model, tok, data, cfg, Path(tmp), [tracker])
            return evals
        from peft import LoraConfig, get_peft_model
        from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

        from knowflow.lens.adapt import lora_targets

        lora = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                                target_modules=list(lora_targets(model)),
                                                lora_dropout=0.0, task_type="CAUSAL_LM"))
        args = TrainingArguments(output_dir=tmp, max_steps=n, per_device_train_batch_size=1,
                                 learning_rate=cfg.lr, lr_scheduler_type="constant",
                                 save_strategy="no", report_to=[], use_cpu=True,
                                 logging_strategy="no", disable_tqdm=True)
        callbacks = []
        if job == "trainer-sft-lmeval":
            from knowflow.train.callback import EvalCallback

            score = timed(lambda m: run_lmeval(m, tok, items[:2], batch_size=2) or {})
            callbacks.append(EvalCallback(score, TRACK_EVERY))
        Trainer(model=lora, args=args, train_dataset=list(data), callbacks=callbacks,
                data_collator=DataCollatorForSeq2Seq(tok, padding=True,
                                                     label_pad_token_id=-100)).train()
    return evals


def run_lmeval(model, tok, items, batch_size: int = 4) -> None:
    """lm-eval's HF wrapper scoring knowflow's two continuations after knowflow's chat prompt
    (`knowflow export lm-eval`'s documents), batch 4 as knowflow's side."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from knowflow.evaluation.lm_eval_task import task_docs

    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size)
    requests = [Instance(request_type="loglikelihood", doc=doc, arguments=(doc["prompt"], c),
                         idx=k) for doc in task_docs(items, tok, "chat")
                for k, c in enumerate(doc["choices"])]
    lm.loglikelihood(requests, disable_tqdm=True)


def run_contextcite(model, tok, items) -> None:
    """ContextCite on each item: its own greedy 8-token answer, then 12 ablations (as many
    forward passes as knowflow's 8 subsets + 4 held out), batch 4, attributions fitted."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
    from bench_explain import _contextcite  # ContextCite with knowflow's offline splitter
    from knowflow.data.prompts import PromptConfig, qa_instruction

    citer, partitioner = _contextcite()
    for it in items:
        side, tok.padding_side = tok.padding_side, "left"
        try:
            cc = citer(model, tok, it.context, qa_instruction(it, PromptConfig()),
                       partitioner=partitioner(it.context), num_ablations=12, batch_size=4,
                       generate_kwargs={"max_new_tokens": 8, "min_new_tokens": 8,
                                        "do_sample": False})
            cc.get_attributions(verbose=False)
        finally:
            tok.padding_side = side


def cell(name: str, job: str, context: int, threads: int, items: int | None = None) -> dict:
    """One measurement in this (fresh) process; returns its figures."""
    import torch

    torch.set_num_threads(threads)
    base = base_job(job)
    if base != job:
        from knowflow.lens.allocator import hold_to_budget

        hold_to_budget()
    model, tok = build_model(name)
    built_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    params = sum(p.numel() for p in model.parameters())
    n = items or ITEMS[base]
    items = long_items(tok, max(n, 2), context)
    prompt_tokens = len(tok(items[0].context)["input_ids"])
    if "sft" not in base:  # warm-up on an unpadded item; sft wraps its model in LoRA, so
        # it has none (a second copy would count in peak memory): its n steps amortize step 1
        run_job(base, model, tok, long_items(tok, 2, 0), context, 1)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    extra = run_job(base, model, tok, items, context, n)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return dict(**extra, model=name, job=job, context=context, params=params, n=n,
                context_tokens=prompt_tokens, cpu_s=cpu / n, wall_s=wall / n,
                peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                built_mib=built_mib, weights_mib=params * 4 / 2**20, threads=threads)


def scorer_ab(contexts: list[int], threads: int) -> None:
    """The log-likelihood scorer's two paths for long prompts on SmolLM2-135M's shape, one
    after the other on the same 2 items per context: tree rows with a dense 4D mask (every
    prompt's path before long prompts ran alone: `LONG_PROMPT` set past every prompt) and
    alone in chunks of 512 and 256 tokens; CPU s per item and the largest log-prob difference
    from the tree path."""
    import torch

    from knowflow.lens import scorer

    torch.set_num_threads(threads)
    model, tok = build_model("smollm2-135m")
    warm = long_items(tok, 1, 0)[0]
    scorer.score_continuations(model, tok, [tok(warm.context)["input_ids"]], [[" a", " b"]])
    paths = {"tree rows (dense mask)": (10**9, 512), "alone, chunks of 512": (512, 512),
             "alone, chunks of 256": (512, 256)}
    for ctx in contexts:
        items = long_items(tok, 2, ctx)
        prompts = [tok(f"Context: {it.context}\nQ: {it.question}\nA:")["input_ids"]
                   for it in items]
        conts = [[" " + it.counterfactual_answer, " " + it.parametric_answer] for it in items]
        ref = None
        for name, (long, chunk) in paths.items():
            scorer.LONG_PROMPT, scorer.PREFILL_CHUNK = long, chunk
            t = time.process_time()
            got = scorer.score_continuations(model, tok, prompts, conts, batch_size=4)
            cpu = (time.process_time() - t) / len(items)
            flat = [lp for row in got for lp, _ in row]
            ref = ref or flat
            diff = max(abs(a - b) for a, b in zip(flat, ref, strict=True))
            print(f"{len(prompts[0])} tokens, {name}: {cpu:.2f} cpu s/item, "
                  f"max |log-prob - tree rows'| {diff:.1e}", flush=True)


def medians(rows: list[dict]) -> list[dict]:
    """One row per cell (model, job, context, items): the median over its rounds of CPU s,
    wall s and peak RSS, with `rounds` and the CPU seconds' range (`cpu_lo`, `cpu_hi`); a
    row without a `round` (an older run) is its cell's one round."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["model"], r["job"], r["context"], r["n"]), []).append(r)
    out = []
    for runs in cells.values():
        row = dict(runs[0])
        for key in ("cpu_s", "wall_s", "peak_mib", "built_mib", "eval_cpu_s"):
            if key in row:
                row[key] = statistics.median(r[key] for r in runs)
        cpus = [r["cpu_s"] for r in runs]
        row.update(rounds=len(runs), cpu_lo=min(cpus), cpu_hi=max(cpus))
        row.pop("round", None)
        out.append(row)
    return out


def round_ratios(rows: list[dict]) -> dict[tuple, list[float]]:
    """Per cell and peer: knowflow / peer CPU seconds in each round both ran."""
    out: dict[tuple, list[float]] = {}
    for r in rows:
        for job, peer_job in PAIRS:
            peer = next((p for p in rows if r["job"] == job and p["job"] == peer_job
                         and p["model"] == r["model"] and p["context"] == r["context"]
                         and p["n"] == r["n"] and p.get("round", 0) == r.get("round", 0)),
                        None)
            if peer is not None:
                key = (r["model"], job, peer_job, r["context"], r["n"])
                out.setdefault(key, []).append(r["cpu_s"] / peer["cpu_s"])
    return out


def fit_exponent(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y on log x (None under two distinct points)."""
    if len(set(xs)) < 2:
        return None
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    cov = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
    return cov / sum((a - mx) ** 2 for a in lx)


def _one_n(rows: list[dict]) -> list[dict]:
    """Per (model, job, context) the row with the job's default item count (else the first):
    the size and context axes compare like with like."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["job"], r["context"])
        if key not in out or r["n"] == ITEMS.get(r["job"]):
            out[key] = r
    return list(out.values())


def exponents(rows: list[dict]) -> list[str]:
    """Fitted log-log slopes: per job, CPU s and peak RSS against parameters (at each
    context), against context tokens (per model), and total CPU s against items."""
    lines = []
    for job in dict.fromkeys(r["job"] for r in rows):
        sub = [r for r in rows if r["job"] == job]
        one = _one_n(sub)
        for ctx in sorted({r["context"] for r in one}):
            at = [r for r in one if r["context"] == ctx]
            a = fit_exponent([r["params"] for r in at], [r["cpu_s"] for r in at])
            m = fit_exponent([r["params"] for r in at], [r["peak_mib"] for r in at])
            if a is not None:
                lines.append(f"{job}: context {ctx}, {len(at)} sizes: cpu s ~ params^{a:.2f}; "
                             f"peak RSS ~ params^{m:.2f}")
        for name in dict.fromkeys(r["model"] for r in one):
            at = [r for r in one if r["model"] == name]
            b = fit_exponent([r["context_tokens"] for r in at], [r["cpu_s"] for r in at])
            m = fit_exponent([r["context_tokens"] for r in at], [r["peak_mib"] for r in at])
            extra = fit_exponent([r["context_tokens"] for r in at],
                                 [max(1.0, r["peak_mib"] - r["built_mib"]) for r in at])
            if b is not None:
                lines.append(f"{job}: {name}, {len(at)} contexts: cpu s ~ context^{b:.2f}; "
                             f"peak RSS ~ context^{m:.2f} (above the built model: "
                             f"^{extra:.2f})")
        for name, ctx in dict.fromkeys((r["model"], r["context"]) for r in sub):
            at = [r for r in sub if r["model"] == name and r["context"] == ctx]
            c = fit_exponent([r["n"] for r in at], [r["cpu_s"] * r["n"] for r in at])
            if c is not None:
                lines.append(f"{job}: {name} @{ctx}, {len(at)} item counts: total cpu s ~ "
                             f"items^{c:.2f}")
    return lines


def ratios(rows: list[dict], by_round: dict[tuple, list[float]] | None = None) -> list[str]:
    """knowflow / peer CPU and wall seconds per item, cell by cell (same model, context and
    item count: the medians over rounds), and where both ran in several rounds, the median
    of the per-round CPU ratios with their range; under 1: knowflow is faster."""
    lines = []
    for r, peer_job in [(r, peer) for r in rows for job, peer in PAIRS if r["job"] == job]:
        peer = next((p for p in rows if p["job"] == peer_job and p["model"] == r["model"]
                     and p["context"] == r["context"] and p["n"] == r["n"]), None)
        if peer is not None:
            lines.append(f"{r['job']} / {peer_job}: {r['model']} @{r['context']} n={r['n']}: "
                         f"cpu {r['cpu_s'] / peer['cpu_s']:.2f}, wall "
                         f"{r['wall_s'] / peer['wall_s']:.2f}, peak RSS "
                         f"{r['peak_mib'] / peer['peak_mib']:.2f}")
            paired = (by_round or {}).get((r["model"], r["job"], peer_job, r["context"],
                                           r["n"]), [])
            if len(paired) > 1:
                lines[-1] += (f"; per round (alternating) cpu median "
                              f"{statistics.median(paired):.2f} over {len(paired)} rounds "
                              f"({min(paired):.2f}-{max(paired):.2f})")
    return lines


def report(rows: list[dict]) -> None:
    """The tables (medians over each cell's rounds), exponents and ratios."""
    by_round = round_ratios(rows)
    rows = medians(rows)
    for job in dict.fromkeys(r["job"] for r in rows):
        sub = [r for r in rows if r["job"] == job]
        unit = UNIT.get(base_job(job), "item")
        print(f"\n== {job} (per {unit})")
        print(f"{'model':14s} {'params':>7s} {'context':>8s} {'tokens':>7s} {'n':>3s} "
              f"{'rounds':>6s} {'cpu s':>8s} {'cpu range':>13s} {'wall s':>8s} "
              f"{'peak MiB':>9s} {'built':>6s} {'weights':>8s}")
        for r in sub:
            spread = f"{r['cpu_lo']:.2f}-{r['cpu_hi']:.2f}"
            print(f"{r['model']:14s} {r['params'] / 1e6:6.0f}M {r['context']:8d} "
                  f"{r['context_tokens']:7d} {r['n']:3d} {r['rounds']:6d} {r['cpu_s']:8.2f} "
                  f"{spread:>13s} {r['wall_s']:8.2f} "
                  f"{r['peak_mib']:9.0f} {r['built_mib']:6.0f} {r['weights_mib']:8.0f}")
    print("\n== exponents (log-log least squares)")
    for line in exponents(rows):
        print("  " + line)
    print("\n== knowflow / peer")
    for line in ratios(rows, by_round):
        print("  " + line)
    timed = [r for r in rows if r.get("n_evals")]
    if timed:
        print("\n== evaluations inside the sft cells (medians over rounds)")
    for r in timed:
        total = r["cpu_s"] * r["n"]
        print(f"  {r['job']}: {r['model']} @{r['context']} n={r['n']}: {r['n_evals']} "
              f"evaluations, {r['eval_cpu_s'] / r['n_evals']:.2f} CPU s each, "
              f"{r['eval_cpu_s']:.1f} of {total:.1f} CPU s ({r['eval_cpu_s'] / total:.0%}); "
              f"the steps alone {(total - r['eval_cpu_s']) / r['n']:.2f} CPU s per step")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _one_n(medians(rows))
    jobs = list(dict.fromkeys(r["job"] for r in rows))
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    for job in jobs:
        style = "s--" if job in dict(PAIRS).values() or job.startswith("trainer") else "o-"
        for ctx in sorted({r["context"] for r in rows}):
            at = sorted((r for r in rows if r["job"] == job and r["context"] == ctx),
                        key=lambda r: r["params"])
            if len(at) > 1:
                x = [r["params"] for r in at]
                axes[0][0].plot(x, [r["cpu_s"] for r in at], style, label=f"{job} @{ctx}")
                axes[1][0].plot(x, [r["peak_mib"] for r in at], style, label=f"{job} @{ctx}")
        for name in dict.fromkeys(r["model"] for r in rows):
            at = sorted((r for r in rows if r["job"] == job and r["model"] == name),
                        key=lambda r: r["context_tokens"])
            if len(at) > 1:
                x = [r["context_tokens"] for r in at]
                axes[0][1].plot(x, [r["cpu_s"] for r in at], style, label=f"{job} {name}")
                axes[1][1].plot(x, [r["peak_mib"] for r in at], style, label=f"{job} {name}")
    titles = [["CPU s per item (sft: per step) vs parameters", "CPU s per item vs context tokens"],
              ["peak RSS (MiB) vs parameters", "peak RSS (MiB) vs context tokens"]]
    for i in range(2):
        for j in range(2):
            ax = axes[i][j]
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(titles[i][j], fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=6)
    fig.suptitle("knowflow jobs (solid) and peers (dashed): random-weight real-shape models, "
                 "1 CPU thread", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# The grid `--grid cpu` runs on a 2-core CPU in about an hour; it splits into two halves
# (`cpu-size`, `cpu-context`) to run side by side, one model of 1B shape in memory at a time.
# cpu-size: the four shapes at 256 tokens, each job beside its peer, then knockout, heads and
# generation. cpu-context: SmolLM2-135M's shape at 1k and 2k tokens, then 256 for the jobs
# without a peer, then the item-count axis. sft: 3 steps where a step costs a minute (the peer
# gets as many); per-step figures compare like with like.
SIZES = tuple(CONFIGS)
CORE = ("eval-loglik", "lmeval-loglik", "sft", "trainer-sft", "explain", "contextcite")
PROBES = ("knockout", "heads", "eval-generate")


def cpu_grid(part: str) -> list[tuple[str, str, int, int]]:
    if part == "cpu-short":
        return short_grid()
    cells = []
    if part in ("cpu", "cpu-size"):
        steps = {"smollm2-135m": 10, "smollm2-360m": 10, "qwen2.5-0.5b": 3, "llama-3.2-1b": 3}
        cells += [(name, job, 256, steps[name] if "sft" in job else ITEMS[job])
                  for name in SIZES for job in CORE]
        cells += [(name, job, 256, ITEMS[job]) for name in SIZES for job in PROBES]
    if part in ("cpu", "cpu-context"):
        # sft last: at 1k tokens a step costs minutes here
        jobs = [j for j in CORE + PROBES if "sft" not in j]
        cells += [("smollm2-135m", job, ctx, min(ITEMS[job], 2)) for ctx in (1024, 2048)
                  for job in jobs]
        for job, counts in (("eval-loglik", (1, 16)), ("lmeval-loglik", (1, 16)),
                            ("explain", (3,)), ("contextcite", (3,))):
            cells += [("smollm2-135m", job, 256, n) for n in counts]
        cells += [("smollm2-135m", job, ctx, 3) for ctx in (1024, 2048)
                  for job in ("sft", "trainer-sft")]
    return cells


def short_grid() -> list[tuple[str, str, int, int]]:
    """`--grid cpu-short`: the cells an hour of a shared core can hold, most wanted first:
    eval log-likelihood and lm-eval along the context axis at 135M and at 0.5B (the size
    with no cell yet); generation, knockout, heads and explain at 135M along the context axis;
    the item-count axis (8, 32, 128 items at 256 tokens); generation, knockout and heads at
    the other sizes at 256 tokens; explain and ContextCite at 360M."""
    small = "smollm2-135m"
    cells = [(small, job, ctx, 4 if ctx == 256 else 2) for ctx in (256, 1024, 2048)
             for job in ("eval-loglik", "lmeval-loglik")]
    cells += [("qwen2.5-0.5b", job, 256, 4) for job in ("eval-loglik", "lmeval-loglik")]
    cells += [(small, job, ctx, ITEMS[job]) for ctx in (256, 1024, 2048)
              for job in ("eval-generate", "knockout", "heads", "explain")]
    cells += [(small, "eval-loglik", 256, n) for n in (8, 32)]
    cells += [(name, job, 256, ITEMS[job]) for name in SIZES[1:]
              for job in ("eval-generate", "knockout", "heads")]
    cells += [("smollm2-360m", job, 256, 1) for job in ("explain", "contextcite")]
    cells += [(small, "eval-loglik", 256, 128)]
    return cells


def run_cell(cell_spec: tuple[str, str, int, int], threads: int, timeout: int) -> dict | str:
    name, job, ctx, n = cell_spec
    cmd = [sys.executable, __file__, "--cell", f"{name},{job},{ctx}", "--threads", str(threads),
           "--items", str(n)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"over the {timeout} s cap, skipped"
    if done.returncode != 0:
        return "failed: " + " | ".join(done.stderr.strip().splitlines()[-3:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2-135m",
                    help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--jobs", default="eval-loglik,explain", help=f"of {', '.join(ALL_JOBS)}")
    ap.add_argument("--contexts", default="256,1024", help="context tokens")
    ap.add_argument("--full", action="store_true",
                    help="every model, job, peer and context 256,1024,2048 (hours on a CPU)")
    ap.add_argument("--grid", choices=["cpu", "cpu-size", "cpu-context", "cpu-short"],
                    help="a named grid (see cpu_grid)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="cells run at once (each its own "
                    "process and --threads)")
    ap.add_argument("--plot", type=Path, help="write the log-log PNG here")
    ap.add_argument("--rows", type=Path, help="append each cell's row here (JSON lines) as it "
                    "completes; cells already there are not rerun")
    ap.add_argument("--report", action="store_true", help="only print the tables of --rows")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    ap.add_argument("--rounds", type=int, default=1, help="runs of every cell, alternating "
                    "order (a job beside its peer); the tables give each cell's median")
    ap.add_argument("--stop-at", help="HH:MM (UTC): start no cell after this time")
    ap.add_argument("--items", type=int, help="items (sft: steps) per cell, instead of "
                                               f"each job's default {ITEMS}")
    ap.add_argument("--scorer-ab", help="contexts (e.g. 1024,2048): time the scorer's "
                    "dense-tree and chunked paths for long prompts (see scorer_ab) and exit")
    ap.add_argument("--cell", help=argparse.SUPPRESS)  # model,job,context: run one cell here
    args = ap.parse_args()
    if args.scorer_ab:
        scorer_ab([int(c) for c in args.scorer_ab.split(",")], args.threads)
        return
    if args.cell:
        name, job, ctx = args.cell.split(",")
        print(json.dumps(cell(name, job, int(ctx), args.threads, args.items)))
        return
    done_rows = [json.loads(line) for line in args.rows.read_text().splitlines()
                 if line.strip()] if args.rows and args.rows.exists() else []
    if args.report:
        report(done_rows)
        if args.plot and done_rows:
            plot(done_rows, args.plot)
        return
    if args.grid:
        cells = cpu_grid(args.grid)
    else:
        if args.full:
            args.models, args.jobs = ",".join(CONFIGS), ",".join(ALL_JOBS)
            args.contexts = "256,1024,2048"
        models = [m.strip() for m in args.models.split(",")]
        jobs = [j.strip() for j in args.jobs.split(",")]
        for bad in [m for m in models if m not in CONFIGS] + [
                j for j in jobs if base_job(j) not in ALL_JOBS]:
            raise SystemExit(f"unknown model or job {bad!r}")
        # a job and its peer side by side, so that rounds alternate them
        cells = [(name, job, int(ctx), args.items or ITEMS[base_job(job)])
                 for name in models
                 for ctx in args.contexts.split(",") for job in jobs]
    # round r runs every cell; odd rounds in reverse order, so a job and its peer alternate
    # which goes first (ABBA) and a drift of the machine's load falls on both
    planned = [(spec, r) for r in range(args.rounds)
               for spec in (cells if r % 2 == 0 else cells[::-1])]
    have = {(r["model"], r["job"], r["context"], r["n"], r.get("round", 0)) for r in done_rows}
    todo = [(spec, r) for spec, r in planned if (*spec, r) not in have]
    rows = list(done_rows)
    print(f"{len(cells)} cells x {args.rounds} rounds, {len(planned) - len(todo)} already in "
          f"{args.rows}", flush=True)

    def one(planned_cell):
        spec, r = planned_cell
        if args.stop_at and time.strftime("%H:%M", time.gmtime()) >= args.stop_at:
            return spec, r, f"not started (past --stop-at {args.stop_at})"
        return spec, r, run_cell(spec, args.threads, args.timeout)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(args.workers) as pool:
        for (name, job, ctx, n), r, row in pool.map(one, todo):
            if isinstance(row, str):
                print(f"{name} {job} @{ctx} n={n} round {r}: {row}", flush=True)
                continue
            row["round"] = r
            rows.append(row)
            if args.rows:
                with args.rows.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
            print(f"{name} {job} @{ctx} n={n} round {r}: {row['cpu_s']:.2f} cpu s, "
                  f"{row['wall_s']:.2f} "
                  f"wall s per {UNIT.get(base_job(job), 'item')}, "
                  f"peak {row['peak_mib']:.0f} MiB "
                  f"({time.strftime('%H:%M:%S', time.gmtime())})", flush=True)
    report(rows)
    if args.plot and rows:
        plot(rows, args.plot)
        print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
