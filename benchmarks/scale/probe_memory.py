"""Peak resident memory of `probe knockout` / `probe heads` at a real model shape against
`knowflow.lens.memory`'s estimate: one job, one prompt of about TOKENS tokens,
ROWS variant rows a pass, in this (fresh) process. The model and the padded cf-capitals item
are `bench_scale.py`'s (random weights of the named shape, SmolLM2's tokenizer); the peak is
`ru_maxrss` above the resident memory just before the job (after a warm-up on a short
prompt), as `tests/memory_peak_script.py` measures it on a tiny model.

    .venv/bin/python benchmarks/scale/probe_memory.py smollm2-135m knockout 2048 16 [GIB]

With GIB the job runs under `--max-memory GIB` (validated first, as the CLI does before it
loads the model), which also limits glibc's malloc to one arena (`lens.allocator`); give a
budget that holds ROWS rows, so both runs do the same work. `cpu_s` is the job's CPU time.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import bench_scale  # noqa: E402
from knowflow.lens import memory  # noqa: E402


def run(model, tok, job: str, item, rows: int, budget: float | None = None) -> int:
    """Run `job` on `item` with `rows` variant rows a pass; returns its prompt's tokens."""
    if job == "knockout":
        from knowflow.probes.examples import builtin_facts
        from knowflow.probes.knockout import KnockoutConfig, knockout

        fact = builtin_facts()[0]
        example = replace(fact, prompt=item.context + "\n" + fact.prompt,
                          context=(0, len(item.context) + 1))
        knockout(model, tok, [example], KnockoutConfig(known_only=False, batch_size=rows,
                                                          max_memory=budget))
        return len(tok(example.prompt)["input_ids"])
    from knowflow.probes.heads import HeadsConfig, conflict_prompt, heads

    heads(model, tok, [item], HeadsConfig(ablations=("zero",), rank_by="zero", n_bootstrap=10,
                                          batch_size=rows, max_memory=budget))
    return len(conflict_prompt(item, tok).ids)


def main() -> None:
    name, job, tokens, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    budget = float(sys.argv[5]) if len(sys.argv) > 5 else None
    memory.check_max_memory(budget)
    torch.set_num_threads(1)
    model, tok = bench_scale.build_model(name)
    run(model, tok, job, bench_scale.long_items(tok, 1, 0)[0], rows, budget)    # warm-up
    item = bench_scale.long_items(tok, 1, tokens)[0]
    base = int(Path("/proc/self/statm").read_text().split()[1]) * 4096
    cpu = time.process_time()
    n = run(model, tok, job, item, rows, budget)
    cpu = time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    estimate = memory.variant_bytes(memory.shape_of(model), n)(rows)
    if budget is not None and memory.prompt_rows(model, n, rows, budget) < rows:
        raise SystemExit(f"--max-memory {budget} holds fewer than {rows} rows: raise it")
    print(json.dumps({"model": name, "job": job, "tokens": n, "rows": rows, "budget": budget,
                      "cpu_s": round(cpu, 2),
                      "measured_mib": round((peak - base) / 2**20),
                      "estimate_mib": round(estimate / 2**20),
                      "estimate_over_measured": round(estimate / (peak - base), 2)}))


if __name__ == "__main__":
    main()
