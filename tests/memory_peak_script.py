"""Run by tests/lens/test_memory.py in a fresh process: one job on a small random Llama with
long prompts, printing its peak resident memory above the loaded model's and the estimate
`knowflow.lens.memory` gives for it (JSON). Usage: JOB CHARS BATCH (job: eval-loglik,
eval-generate, sft, knockout, heads; CHARS: context characters, one byte-level token each)."""

import dataclasses
import json
import resource
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from helpers import byte_tokenizer, tiny_llama  # noqa: E402
from knowflow.data.suites import get_suite  # noqa: E402
from knowflow.lens import memory  # noqa: E402

torch.set_num_threads(1)
job, chars, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = byte_tokenizer()
model = tiny_llama(tok, layers=3, d_model=192, d_ff=512, heads=6, kv_heads=2,
                   max_positions=8192, attn="sdpa").eval()
pool = get_suite("cf-capitals")


def items(n: int, length: int) -> list:
    """`n` items whose contexts are padded to `length` characters with the other items'
    statements, starting at the next item (so no two prompts share more than the template:
    a shared prefix runs once and would hide the batch's cost)."""
    out = []
    for i, it in enumerate(pool[:n]):
        text = " ".join(p.context for p in pool[i + 1:] + pool[:i + 1]) * 20
        fill = text[:max(0, length - len(it.context))]
        out.append(dataclasses.replace(it, context=f"{fill} {it.context}" if length
                                       else it.context))
    return out


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def run(its: list, n: int) -> int:
    """Run the job; returns its longest sequence in tokens."""
    if job.startswith("eval"):
        from knowflow.evaluation.run import evaluate

        res = evaluate(model, its, tokenizer=tok, scoring=job.split("-")[1], known_filter=False,
                       batch_size=n, max_new_tokens=8)
        return max(len(tok(r["prompt"])["input_ids"]) for r in res.records)
    if job == "sft":
        from knowflow.data.facts import Instruction
        from knowflow.data.instruction_rows import encode_all
        from knowflow.train.sft import SFTConfig, train_model

        rows = [Instruction(instruction=it.question, input=it.context,
                            output=it.counterfactual_answer) for it in its]
        data, _ = encode_all(tok, rows, "chat", 100_000)
        with tempfile.TemporaryDirectory() as tmp:
            train_model(model, tok, data, SFTConfig(steps=1, batch_size=n, save_every=1000,
                                                    max_length=100_000), Path(tmp))
        return max(len(d["input_ids"]) for d in data)
    if job == "heads":
        from knowflow.probes.heads import HeadsConfig, conflict_prompt, heads

        heads(model, tok, its[:1], HeadsConfig(ablations=("zero",), rank_by="zero",
                                               n_bootstrap=10, batch_size=n))
        return len(conflict_prompt(its[0], tok).ids)
    from knowflow.probes.examples import builtin_facts
    from knowflow.probes.knockout import KnockoutConfig, knockout

    examples = []
    for it, ex in zip(its, builtin_facts(), strict=False):
        prefix = it.context + "\n"
        examples.append(dataclasses.replace(ex, prompt=prefix + ex.prompt,
                                            context=(0, len(prefix))))
    knockout(model, tok, examples, KnockoutConfig(known_only=False, batch_size=n, window=1))
    return len(tok(examples[0].prompt)["input_ids"])


if job != "sft":
    run(items(2, 0), 2)  # warm-up: kernels and caches, on short prompts
its = items(1 if job in ("knockout", "heads") else batch, chars)
base = rss()
longest = run(its, batch)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
shape = memory.shape_of(model)
# the script's prompts are all about `chars` tokens: none shares a tree row when they are long
short = longest if longest <= memory.LONG_PROMPT else 0
estimate = {"eval-loglik": lambda: memory.eval_bytes(shape, longest, 8, False, short),
            "eval-generate": lambda: memory.eval_bytes(shape, longest, 8),
            "sft": lambda: memory.step_bytes(shape, longest, full=False),
            "knockout": lambda: memory.variant_bytes(shape, longest),
            "heads": lambda: memory.variant_bytes(shape, longest)}[job]()(
    # knockout: 3 sources x 3 layers + the base row; heads: 3 layers x 6 heads + the base
    min(batch, {"knockout": 3 * 3 + 1, "heads": 3 * 6 + 1}.get(job, batch)))
print(json.dumps({"job": job, "measured": peak - base, "estimate": estimate, "base": base,
                  "longest": longest}))
