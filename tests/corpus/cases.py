"""The bad-input corpus: every command given input a careful new user might give it by mistake.

Each case is (command line, expected exit code, a fragment of the expected message). The
command line runs in a fresh folder holding the files of `tests/corpus/files.py`; `{model}` is
a tiny random Llama saved as a model folder. `usage=True` marks mistakes click itself reports
(a value of the wrong type, an unknown option): its usage box is several lines, by design.
`cuda=False` marks cases whose message depends on this machine having no CUDA device.
`fault=("enospc", N)` runs the case with its Nth write failing for want of space (the fault
matrix's injection, `benchmarks/faults/fault_matrix.py`); `removes` names what the case is
expected to remove (what a killed process left), the rest of its folder as it was.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    args: str
    code: int
    fragment: str
    usage: bool = False
    cuda: bool | None = None  # False: only meaningful without CUDA
    env: tuple[tuple[str, str], ...] = ()  # environment variables set for the case
    klass: str = ""  # the failure class, for the table (`by_command_and_class`)
    fault: tuple[str, int] | None = None  # (fault, write number) injected while it runs
    removes: tuple[str, ...] = ()  # paths the case removes (left by a killed process)

    @property
    def id(self) -> str:
        return f"i31_{self.klass.replace(' ', '_')}: {self.args}" if self.klass else self.args

    @property
    def command(self) -> str:
        return self.args.split()[0]


def C(args: str, code: int, fragment: str, **kw) -> Case:  # noqa: N802 (a table, read as one)
    return Case(args, code, fragment, **kw)


M = "--model {model}"
SFT = f"sft {M} --data good.jsonl --steps 2 --batch-size 4 --track cf-capitals " \
      "--track-limit 2 --runs-dir out"
EVAL = f"eval {M} --data items.jsonl --out out"

EVAL_CASES = [
    C("eval --device bogus", 2, "device 'bogus': unknown device"),
    C("eval --device tpu", 2, "device 'tpu'"),
    C("eval --device cuda", 2, "CUDA is not available", cuda=False),
    C("eval --device cuda:3", 2, "CUDA is not available", cuda=False),
    C("eval --device mps", 2, "MPS"),
    C("eval --seed -1", 2, "--seed: must not be negative"),
    C("eval --no-context --context-only", 2, "not both"),
    C("eval --suite ''", 2, "unknown suite ''"),
    C("eval --suite ,,", 2, "unknown suite"),
    C("eval --suite nope", 2, "unknown suite 'nope'"),
    C("eval --suite cf-bio,nope", 2, "unknown suite 'nope'"),
    C("eval --scoring best", 2, "--scoring:"),
    C("eval --prompt-format yaml", 2, "--prompt-format:"),
    C("eval --limit 0", 2, "--limit: must be at least 1"),
    C("eval --limit -3", 2, "--limit:"),
    C("eval --batch-size -1", 2, "--batch-size:"),
    C("eval --max-new-tokens 0", 2, "--max-new-tokens:"),
    C("eval --method beam", 2, "unknown method 'beam'"),
    C("eval --method cad,", 2, "unknown method ''"),
    C("eval --alpha x", 2, "--alpha: 'x' is not a number"),
    C("eval --alpha 0,-1", 2, "--alpha: must be a finite number >= 0"),
    C("eval --method cad --alpha nan", 2, "--alpha:"),
    C("eval --conditions hostile", 2, "unknown condition 'hostile'"),
    C("eval --conditions ''", 2, "unknown condition ''"),
    C("eval --no-context --method cad", 2, "no context is shown"),
    C("eval --no-context --conditions irrelevant", 2, "--no-context shows none"),
    C("eval --threads 0", 2, "--threads: must be at least 1"),
    C("eval --threads -1", 2, "--threads:"),
    C("eval --out afile", 2, "afile: the output folder is a file"),
    C("eval --out afile/sub", 2, "afile is a file"),
    C("eval --model no-such-model-xyz", 2, "not a local folder"),
    C("eval --model ''", 2, "--model: is empty"),
    C("eval --model adir", 2, "has no config.json"),
    C(f"{EVAL.replace('items.jsonl', 'missing.jsonl')}", 2, "missing.jsonl: no such file"),
    C(f"{EVAL.replace('items.jsonl', 'trunc.json')}", 2, "trunc.json, line 2"),
    C(f"{EVAL.replace('items.jsonl', 'latin1.jsonl')}", 2, "not UTF-8"),
    C(f"{EVAL.replace('items.jsonl', 'forged.jsonl')}", 2,
      "field 'context' holds '<|end|>', one of the tokenizer's control tokens"),
    C(f"sft {M} --data forged-train.jsonl --steps 1 --no-track", 2,
      "row 1: field 'input' holds '<|end|>'"),
    C(f"{EVAL.replace('items.jsonl', 'items.jsonl.gz')}", 2, "a gzip-compressed file, not text"),
    C(f"{EVAL.replace('items.jsonl', 'items.xlsx')}", 2, "an Excel workbook (.xlsx), not text"),
    C("augment --data items.jsonl.gz --out aug.jsonl", 2, "gunzip"),
    C(f"{EVAL.replace('items.jsonl', 'empty.jsonl')}", 2, "empty.jsonl: no records"),
    C(f"{EVAL.replace('items.jsonl', 'noquestion.jsonl')}", 2, "field 'question': missing"),
    C(f"{EVAL.replace('items.jsonl', 'wrongtype.jsonl')}", 2, "expected a string"),
    C(f"{EVAL.replace('items.jsonl', 'same.jsonl')}", 2, "every item's answer equals"),
    C(f"{EVAL.replace('items.jsonl', 'nocols.csv')}", 2, "missing column"),
    C(f"{EVAL.replace('items.jsonl', 'nqswap-noorg.jsonl')}", 2, "line 1: field 'org_answer': "
      "the nq-swap preset (recognised from sub_context, sub_answer) needs column org_answer "
      "(the memory answer)"),
    C(f"{EVAL.replace('items.jsonl', 'nqswap-noorg.jsonl')} --preset nq-swap", 2,
      "field 'org_answer': the nq-swap preset needs column org_answer"),
    C(f"{EVAL.replace('items.jsonl', 'nq-swapp')}", 2, "nq-swapp: no such file, nor a "
      "benchmark name (nq-swap, conflictqa, memotrap, clasheval); did you mean nq-swap?"),
    C(f"{EVAL.replace('items.jsonl', 'clasheval')}", 2, "clasheval: no hub copy of this "
      "benchmark is registered; download dataset.pqt"),
    C(f"{EVAL.replace('items.jsonl', 'adir')}", 2, "adir: no such file"),
    C(f"{EVAL.replace('items.jsonl', 'good.jsonl')}", 2, "good.jsonl, line 1: field 'context'"),
    C(f"{EVAL.replace('items.jsonl', 'notalist.json')}", 2, "expected an object"),
    C(f"{EVAL} --dtype float13", 2, "unknown dtype 'float13'"),
    C("eval --seed abc", 2, "Invalid value", usage=True),
    C("eval --limit many", 2, "Invalid value", usage=True),
    C("eval --colour red", 2, "No such option", usage=True),
]

SFT_CASES = [
    C("sft --lr nan", 2, "--lr: 'nan' is not a finite number"),
    C("sft --lr inf", 2, "--lr: 'inf' is not a finite number"),
    C("sft --lr -inf", 2, "not a finite number"),
    C("sft --lr -1", 2, "--lr: must be positive"),
    C("sft --lr 0", 2, "--lr:"),
    C("sft --steps 0", 2, "--steps:"),
    C("sft --steps -5", 2, "--steps:"),
    C("sft --batch-size 0", 2, "--batch-size:"),
    C("sft --max-length 0", 2, "--max-length:"),
    C("sft --train half", 2, "--train:"),
    C("sft --lora-r 0", 2, "--lora-r:"),
    C("sft --set sft.weight_decay=-1", 2, "'sft.weight_decay': must not be negative"),
    C("sft --set sft.weight_decay=nan", 2, "not a finite number"),
    C("sft --set sft.scheduler=sometimes", 2, "unknown scheduler 'sometimes'"),
    C("sft --set sft.warmup_steps=-1", 2, "'sft.warmup_steps'"),
    C("sft --set sft.grad_accum=0", 2, "'sft.grad_accum'"),
    C("sft --set sft.save_every=0", 2, "'sft.save_every'"),
    C("sft --set sft.lr=-1", 2, "config field 'sft.lr': must be positive"),
    C("sft --set sft.lr=abc", 2, "cannot parse 'abc' as float"),
    C("sft --set sft.steps=2.5", 2, "cannot parse '2.5' as int"),
    C("sft --set sft.seed=-2", 2, "'sft.seed': must not be negative"),
    C("sft --set mixture.c=2", 2, "'mixture.c': a share must lie in [0, 1]"),
    C("sft --set mixture.s=-0.1", 2, "'mixture.s'"),
    C("sft --set mixture.c=0.5", 2, "sum to 1.25, not 1"),
    C("sft --set mixture.c=0 --set mixture.cs=0", 2, "sum to 0.25, not 1"),
    C("sft --set mixture.size=0", 2, "'mixture.size'"),
    C("sft --set mixture.heldout_share=1", 2, "'mixture.heldout_share'"),
    C("sft --no-track --keep-peak", 2, "--keep-peak: --keep-peak needs tracking"),
    C("sft --no-track --stop-drop 0.1", 2, "--stop-drop:"),
    C("sft --stop-drop 2", 2, "--stop-drop:"),
    C("sft --curate sometimes", 2, "--curate: 'sometimes' is not one of none, dynamic"),
    C("sft --curate dynamic --curate-fraction 2", 2, "--curate-fraction: must lie in (0, 1)"),
    C("sft --curate dynamic --curate-fraction 0", 2, "--curate-fraction:"),
    C("sft --curate dynamic --curate-fraction 1", 2, "--curate-fraction:"),
    C("sft --curate dynamic --curate-fraction nan", 2, "not a finite number"),
    C("sft --curate dynamic --curate-every 0", 2, "--curate-every: must be at least 1"),
    C("sft --curate dynamic --curate-threshold -1", 2, "--curate-threshold: must be positive"),
    C("sft --curate-every 5", 2, "need --curate dynamic"),
    C("sft --curate-fraction 0.5", 2, "--curate:"),
    C("sft --curate dynamic --curate-every many", 2, "Invalid value", usage=True),
    C("sft --track nope", 2, "unknown suite 'nope'"),
    C("sft --track-every 0", 2, "--track-every:"),
    C("sft --track-limit 0", 2, "--track-limit:"),
    C("sft --set track.scoring=guess", 2, "'track.scoring'"),
    C("sft --set track_items=some", 2, "'track_items'"),
    C("sft --set tracking=maybe", 2, "cannot parse 'maybe' as bool"),
    C("sft --prompt-format yaml", 2, "--prompt-format:"),
    C("sft --set track.prompt_format=plain", 2, "'track.prompt_format'"),
    C("sft --set nope=1", 2, "'nope': unknown key"),
    C("sft --set sft.nope=1", 2, "'sft.nope': unknown key"),
    C("sft --set sft=3", 2, "'sft': is a section, not a value"),
    C("sft --set sft.lr", 2, "is not of the form key=value"),
    C("sft --set =3", 2, "has an empty key"),
    C("sft --run-dir out/sft/x", 2, "--run-dir: only works with --resume"),
    C("sft --resume --lr 0.1", 2, "--resume continues a run with its saved config"),
    C("sft --resume --runs-dir out", 2, "no unfinished run of 'sft'"),
    C("sft --resume --run-dir out/sft/none", 2, "no such run directory"),
    C("sft --resume --run-dir fx/sftck/sft/1", 2, "trainer_state.json, line 1: damaged JSON"),
    C("sft --resume --run-dir fx/sftst/sft/1", 2, "adapter_model.safetensors: damaged checkpoint"),
    C("sft --resume --run-dir fx/sftstate/sft/1", 2, "checkpoint-2/trainer_state.json: field "
      "'global_step': step 3, but the checkpoint's name says step 2"),
    C("sft --resume --run-dir fx/sftmax/sft/1", 2, "field 'max_steps': 999, but the run's "
      "config says sft.steps="),
    C("sft --resume --run-dir fx/sftrank/sft/1", 2, "adapter_config.json: field 'r': LoRA rank "
      "3, but the run's config says sft.lora_r=8"),
    C("sft --resume --run-dir fx/cfgbad/cpi-toy/1", 2, "this is a `cpi-toy` run, not a `sft`"),
    C("sft --device bogus", 2, "unknown device"),
    C("sft --device cuda", 2, "CUDA is not available", cuda=False),
    C("sft --model no-such-model-xyz", 2, "not a local folder"),
    C("sft --model adir", 2, "has no config.json"),
    C(f"sft {M} --data missing.jsonl", 2, "missing.jsonl: no such file"),
    C(f"sft {M} --data trunc.json", 2, "trunc.json, line 3: invalid JSON"),
    C(f"sft {M} --data latin1.jsonl", 2, "not UTF-8"),
    C(f"sft {M} --data nooutput.jsonl", 2, "field 'output'"),
    C(f"sft {M} --runs-dir afile", 2, "afile is a file"),
    C("sft --threads 0", 2, "--threads:"),
    C("sft --lr fast", 2, "Invalid value", usage=True),
    C(f"{SFT} --lora-targets q_proj,nope", 2, "--lora-targets: unknown target module"),
    C(f"{SFT} --max-length 3", 2, "--max-length: no training examples"),
    C(f"{SFT} --data chat.jsonl --prompt-format plain", 2, "needs --prompt-format chat"),
]

CURATE = f"curate {M} --data good.jsonl --out kept.jsonl"
CURATE_CASES = [
    C(f"{CURATE} --drop 1.5", 2, "--drop: must lie in [0, 1)"),
    C(f"{CURATE} --drop -0.1", 2, "--drop:"),
    C(f"{CURATE} --drop nan", 2, "--drop:"),
    C(f"{CURATE} --by luck", 2, "--by:"),
    C(f"{CURATE} --prompt-format yaml", 2, "--prompt-format:"),
    C(f"{CURATE} --batch-size 0", 2, "--batch-size:"),
    C(f"{CURATE} --threads 0", 2, "--threads:"),
    C(f"{CURATE} --seed -1", 2, "--seed:"),
    C(f"{CURATE} --device bogus", 2, "unknown device"),
    C(f"{CURATE} --device cuda", 2, "CUDA is not available", cuda=False),
    C(f"{CURATE} --model no-such-model-xyz", 2, "not a local folder"),
    C(f"curate {M} --data good.jsonl --out adir", 2, "adir: the output file is a folder"),
    C(f"curate {M} --data good.jsonl --out good.jsonl", 2, "is the input file"),
    C(f"curate {M} --data good.jsonl --out afile/kept.jsonl", 2, "afile is a file"),
    C(f"curate {M} --data missing.jsonl --out kept.jsonl", 2, "missing.jsonl: no such file"),
    C(f"curate {M} --data trunc.json --out kept.jsonl", 2, "trunc.json, line 3"),
    C(f"curate {M} --data latin1.jsonl --out kept.jsonl", 2, "not UTF-8"),
    C(f"curate {M} --data empty.jsonl --out kept.jsonl", 2, "empty.jsonl"),
    C(f"curate {M} --data chat.jsonl --out kept.jsonl", 2, "needs Alpaca-form rows"),
    C(f"curate {M} --data adir --out kept.jsonl", 2, "adir: not a file"),
    C("curate --data good.jsonl", 2, "Missing option", usage=True),
    C(f"{CURATE} --drop lots", 2, "Invalid value", usage=True),
]

AUGMENT = "augment --data good.jsonl --out aug.jsonl"
AUGMENT_CASES = [
    C(f"{AUGMENT} --ratio -1", 2, "--ratio: must be a positive number"),
    C(f"{AUGMENT} --ratio 0", 2, "--ratio:"),
    C(f"{AUGMENT} --ratio nan", 2, "--ratio:"),
    C(f"{AUGMENT} --ratio inf", 2, "--ratio:"),
    C(f"{AUGMENT} --seed -1", 2, "--seed:"),
    C("augment --data good.jsonl --out adir", 2, "the output file is a folder"),
    C("augment --data good.jsonl --out good.jsonl", 2, "is the input file"),
    C("augment --data good.jsonl --out afile/aug.jsonl", 2, "afile is a file"),
    C("augment --data missing.jsonl --out aug.jsonl", 2, "no such file"),
    C("augment --data trunc.json --out aug.jsonl", 2, "trunc.json, line 3"),
    C("augment --data latin1.jsonl --out aug.jsonl", 2, "not UTF-8"),
    C("augment --data empty.jsonl --out aug.jsonl", 2, "empty.jsonl"),
    C("augment --data nooutput.jsonl --out aug.jsonl", 2, "field 'output'"),
    C(f"{AUGMENT} --ratio some", 2, "Invalid value", usage=True),
]

PROBE_CASES = []
for kind in ("knockout", "sublayer", "project", "attention"):
    base = f"probe {kind} {M} --runs-dir out" + (" --suite cf-capitals" if kind == "attention"
                                                 else "")
    PROBE_CASES += [
        C(f"{base} --device bogus", 2, "unknown device"),
        C(f"{base} --device cuda", 2, "CUDA is not available", cuda=False),
        C(f"{base} --threads 0", 2, "--threads:"),
        C(f"{base} --limit 0", 2, "--limit: must be at least 1"),
        C(f"{base} --out afile", 2, "afile: the output folder is a file"),
        C(f"{base} --runs-dir afile", 2, "afile: the output folder is a file"),
        C(f"{base} --set nope=1", 2, "'nope': unknown key"),
        C(f"{base} --set batch_size=0", 2, "'batch_size': must be at least 1"),
        C(f"probe {kind} --model no-such-model-xyz --runs-dir out"
          + (" --suite cf-capitals" if kind == "attention" else ""), 2, "not a local folder"),
        C(f"probe {kind} {M} --data missing.jsonl", 2, "missing.jsonl: no such file"),
        C(f"probe {kind} {M} --data latin1.jsonl", 2, "not UTF-8"),
        C(f"probe {kind} {M} --data trunc.json", 2, "trunc.json"),
        C(f"probe {kind} {M} --data prompts.jsonl --suite cf-capitals", 2, "not both"),
    ]
PROBE_CASES += [
    C(f"probe knockout {M} --data - --runs-dir out", 2, "standard input is not read"),
    C(f"probe knockout {M} --data a.fifo --runs-dir out", 2, "a pipe or device"),
    C(f"probe knockout {M} --data adir --runs-dir out", 2, "adir: a folder, not a file"),
    C(f"probe knockout {M} --runs-dir out --set window=0", 2, "'window': the window must hold"),
    C(f"probe knockout {M} --runs-dir out --window 99", 2, "larger than the model"),
    C(f"probe knockout {M} --runs-dir out --window 1 --source nowhere", 2, "nowhere"),
    C(f"probe sublayer {M} --runs-dir out --window 1 --sublayer brain", 2, "brain"),
    C(f"probe project {M} --runs-dir out --set window=3", 2, "'window': unknown key"),
    C(f"probe attention {M} --runs-dir out", 2, "needs examples with a context"),
    C(f"probe attention {M} --runs-dir out --suite nope", 2, "unknown suite 'nope'"),
    C("probe knockout --limit x", 2, "Invalid value", usage=True),
]


def _data(command: str, name: str) -> str:
    return command.replace("items.jsonl", name).replace("good.jsonl", name)


# the one answer-text rule and the formats read
ANSWER_TEXT_CASES = [
    C(_data(EVAL, "zw-answer.jsonl"), 2, "zw-answer.jsonl, line 2: field 'answer': empty "
      "(or only zero-width"),
    C(_data(EVAL, "control-answer.jsonl"), 2, "line 1: field 'answer': empty"),
    C(_data(EVAL, "nfd-same.jsonl"), 2, "every item's answer equals its memory answer"),
    C(_data(EVAL, "surrogate.jsonl"), 2, "surrogate.jsonl, line 2: field 'answer_aliases[1]': "
      "a lone surrogate escape"),
    C(_data(SFT, "surrogate-train.jsonl"), 2, "surrogate-train.jsonl, line 2: field 'output': "
      "a lone surrogate escape"),
    C(f"probe knockout {M} --data surrogate-prompts.jsonl --runs-dir out", 2,
      "line 1: field 'prompt': a lone surrogate escape"),
    C(_data(EVAL, "items.tsv"), 2, "items.tsv, line 1: tab-separated text (TSV), not JSON; "
      "knowflow reads JSONL, a JSON list, CSV with commas"),
    C(_data(AUGMENT, "items.tsv"), 2, "tab-separated text (TSV)"),
    C(_data(EVAL, "semicolon.csv"), 2, "semicolon.csv, line 1: a CSV file separated by "
      "semicolons"),
    C(_data(EVAL, "wrapped.json"), 2, "wrapped.json, line 1: a JSON object holding a list "
      "under 'data', not JSONL or a JSON list"),
    C(_data(SFT, "wrapped-train.json"), 2, "a JSON object holding a list under 'data'"),
    C(_data(CURATE, "wrapped-train.json"), 2, "give the list itself"),
    C(_data(EVAL, "pretty.jsonl"), 2, "one JSON object written over several lines"),
    C(_data(EVAL, "items.xlsx"), 2, "knowflow reads JSONL, a JSON list, CSV with commas, "
      "parquet"),
]

# flags with no effect under the chosen method, a run generation cannot score
OPTION_CASES = [
    C("eval --method greedy --beta 0.5", 2, "--beta: is the plausibility "
      "constraint of cad, adacad, cocoa, but --method greedy uses none of them"),
    C("eval --method opinion --beta 0,0.3", 2, "--beta:"),
    C("eval --alpha 2", 2, "--alpha: is CAD's alpha, but --method greedy has no "
      "cad"),
    C("eval --method adacad --alpha 0.5", 2, "--method adacad has no cad"),
    C(f"{_data(EVAL, 'caseonly.jsonl')} --scoring generate", 2, "caseonly.jsonl: generation "
      "can score none of its 2 items"),
    C("explain --set cv_folds=1", 2, "config field 'cv_folds': must be at least 2, got 1"),
    C("explain --set cv_folds=0", 2, "'cv_folds'"),
    C("explain --ablations 100000", 2, "--ablations: 100000 ablations: at most "
      "4096"),
    C("explain --set lds_floor=2", 2, "'lds_floor'"),
    C("export lm-eval --out tasks --suite cf-capitals --limit 2 --prompt-format plain", 2,
      "tasks/knowflow_lmeval_loader.py: exists and was not written by knowflow export"),
]

RUN_CASES = [
    C("run cpi-toy --set finetune.lr=inf", 2, "'finetune.lr': 'inf' is not a finite number"),
    C("run cpi-toy --set finetune.lr=nan", 2, "'finetune.lr': 'nan' is not a finite number"),
    C("run cpi-toy --set finetune.lr=-1", 2, "'finetune.lr': must be positive"),
    C("run cpi-toy --set world=3", 2, "'world': is a section, not a value"),
    C("run cpi-toy --set 'world=[1]'", 2, "'world': is a section, not a value"),
    C("run cpi-toy --set world.delta_c=1.5", 2, "'world.delta_c'"),
    C("run cpi-toy --set finetune.eval_every=5000", 2, "'finetune.eval_every': 5000 is larger"),
    C("run cpi-toy --set finetune.steps=0", 2, "'finetune.steps'"),
    C("run cpi-toy --set finetune.nope=1", 2, "'finetune.nope': unknown key"),
    C("run cpi-toy --set parts=nope", 2, "unknown part 'nope'"),
    C("run cpi-toy --set workers=0", 2, "'workers'"),
    C("run cpi-toy --set seed=-1", 2, "'seed': must not be negative"),
    C("run cpi-toy --set world.n_answers=1000000000 --set workers=1 --set parts=inversion", 2,
      "memory: this config needs more memory"),
    C("run cpi-toy --threads -1", 2, "--threads: must be at least 1"),
    C("run cpi-toy --threads 0", 2, "--threads:"),
    C("run cpi-toy --run-dir runs/cpi-toy/x", 2, "--run-dir: only works with --resume"),
    C("run cpi-toy --runs-dir afile", 2, "afile is a file"),
    C("run cpi-toy --runs-dir afile/deeper", 2, "afile is a file"),
    C("run no-such-experiment", 2, "unknown experiment 'no-such-experiment'"),
    C("run cpi-toy --resume", 2, "no unfinished run of 'cpi-toy'"),
    C("run cpi-toy --resume --set seed=1", 2, "--resume continues a run"),
    C("run cpi-toy --resume --run-dir nowhere", 2, "nowhere: no such run directory"),
    C("run cpi-toy --resume --runs-dir fx/cfgbad", 2, "config.json, line 1: damaged JSON"),
    C("run cpi-toy --resume --runs-dir fx/cfgbad", 2, "start a fresh run"),
    C("run cpi-toy --resume --runs-dir fx/ckbad", 2, "checkpoints/inversion.json, line 1"),
    C("run cpi-toy --resume --runs-dir fx/ckbad", 2, "to recompute just that piece"),
    C("run cpi-toy --resume --runs-dir fx/cfgkey", 2, "unknown key"),
    C("run cpi-toy --resume --runs-dir fx/metbad", 2, "metrics.jsonl, line 2"),
    C("run ocr-toy --set workers=0", 2, "'workers'"),
    C("run ocr-toy --set workers=nan", 2, "cannot parse 'nan' as int"),
    C("run inversion-tiny --set sft.lr=inf", 2, "'sft.lr': 'inf' is not a finite number"),
    C("run inversion-tiny --set seeds=-1", 2, "'seeds'"),
    # SFTConfig has no eval_every (the tracker's interval is track.every): an unknown key
    C("run inversion-tiny --set sft.eval_every=100000", 2, "'sft.eval_every': unknown key"),
    C("run inversion-tiny --set pretrain.eval_every=100000", 2,
      "'pretrain.eval_every': 100000 is larger than pretrain.steps="),
    C("run sft --set sft.lr=-1", 2, "'sft.lr': must be positive"),
    C("run sft --set device=cuda", 2, "CUDA is not available", cuda=False),
    C("run cpi-toy --threads many", 2, "Invalid value", usage=True),
    C("run", 2, "Missing argument", usage=True),
]

# model folders saved or edited the ways a new user's are (`files.write_models`): each refused
# from its files (config, index, safetensors headers, tokenizer files) or its tokenizer before
# the weights load, naming the file and the fix
MODEL_CASES = [
    C("sft --model models/no-tokenizer-gpt2 --data good.jsonl --steps 1 --no-track "
      "--runs-dir out", 2, "models/no-tokenizer-gpt2: no tokenizer files (tokenizer.json, "
      "tokenizer.model, vocab.json, ...): the model was saved without its tokenizer"),
    C("eval --model models/empty-weights --data items.jsonl --out out", 2,
      "models/empty-weights/model.safetensors: damaged weights file (the file is empty)"),
    C("curate --model models/added-tokens --data good.jsonl --out kept.jsonl", 2,
      "models/added-tokens: the tokenizer has token ids up to 261, but the model embeds only "
      "260"),
    C("export lm-eval --model models/template-raises --out ex --suite cf-capitals --limit 2 "
      "--prompt-format chat", 2, "models/template-raises/chat_template.jinja: its chat "
      "template fails on a two-turn conversation (TemplateError: no system role)"),
    C("eval --model models/template-empty --data items.jsonl --out out", 2,
      "models/template-empty/chat_template.jinja: its chat template renders a conversation to "
      "nothing"),
    C("explain --model models/bert --data items.jsonl --out out", 2,
      "models/bert/config.json: a bert encoder (is_decoder is not true"),
    C("probe knockout --model models/nan --runs-dir out", 2,
      "weight model.layers.0.mlp.up_proj.weight holds NaN or infinite values"),
    C("eval --model models/empty-index --data items.jsonl --out out", 2,
      "models/empty-index/model.safetensors.index.json: the weight_map is empty"),
    C("probe heads --model models/wrong-embedding --runs-dir out", 2,
      "models/wrong-embedding/model.safetensors: tensor model.embed_tokens.weight is 300 x 64, "
      "but config.json gives 260 x 64 (vocab_size x hidden size)"),
]

REPORT_CASES = [
    C("report nowhere", 2, "nowhere: no such run folder"),
    C("report afile", 2, "afile: a file, not a run folder"),
    C("report adir", 2, "not a knowflow run directory"),
    C("report fx/cfgbad/cpi-toy/1", 2, "config.json, line 1: damaged JSON"),
    C("report fx/sumbad/cpi-toy/1", 2, "summary.json, line 1: damaged JSON"),
    C("report fx/sumbad/cpi-toy/1", 2, "--resume --run-dir"),
    C("report fx/metbad/cpi-toy/1", 2, "metrics.jsonl, line 2: damaged JSON line"),
    C("report fx/ok/cpi-toy/1 --out adir", 2, "adir: the report file is a folder"),
    C("report fx/ok/cpi-toy/1 --out afile/r.html", 2, "afile is a file"),
    C("report fx/ok/cpi-toy/1 fx/metbad/cpi-toy/1", 2, "metrics.jsonl, line 2"),
    C("report", 2, "Missing argument", usage=True),
]

CONFIG_CASES = [
    C("config nope", 2, "unknown experiment 'nope'"),
    C("config ''", 2, "unknown experiment ''"),
    C("config", 2, "Missing argument", usage=True),
    C("nonsense", 2, "No such command", usage=True),
    C("list extra", 2, "unexpected extra argument", usage=True),
]

# The failure classes, at least one case per class and command: data loss (an output that
# would replace the user's files, another run's, an input or a non-regular file), internal
# errors on input at fault (huge numbers, deep nesting, wrong cell types, checkpoint shapes),
# input silently accepted (shifted or missing CSV cells, duplicate columns, NaN samples),
# numeric limits, resume identity, environment. Each refused before anything is written.
BIG = "9" * 5000
CLASS_CASES = {
    "data loss": [
        C(f"{EVAL.replace('--out out', '--out mine')}", 2, "mine: the output folder is not empty"),
        C(f"{EVAL.replace('--out out', '--out fx/ok/cpi-toy/1')}", 2,
          "holds a run of `cpi-toy`, not of `eval`"),
        C(f"{EVAL.replace('--out out', '--out .')}", 2, ".: the output folder is not empty"),
        C(f"probe knockout {M} --out mine", 2, "mine: the output folder is not empty"),
        C(f"probe project {M} --out fx/ok/cpi-toy/1", 2, "not of `probe-project`"),
        C(f"curate {M} --data good.jsonl --out kept.png", 2,
          "kept.png: the histogram file would be written over the output file"),
        C(f"curate {M} --data x.scores.jsonl --out x.jsonl", 2,
          "the scores file would replace the input x.scores.jsonl"),
        C("augment --data good.jsonl --out fifo", 2, "fifo: the output file exists and is not"),
        C("report fx/ok/cpi-toy/1 --out fx/ok/cpi-toy/1/config.json", 2,
          "a file of the knowflow run"),
        C("report fx/ok/cpi-toy/1 --out fifo", 2, "not a regular file"),
        C("eval --data items.jsonl --out out", 2, "cannot create the model cache folder",
          env=(("KNOWFLOW_CACHE", "afile"),)),
        C("sft --data good.jsonl --runs-dir out", 2, "cannot create the model cache folder",
          env=(("KNOWFLOW_CACHE", "afile"),)),
        C("run sft --set data=good.jsonl --runs-dir out", 2, "cannot create the model cache",
          env=(("KNOWFLOW_CACHE", "afile"),)),
        C(f"sft {M} --data good.jsonl --runs-dir fifo", 2, "fifo is a file"),
        C("run cpi-toy --runs-dir fifo", 2, "fifo is a file"),
    ],
    "internal error": [
        C(f"{EVAL.replace('items.jsonl', 'bigint.jsonl')}", 2,
          "bigint.jsonl, line 2: invalid JSON (a number of 5000 digits)"),
        C(f"{EVAL.replace('items.jsonl', 'deep.jsonl')}", 2, "deep.jsonl, line 2"),
        C(f"{EVAL.replace('items.jsonl', 'numalias.jsonl')} --fields context=context,"
          "question=question,answer=answer,memory_answer=memory_answer,answer_aliases=alt", 2,
          "field 'alt': expected a string or a list of strings, got int"),
        C(f"sft {M} --data bigrows.jsonl", 2, "bigrows.jsonl, line 2"),
        C(f"curate {M} --data deeprows.jsonl --out kept.jsonl", 2, "nested too deeply"),
        C("augment --data bigrows.jsonl --out aug.jsonl", 2, "5000 digits"),
        C(f"probe project {M} --data deep.jsonl", 2, "deep.jsonl, line 2"),
        C("run cpi-toy --resume --runs-dir fx/cfgbig", 2, "config.json, line 1: damaged JSON"),
        C("report fx/cfgbig/cpi-toy/1", 2, "damaged JSON (a number of 5000 digits)"),
        C("run cpi-toy --resume --runs-dir fx/ckshape", 2, "not a knowflow checkpoint"),
        C("sft --resume --run-dir fx/sftempty/sft/1", 2, "trainer_state.json, line 1"),
        C("sft --resume --run-dir fx/sftnoad/sft/1", 2,
          "damaged checkpoint (no adapter_model.safetensors)"),
        C(f"sft --set sft.steps={BIG}", 2, "cannot parse '99999999999999999999..."),
        C(f"run cpi-toy --set 'world={{{{\"n_test\": {BIG}}}}}'", 2, "'world'"),
    ],
    "silently accepted": [
        C(f"{EVAL.replace('items.jsonl', 'shift.csv')}", 2,
          "shift.csv, line 3: 6 cells, but the header has 4 columns"),
        C(f"{EVAL.replace('items.jsonl', 'missingcell.csv')}", 2, "line 2: 3 cells"),
        C(f"{EVAL.replace('items.jsonl', 'dupcol.csv')}", 2, "column 'answer' appears twice"),
        C("eval --from-lm-eval nan.jsonl", 2, "nan.jsonl, line 1: invalid JSON (NaN"),
        C("sft --set 'sft={{}}'", 2, "'sft': an empty section sets nothing"),
        C("run cpi-toy --set 'finetune={{}}'", 2, "'finetune': an empty section"),
        C("sft --resume --run-dir fx/sftedit/sft/1", 2, "config.json: changed since the run"),
        C(f"sft {M} --data nanrows.jsonl", 2, "nanrows.jsonl, line 2: invalid JSON (NaN"),
        C(f"curate {M} --data nanrows.jsonl --out kept.jsonl", 2, "nanrows.jsonl, line 2"),
        C("augment --data nanrows.jsonl --out aug.jsonl", 2, "nanrows.jsonl, line 2"),
        C(f"probe knockout {M} --data nanrows.jsonl", 2, "nanrows.jsonl, line 2"),
    ],
    "numeric limit": [
        C("eval --threads 100000", 2, "--threads: must be at most"),
        C("eval --method cad --alpha 1e300", 2, "--alpha: must be at most 1000"),
        C("sft --threads 100000", 2, "--threads: must be at most"),
        C("sft --set mixture.size=100000000", 2, "'mixture.size': must be at most 1000000"),
        C("sft --set sft.scheduler=reduce_lr_on_plateau", 2, "unknown scheduler"),
        C("sft --set sft.scheduler=cosine_with_min_lr", 2, "unknown scheduler"),
        C("sft --set sft.optim=adamw_bnb_8bit", 2, "'sft.optim': 'adamw_bnb_8bit' is not"),
        C("sft --set sft.optim=galore_adamw", 2, "'sft.optim'"),
        C("sft --set sft.seed=99999999999", 2, "'sft.seed': must be at most 4294967295"),
        C(f"{CURATE} --threads 100000", 2, "--threads: must be at most"),
        C(f"{AUGMENT} --ratio 999999", 2, "--ratio: must be a positive number up to 100"),
        C(f"probe sublayer {M} --threads 100000", 2, "--threads: must be at most"),
        C("run cpi-toy --threads 100000", 2, "--threads: must be at most"),
        C("run cpi-toy --set workers=100000", 2, "'workers': must be at most 256"),
        C("run inversion-tiny --set sft.scheduler=bogus", 2, "'sft.scheduler': unknown"),
        C("run inversion-smollm2 --set sft.scheduler=bogus", 2, "'sft.scheduler': unknown"),
        C("run inversion-tiny --set sft.optim=adamw_bnb_8bit", 2, "'sft.optim'"),
    ],
    "unclear": [
        C(f"{EVAL.replace('items.jsonl', 'longctx.jsonl')}", 2,
          "item longctx-0000: the prompt is"),
    ],
    "resume identity": [
        C("sft --resume --run-dir fx/ok/cpi-toy/1", 2,
          "this is a `cpi-toy` run, not a `sft` run"),
        C("run cpi-toy --resume --run-dir fx/sftck/sft/1", 2,
          "this is a `sft` run, not a `cpi-toy` run"),
        C("run ocr-toy --resume --run-dir fx/ok/cpi-toy/1", 2, "continue it with `knowflow run "
          "cpi-toy --resume"),
    ],
}

CLASS_CASES = {name: [dataclasses.replace(c, klass=name) for c in cs]
               for name, cs in CLASS_CASES.items()}
CASES = (EVAL_CASES + SFT_CASES + CURATE_CASES + AUGMENT_CASES + PROBE_CASES
         + ANSWER_TEXT_CASES + OPTION_CASES + MODEL_CASES + RUN_CASES
         + REPORT_CASES + CONFIG_CASES + [c for cs in CLASS_CASES.values() for c in cs])


def by_command_and_class() -> dict[str, dict[str, int]]:
    """{command: {class: cases}} (the general cases, which carry no class, count as "earlier")."""
    table: dict[str, dict[str, int]] = {}
    for case in CASES:
        row = table.setdefault(case.command, {})
        name = case.klass or "earlier"
        row[name] = row.get(name, 0) + 1
    return table
