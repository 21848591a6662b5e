"""Fault injection over every writing command: nothing is ever half-written.

For each command (eval, probe, explain, run, sft, curate, augment, export, report; report on a
RelianceTracker's folder, `explain fit`'s estimator in the model cache, and a hub dataset's
entry in the datasets cache, `knowflow.data.hub_cache`, run as a function), each fault
(ENOSPC, an exception, SIGTERM) and each of the first N writes through `knowflow.store.files`
(all of them with --n 0), the command runs in-process (typer's CliRunner) with the fault injected at
that write: `knowflow.store.files.fill`, the one function that writes output bytes, is patched to
raise OSError(ENOSPC) or RuntimeError instead of writing, or to send the process SIGTERM once
the bytes are written (before the rename). The target then must be either untouched (byte for
byte what was there before: for the --out commands an earlier complete output of the same
command, which a failed rewrite must keep) or a run marked `"in_progress"` in its `run.json`
that `--resume` completes to the same records as an uninterrupted run.

    python benchmarks/faults/fault_matrix.py [--n 6] [--only eval,sft] [--keep DIR]

One row per command x fault x write index, then `cells: N`, `resumable runs: K, resumed to
identical records: M` and `partial folders: N` (the goal: 0). A tiny random Llama (no
download); tests/test_faults.py runs a few cells of the same code.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import signal
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

FAULTS = ("enospc", "exception", "sigterm")


class Command(NamedTuple):
    """A writing command: its argv ({root}: the cell's folder, {model}: the tiny model), the
    target it writes (relative to {root}), its records file, and for a resumable command the
    argv that continues a kept run ({run}: the run folder)."""

    argv: tuple[str, ...]
    target: str
    records: str
    resume: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()  # record fields that a resume legitimately changes
    inputs: tuple[str, ...] = ("items.jsonl", "train.jsonl", "context.txt")  # from setup()
    env: tuple[tuple[str, str], ...] = ()  # environment variables ({root}: the cell's folder)


SFT_SET = ("--set", "sft.save_every=2", "--set", "sft.save_limit=null")
HUB_CACHE = "lay_out_hub_dataset"  # argv[0] of the writer run as a function, not a command
COMMANDS: dict[str, Command] = {
    "eval": Command(("eval", "--model", "{model}", "--data", "{root}/items.jsonl", "--out",
                     "{root}/out", "--scoring", "loglik", "--batch-size", "4"),
                    "out", "items.jsonl"),
    "probe": Command(("probe", "knockout", "--model", "{model}", "--limit", "2", "--all",
                      "--window", "1", "--out", "{root}/out"), "out", "records.jsonl"),
    "explain": Command(("explain", "--model", "{model}", "--context", "{root}/context.txt",
                        "--question", "Where is Paris?", "--ablations", "8", "--holdout", "4",
                        "--out", "{root}/out"), "out", "records.jsonl"),
    "run": Command(("run", "cpi-toy", "--runs-dir", "{root}/runs", "--set", "workers=1",
                    "--set", "parts=inversion", "--set", "finetune.steps=40", "--set",
                    "finetune.eval_every=10", "--set", "world.n_test=5"),
                   "runs", "metrics.jsonl", ("run", "cpi-toy", "--resume", "--run-dir", "{run}")),
    "sft": Command(("sft", "--model", "{model}", "--data", "{root}/train.jsonl", "--steps", "4",
                    "--batch-size", "2", "--track", "cf-capitals", "--track-every", "2",
                    "--track-limit", "2", "--max-length", "256", *SFT_SET, "--runs-dir",
                    "{root}/runs"), "runs", "metrics.jsonl",
                   ("sft", "--resume", "--run-dir", "{run}"), ignore=("train_loss",)),
    "curate": Command(("curate", "--model", "{model}", "--data", "{root}/train.jsonl", "--out",
                       "{root}/kept.jsonl", "--drop", "0.5"), "kept.jsonl", "kept.jsonl"),
    "augment": Command(("augment", "--data", "{root}/train.jsonl", "--out", "{root}/aug.jsonl",
                        "--ratio", "0.5"), "aug.jsonl", "aug.jsonl"),
    "export": Command(("export", "lm-eval", "--data", "{root}/items.jsonl", "--out",
                       "{root}/tasks", "--prompt-format", "plain"), "tasks", "tasks"),
    "report": Command(("report", "{root}/ran", "--out", "{root}/page.html"), "page.html",
                      "page.html"),
    # a RelianceTracker's folder (metrics.jsonl alone): report draws figures/ into it and
    # writes its report.html; a fault leaves it holding its metrics.jsonl alone
    "report-tracker": Command(("report", "{root}/trk"), "trk", "report.html",
                              inputs=("trk",)),
    # the learned estimator, written into the model cache ($KNOWFLOW_CACHE/models/)
    "explain-fit": Command(("explain", "fit", "--model", "{model}", "--contexts", "4",
                            "--ablations", "8"), "cache", "models",
                           env=(("KNOWFLOW_CACHE", "{root}/cache"),)),
    # a hub dataset's entry in the datasets cache (what a download leaves there; tests and
    # demos lay one out with knowflow.data.hub_cache), a writer with no command of its own
    "hub-cache": Command((HUB_CACHE, "{root}/hf"), "hf",
                         "datasets/org___name/default/0.0.0/" + "0" * 16),
}
# what each --out command finds at its target before the faulted run: its own earlier output
REWRITES = ("eval", "probe", "explain", "curate", "augment", "export", "report")


class Injected(RuntimeError):
    """The exception fault."""


@contextmanager
def inject(fault: str | None, at: int):
    """Patch `knowflow.store.files.fill` so that write number `at` (1-based) fails with `fault`;
    yields a one-item list counting the writes."""
    import knowflow.store.files as kio

    real, count = kio.fill, [0]

    def fill(fd: int, data: bytes, path: Path) -> None:
        count[0] += 1
        if count[0] != at or fault is None:
            return real(fd, data, path)
        if fault == "sigterm":
            real(fd, data, path)  # the bytes are out; the signal lands before the rename
            os.kill(os.getpid(), signal.SIGTERM)
            return None
        os.close(fd)
        if fault == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        raise Injected(f"injected fault at write {at} ({path.name})")

    kio.fill = fill
    try:
        yield count
    finally:
        kio.fill = real


class Ran(NamedTuple):
    exit_code: int
    output: str


def invoke(argv: list[str], env: dict[str, str] | None = None):
    """Run a command in-process (CliRunner), or the hub cache writer as a function: exit 0,
    2 for an OSError or an exception, 143 for SIGTERM, as the CLI's boundary would end it."""
    if argv[0] == HUB_CACHE:
        return _lay_out(Path(argv[1]))
    from typer.testing import CliRunner

    from knowflow.cli import app

    return CliRunner().invoke(app, argv, env=env)


def _lay_out(hf_home: Path) -> Ran:
    from knowflow.data.hub_cache import lay_out_hub_dataset
    from knowflow.errors import Terminated

    def terminated(signum, frame):
        raise Terminated()

    rows = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(3)]
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        lay_out_hub_dataset(hf_home, "org/name", {"train": rows[:2], "test": rows})
        return Ran(0, "")
    except Terminated:
        return Ran(143, "terminated")
    except (OSError, Injected) as exc:
        return Ran(2, f"error: {exc}")
    finally:
        signal.signal(signal.SIGTERM, previous)


