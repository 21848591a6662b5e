"""Bad input at knowflow's input boundaries: structured files of the wrong shape
(lm-eval samples, the run files `report` and `--resume` read), `--set` JSON sections with a
field of the wrong shape, two inputs that would share one output name, and values outside
what the model or the number type allows. Same case format as `cases.py`; each refused with
one line naming the file, the line and the field, before anything is written.
`write_boundary_files` adds the files these cases read to a corpus folder."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from corpus.cases import C, M
from corpus.files import _items, _jsonl, _run

_DOC = {"id": "b0", "suite": "cf-mine", "context": "Zorb0 is the capital of Land0.",
        "question": "What is the capital of Land0?", "counterfactual_answer": "Zorb0",
        "parametric_answer": "Paris0", "counterfactual_aliases": [], "parametric_aliases": [],
        "task": "qa", "relation": "", "subject": "", "meta": "{}", "prompt": "Q",
        "choices": [" Paris0", " Zorb0"], "gold": 1, "prompt_format": "plain"}


def _samples(*docs: dict) -> str:
    """lm-eval `--log_samples` lines (unfiltered responses: [[loglik, is_greedy]])."""
    return _jsonl([{"doc_id": i, "doc": doc, "resps": [[[-2.0, False]], [[-1.0, True]]],
                    "filtered_resps": [[-2.0, False], [-1.0, True]], "acc": 1.0}
                   for i, doc in enumerate(docs)])


def write_boundary_files(root: Path) -> None:
    """The inputs of `BOUNDARY_CASES` in `root` (beside `files.write_inputs`' and
    `files.write_runs`')."""
    from knowflow.experiments.cpi_toy.experiment import CpiToyConfig

    no_suite = {k: v for k, v in _DOC.items() if k != "suite"}
    files = {
        "samples-nosuite.jsonl": _samples(no_suite),
        "samples-listsuite.jsonl": _samples({**_DOC, "suite": ["cf-mine"]}),
        "samples-numsuite.jsonl": _samples({**_DOC, "suite": 5}),
        "samples-3choices.jsonl": _samples({**_DOC, "choices": ["a", "b", "c"]}),
        "samples-line2.jsonl": _samples(_DOC, {**_DOC, "id": 7}),
        "my data.jsonl": _jsonl(_items(2)),
        "my_data.jsonl": _jsonl(_items(2)),
    }
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    cpi = dataclasses.asdict(CpiToyConfig())
    done = {"summary.json": "{}\n", "metrics.jsonl": _jsonl([{"step": 0}])}
    _run(root, "bsumlist", "cpi-toy", cpi, **{**done, "summary.json": "[1, 2]\n"})
    _run(root, "bcfglist", "cpi-toy", "[1, 2]", **done)
    brun = _run(root, "brunnum", "cpi-toy", cpi, **done)
    (brun / "run.json").write_text(json.dumps({"command": 5}))
    _run(root, "bmetstep", "cpi-toy", cpi,
         **{"metrics.jsonl": _jsonl([{"step": 0}, {"step": "x"}])})
    prog = _run(root, "bprog", "cpi-toy", cpi)
    ident = json.loads((prog / "run.json").read_text())
    (prog / "run.json").write_text(json.dumps({**ident, "in_progress": "yes"}))
    evalcfg = {"suites": ["cf-bio"], "scoring": "loglik", "model": "m"}
    item = {"suite": "cf-bio", "id": "x", "loglik_choice": "counterfactual"}
    _run(root, "bevalsum", "eval", evalcfg, **{"summary.json": '{"cf-bio": [1]}',
                                               "items.jsonl": _jsonl([item])})
    _run(root, "bheads", "probe-heads", {"probe": "heads", "model": "m"},
         **{"summary.json": json.dumps({"n_examples": 2, "context_heads": 5})})
    card = {"id": "x", "question": "q", "answer": "a", "answer_no_context": "b",
            "logprob_context": "-1.0", "logprob_no_context": -2.0, "verdict": "context",
            "verdict_numbers": {"context_contribution": 1.0, "context_supports": True,
                                "memory_agrees": False}}
    _run(root, "bexplain", "explain", {"model": "m"}, **{
        "summary.json": json.dumps({"findings": {"verdict": "v"}}),
        "records.jsonl": _jsonl([card])})
    _run(root, "bevalitems", "eval", evalcfg, **{
        "summary.json": json.dumps({"cf-bio": {"loglik": {"n": 1}}}),
        "items.jsonl": _jsonl([{k: v for k, v in item.items() if k != "suite"}])})


_SAMPLES = "eval --from-lm-eval {} --out out"
BOUNDARY_CASES = [
    # lm-eval samples: each doc checked against the exported task's document
    C(_SAMPLES.format("samples-nosuite.jsonl"), 2,
      "samples-nosuite.jsonl, line 1: field 'doc.suite': is missing"),
    C(_SAMPLES.format("samples-listsuite.jsonl"), 2,
      "field 'doc.suite': must be a string, got a list"),
    C(_SAMPLES.format("samples-numsuite.jsonl"), 2,  # wrote the whole eval folder, exit 1
      "samples-numsuite.jsonl, line 1: field 'doc.suite': must be a string, got 5"),
    C(_SAMPLES.format("samples-3choices.jsonl"), 2,
      "field 'doc.choices': must have at most 2 items"),
    C(_SAMPLES.format("samples-line2.jsonl"), 2,
      "samples-line2.jsonl, line 2: field 'doc.id': must be a string, got 7"),
    # the run files `report` reads
    C("report fx/bsumlist/cpi-toy/1", 2, "summary.json: must be a JSON object, got a list"),
    C("report fx/bcfglist/cpi-toy/1", 2, "config.json: must be a JSON object, got a list"),
    C("report fx/brunnum/cpi-toy/1", 2, "run.json: field 'command': must be a string, got 5"),
    C("report fx/bmetstep/cpi-toy/1", 2,
      "metrics.jsonl, line 2: field 'step': must be an integer, got \"x\""),
    C("report fx/bevalsum/eval/1", 2,
      "summary.json: field 'cf-bio': must be a JSON object, got a list"),
    C("report fx/bevalitems/eval/1", 2, "items.jsonl, line 1: field 'suite': is missing"),
    C("report fx/bheads/probe-heads/1", 2,
      "summary.json: field 'context_heads': must be a list, got 5"),
    C("report fx/bexplain/explain/1", 2,
      "records.jsonl, line 1: field 'logprob_context': must be a number, got \"-1.0\""),
    # ... and `--resume`
    C("run cpi-toy --resume --run-dir fx/bprog/cpi-toy/1", 2,
      "run.json: field 'in_progress': must be true or false, got \"yes\""),
    C("run cpi-toy --resume --run-dir fx/bmetstep/cpi-toy/1", 2,
      "metrics.jsonl, line 2: field 'step': must be an integer"),
    # --set: a JSON section's fields have their types
    C("sft --set 'sft={{\"lora_targets\": 5}}'", 2,
      "'sft.lora_targets': expected a list, got a number (5)"),
    C("sft --set 'sft={{\"lora_targets\": [\"q_proj\", {{\"a\": 1}}]}}'", 2,
      "'sft.lora_targets': expected a string, got an object"),
    C("run ocr-toy --set 'sweep={{\"ranks\": 4}}'", 2,
      "'sweep.ranks': expected a list, got a number (4)"),
    C("run cpi-toy --set 'finetune={{\"lr\": [1]}}'", 2, "'finetune.lr': cannot parse [1]"),
    C("run ocr-toy --set 'model={{\"attention\": {{\"kind\": 1}}}}'", 2,
      "'model.attention.kind': 'attention' is a value, not a section"),
    # two inputs, one output name
    C(f"export lm-eval {M} --out ex --data 'my data.jsonl' --data my_data.jsonl", 2,
      "'my data' and 'my_data' both export as task 'knowflow_my_data'"),
    # ranges the model or the number type sets
    C(f"probe project {M} --top-k 100000000 --out out --threads 1", 2,
      "--top-k: must be at most the model's vocabulary size"),
    C("run ocr-toy --set model.init_scale=1e30 --set seeds=[0] --set train.steps=2 "
      "--set train.eval_every=1 --runs-dir out", 2,
      "'model.init_scale': the initial weights give non-finite logits"),
    C("run ocr-toy --set train.lr=1e30 --set seeds=[0] --set train.steps=2 "  # not the init
      "--set train.eval_every=1 --runs-dir out", 2, "'train.lr': training diverged by step 1"),
]