def fill_args(argv, **values) -> list[str]:
    return [a.format(**values) for a in argv]


def fill_env(cmd: Command, root: Path) -> dict[str, str]:
    return {name: value.format(root=root) for name, value in cmd.env}


def copy_inputs(base: Path, root: Path, names: tuple[str, ...]) -> None:
    for name in names:
        if (base / name).is_dir():
            shutil.copytree(base / name, root / name)
        else:
            shutil.copy2(base / name, root / name)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (hidden ones too) with its bytes (None: a folder)."""
    return {str(p.relative_to(root)): None if p.is_dir() and not p.is_symlink() else
            p.read_bytes() if p.is_file() else b"->" + os.readlink(p).encode()
            for p in sorted(root.rglob("*"))}


def records(path: Path, ignore: tuple[str, ...] = ()) -> object:
    """A run's records (or an output file, or a folder's files) with wall-clock fields left
    out and floats rounded, for comparing two runs."""
    def clean(value):
        if isinstance(value, float):
            return round(value, 6)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if "seconds" not in k
                    and k not in ignore}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    if path.is_dir():
        return {p.name: p.read_bytes() for p in sorted(path.iterdir())}
    if path.suffix != ".jsonl":
        return path.read_bytes()
    return [clean(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def setup(base: Path) -> Path:
    """The inputs every cell copies: a tiny model, items, instruction rows, a context."""
    from helpers import byte_tokenizer, save_model_folder, tiny_llama

    base.mkdir(parents=True, exist_ok=True)
    tok = byte_tokenizer()
    save_model_folder(base / "model", tiny_llama(tok), tok)
    items = [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the "
              f"capital of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"}
             for i in range(4)]
    rows = [{"instruction": f"Question: Where does Vol{i} live?", "input": f"Vol{i} lives in "
             f"Kem{i}.", "output": f"Kem{i}", "kind": "C+S" if i % 2 else "C"} for i in range(8)]
    (base / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    (base / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (base / "context.txt").write_text("Paris is in France. The sky is blue. Rome is in Italy.\n")
    (base / "trk").mkdir()
    (base / "trk" / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "cf_acc": acc, "n": 8}) + "\n"
        for step, acc in ((0, 0.3), (10, 0.6), (20, 0.4))))
    return base / "model"


class Matrix:
    """The inputs, each command's uninterrupted reference, and the rows run so far."""

    def __init__(self, base: Path, model: Path):
        self.base, self.model = base, model
        self.reference: dict[str, tuple[Path, int, object]] = {}
        self.rows: list[tuple[str, str, int, int, str]] = []

    def workspace(self, name: str, where: Path) -> Path:
        root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=where))
        copy_inputs(self.base, root, COMMANDS[name].inputs)
        if name == "report":  # its input: a finished eval run
            shutil.copytree(self.ref(where, "eval")[0] / "out", root / "ran")
        if name in REWRITES:  # an earlier complete output of the same command
            done = self.ref(where, name)[0] / COMMANDS[name].target
            if done.is_dir():
                shutil.copytree(done, root / done.name)
            for path in done.parent.glob(f"{done.stem}.*") if done.is_file() else ():
                shutil.copy2(path, root / path.name)  # curate's scores and figure too
        return root

    def ref(self, where: Path, name: str) -> tuple[Path, int, object]:
        """(folder, writes, records) of an uninterrupted run of `name`."""
        if name not in self.reference:
            root = Path(tempfile.mkdtemp(prefix=f"ref-{name}-", dir=where))
            cmd = COMMANDS[name]
            copy_inputs(self.base, root, cmd.inputs)
            if name == "report":
                shutil.copytree(self.ref(where, "eval")[0] / "out", root / "ran")
            with inject(None, 0) as count:
                res = invoke(fill_args(cmd.argv, root=root, model=self.model),
                             fill_env(cmd, root))
            assert res.exit_code == 0, f"{name}: {res.output}"
            self.reference[name] = (root, count[0], records(self.output(root, cmd), cmd.ignore))
        return self.reference[name]

    @staticmethod
    def output(root: Path, cmd: Command) -> Path:
        target = root / cmd.target
        if cmd.resume:  # runs/<experiment>/<timestamp>
            (run,) = [p for p in target.iterdir() if not p.name.startswith(".")]
            (run,) = [p for p in run.iterdir() if not p.name.startswith(".")]
            return run / cmd.records
        return target / cmd.records if target.is_dir() and cmd.records != cmd.target else \
            target

    def cell(self, where: Path, name: str, fault: str, at: int) -> str:
        """Run one cell; returns its outcome: untouched, resumed-equal, resumed-DIFFERENT,
        PARTIAL (...) or no-fault (the command made fewer writes)."""
        cmd, (_, _, expected) = COMMANDS[name], self.ref(where, name)
        root = self.workspace(name, where)
        before = snapshot(root)
        with inject(fault, at) as count:
            res = invoke(fill_args(cmd.argv, root=root, model=self.model), fill_env(cmd, root))
        outcome = "no-fault" if count[0] < at else self.judge(root, before, cmd, expected) \
            if res.exit_code != 0 else "exit 0 despite the fault"
        self.rows.append((name, fault, at, res.exit_code, outcome))
        return outcome

    def judge(self, root: Path, before: dict, cmd: Command, expected) -> str:
        after = snapshot(root)
        if after == before:
            return "untouched"
        changed = sorted(set(after.items()) ^ set(before.items()))
        kept = [root / p for p, _ in changed if (root / p / "run.json").is_file()]
        if not cmd.resume or len(kept) != 1 or \
                json.loads((kept[0] / "run.json").read_text()).get("in_progress") is not True \
                or any(not (root / p).is_relative_to(kept[0]) and p not in
                       (cmd.target, str(kept[0].parent.relative_to(root)))
                       for p, _ in changed):
            return f"PARTIAL ({', '.join(sorted({p for p, _ in changed})[:4])})"
        res = invoke(fill_args(cmd.resume, run=kept[0]))
        if res.exit_code != 0:
            return f"resume failed: {res.output.strip()[-200:]}"
        got = records(kept[0] / cmd.records, cmd.ignore)
        return "resumed-equal" if got == expected else "resumed-DIFFERENT"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=6, help="first N writes (0: every write)")
    parser.add_argument("--only", default="", help="commands, comma-separated")
    parser.add_argument("--keep", type=Path, help="keep the cells' folders here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    where = args.keep or Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    matrix = Matrix(where / "inputs", setup(where / "inputs"))
    names = [n for n in args.only.split(",") if n] or list(COMMANDS)
    print("command | fault | write | exit | outcome")
    for name in names:
        writes = matrix.ref(where, name)[1]
        for fault in FAULTS:
            for at in range(1, (min(args.n, writes) if args.n else writes) + 1):
                outcome = matrix.cell(where, name, fault, at)
                print(f"{name} | {fault} | {at}/{writes} | {matrix.rows[-1][3]} | {outcome}",
                      flush=True)
    outcomes = [row[4] for row in matrix.rows]
    resumed = [o for o in outcomes if o.startswith("resume")]
    print(f"cells: {len(outcomes)} (untouched {outcomes.count('untouched')}, resumable "
          f"{len(resumed)})")
    print(f"resumable runs: {len(resumed)}, resumed to identical records: "
          f"{outcomes.count('resumed-equal')}")
    print(f"partial folders: {sum(o.startswith('PARTIAL') for o in outcomes)}")
    if args.keep is None:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
