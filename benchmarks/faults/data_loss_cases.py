"""Data-loss and trust cases of the writing commands: each prints the command, its
exit code, its one line, and whether the files that were there before are byte-for-byte still
there; the trust cases (a model folder's own code: an auto_map with stdin answering "y", a
pickle as weights) also say whether the code ran (a marker file it would write).

    python benchmarks/faults/data_loss_cases.py [--keep DIR]

Runs the `knowflow` CLI in subprocesses on a tiny random Llama (no download; about a minute on
two CPU threads). Never touches a real device node: the non-regular output is a FIFO.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXE = str(Path(sys.executable).parent / "knowflow")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))


def _setup(root: Path) -> None:
    from conftest import byte_tokenizer, tiny_llama

    tok = byte_tokenizer()
    model = tiny_llama(tok)
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    items = [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the "
              f"capital of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"}
             for i in range(8)]
    (root / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    rows = [{"instruction": f"Question: Where does Vol{i} live?", "input": f"Vol{i} lives in "
             f"Kem{i}.", "output": f"Kem{i}"} for i in range(8)]
    (root / "x.scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "good.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".knowflow.lock"}


def _go(args: list[str], cwd: Path, env: dict | None = None) -> tuple[int, str]:
    res = subprocess.run([EXE, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                         env={**os.environ, **(env or {})})
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    return res.returncode, (lines[-1] if lines else "(exit 0)")


def _report(name: str, code: int, line: str, kept: bool) -> None:
    print(f"- {name}\n  exit {code}: {line[:230]}\n  files there before kept unchanged: "
          f"{'yes' if kept else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="kf-dataloss-"))
    root.mkdir(parents=True, exist_ok=True)
    _setup(root)
    m = ["--model", "model"]
    ev = ["eval", *m, "--data", "items.jsonl", "--scoring", "loglik", "--no-known-filter"]

    def case(name, argv, folder, cwd=root, env=None):
        before = _files(folder)
        code, line = _go(argv, cwd, env)
        _report(name, code, line, _files(folder) == before)

    mine = root / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"the user\'s": "own config"}\n')
    case("eval --out DIR, DIR holding the user's config.json", [*ev, "--out", "mine"], mine)
    case("probe knockout --out DIR, same DIR",
         ["probe", "knockout", *m, "--limit", "2", "--window", "1", "--out", "mine"], mine)
    code, _ = _go(["run", "cpi-toy", "--set", "workers=1", "--set", "parts=inversion",
                   "--set", "finetune.steps=40", "--set", "finetune.eval_every=20",
                   "--runs-dir", "runs"], root)
    (run,) = (root / "runs" / "cpi-toy").iterdir()
    case("eval --out runs/cpi-toy/<ts> (another command's run)",
         [*ev, "--out", str(run.relative_to(root))], run)
    case("eval --out . (the current folder, not a run)", [*ev, "--out", "."], root)
    case("report RUN --out RUN/config.json", ["report", str(run), "--out",
                                              str(run / "config.json")], run)
    case("curate --out kept.png (the histogram's own name)",
         ["curate", *m, "--data", "good.jsonl", "--out", "kept.png"], root)
    case("curate --data x.scores.jsonl --out x.jsonl (the scores file is the input)",
         ["curate", *m, "--data", "x.scores.jsonl", "--out", "x.jsonl"], root)
    os.mkfifo(root / "pipe")
    case("augment --out pipe (a FIFO: not a regular file)",
         ["augment", "--data", "good.jsonl", "--out", "pipe"], root)

    # resume must keep the user's hidden folders
    (run / "summary.json").unlink()
    for rel in (".git/HEAD", ".ipynb_checkpoints/a.ipynb"):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text("mine")
    code, line = _go(["run", "cpi-toy", "--resume", "--run-dir", str(run)], root)
    kept = (run / ".git/HEAD").exists() and (run / ".ipynb_checkpoints/a.ipynb").exists()
    _report("run cpi-toy --resume --run-dir RUN holding .git and .ipynb_checkpoints", code,
            line, kept)
    code, line = _go(["sft", "--resume", "--run-dir", str(run)], root)
    print(f"- sft --resume --run-dir <a cpi-toy run>\n  exit {code}: {line[:230]}")

    probe = subprocess.run([sys.executable, "-c", "from knowflow.lens.load import cache_dir; "
                            "print(cache_dir())"], cwd=root, capture_output=True, text=True,
                           env={**os.environ, "KNOWFLOW_CACHE": ""})
    where = probe.stdout.strip()
    print(f"- KNOWFLOW_CACHE= (set but empty)\n  cache folder: {where} (the current folder: "
          f"{'YES' if Path(where).resolve() == root.resolve() else 'no'})")
    (root / "cachefile").write_text("a file")
    code, line = _go(["eval", "--data", "items.jsonl", "--out", "c1"], root,
                     env={"KNOWFLOW_CACHE": str(root / "cachefile")})
    _report("KNOWFLOW_CACHE pointing at a file (SmolLM2 not converted there)", code, line,
            not (root / "c1").exists())

    # two evals into one --out at once
    procs = [subprocess.Popen([EXE, *ev, "--limit", str(n), "--out", "both"], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for n in (3, 5)]
    outcomes = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    config = json.loads((root / "both" / "config.json").read_text())
    n_items = sum(1 for line in (root / "both" / "items.jsonl").read_text().splitlines() if line)
    refused = [e.splitlines()[-1] for c, e in outcomes if c != 0]
    print(f"- two evals (--limit 3 and 5) into one --out at once\n  exit codes "
          f"{[c for c, _ in outcomes]}; refused: {refused or 'none'}\n  folder consistent "
          f"(config limit {config['limit']}, {n_items} item rows): "
          f"{'yes' if config['limit'] == n_items else 'NO'}")

    # Ctrl-C in eval --out DIR where DIR was an earlier eval of the user's: nothing lost
    first = root / "again"
    _go([*ev, "--out", "again"], root)
    (first / "notes-inside.txt").write_text("not a run file")
    before = _files(first)
    proc = subprocess.Popen([EXE, *ev, "--scoring", "both", "--out", "again"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=120)
    err = [line for line in proc.stderr.read().splitlines() if line.strip()]
    after = _files(first)
    lost = [k for k in before if k not in after]
    print(f"- Ctrl-C during eval --out DIR (DIR: an earlier eval plus a file of the user's)\n"
          f"  exit {code}: {err[-1][:200] if err else ''}\n  files lost: {lost or 'none'}")
    _runs_and_trust(root, m, ev, case)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)


def _trust_folders(root: Path) -> dict[str, Path]:
    """Copies of the tiny model whose files would run code: a config.json auto_map (a model
    type transformers lacks), a tokenizer_config.json auto_map (a tokenizer class it lacks),
    and weights only as a pickle whose unpickling writes the marker."""
    import pickle

    marker = root / "code-ran.txt"
    code = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    made = {}
    for name in ("remote-config", "remote-tokenizer", "pickle"):
        made[name] = root / name
        shutil.copytree(root / "model", made[name])
    folder = made["remote-config"]
    (folder / "custom.py").write_text(code + "from transformers import LlamaConfig\n"
                                      "class C(LlamaConfig):\n    model_type = 'kf-custom'\n")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="kf-custom", auto_map={"AutoConfig": "custom.C"})
    (folder / "config.json").write_text(json.dumps(config))
    folder = made["remote-tokenizer"]
    (folder / "custom.py").write_text(code + "from transformers import PreTrainedTokenizerFast"
                                      "\nclass T(PreTrainedTokenizerFast):\n    pass\n")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="T", auto_map={"AutoTokenizer": [None, "custom.T"]})
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    folder = made["pickle"]
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    return made


class _Payload:
    """Unpickling it writes the marker (what a malicious pytorch_model.bin would do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "the pickle ran"))


def _runs_and_trust(root: Path, m: list[str], ev: list[str], case) -> None:
    """Outputs recognised as runs only by run.json, every writer (CLI and
    API) through the one output check, and no code from a model folder."""
    print("\n## run folders, every writer, a model folder's code")
    for parent, argv in (("eval", ev), ("probe-knockout", ["probe", "knockout", *m, "--limit",
                                                            "2", "--window", "1"]),
                         ("explain", ["explain", *m, "--context", "Zorb is the capital. It is old.",
                                      "--question", "What is the capital?"])):
        mine = root / parent / "mine"
        mine.mkdir(parents=True)
        (mine / "config.json").write_text('{"the user\'s": "own config"}\n')
        (mine / "summary.json").write_text('{"the user\'s": "own summary"}\n')
        case(f"{argv[0]} --out {parent}/mine (the user's config.json and summary.json, no "
             "run.json)", [*argv, "--out", f"{parent}/mine"], mine)
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "knowflow_lmeval_loader.py").write_text("# the user's own loader\n")
    case("export lm-eval --out tasks (the user's tasks/knowflow_lmeval_loader.py)",
         ["export", "lm-eval", "--out", "tasks", "--suite", "cf-capitals", "--limit", "2",
          "--prompt-format", "plain"], tasks)
    d = root / "d"
    d.mkdir()
    shutil.copy(root / "good.jsonl", d / "curated.jsonl")
    (d / "augmented.jsonl").write_text((root / "good.jsonl").read_text())
    api = [("knowflow.curate(m, 'd/curated.jsonl').save('d')",
            "knowflow.curate('model', 'd/curated.jsonl').save('d')"),
           ("knowflow.augment('good.jsonl').save('d') (d holds the user's augmented.jsonl)",
            "knowflow.augment('good.jsonl').save('d')"),
           ("knowflow.curate(m, 'd/curated.jsonl').write('d/curated.jsonl')",
            "knowflow.curate('model', 'd/curated.jsonl').write('d/curated.jsonl')")]
    for name, call in api:
        before = _files(d)
        res = subprocess.run([sys.executable, "-c", "import knowflow\ntry:\n    " + call +
                              "\nexcept knowflow.KnowflowError as e:\n    print('error:', e)"
                              "\n    raise SystemExit(2)"], cwd=root, capture_output=True,
                             text=True, timeout=600)
        said = [line for line in res.stdout.splitlines() if line.startswith("error:")]
        _report(name, res.returncode, said[-1] if said else res.stderr.strip()[-200:],
                _files(d) == before)
    marker = root / "code-ran.txt"
    for name, folder in _trust_folders(root).items():
        res = subprocess.run([EXE, *ev[:1], "--model", str(folder), *ev[3:], "--out",
                              f"trust-{name}"], cwd=root, input="y\ny\ny\n",
                             capture_output=True, text=True, timeout=600)
        lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
        print(f"- echo y | knowflow eval --model <{name}>\n  exit {res.returncode}: "
              f"{(lines[-1] if lines else '(no error line)')[:230]}\n  the folder's code "
              f"ran (marker written): {'YES' if marker.exists() else 'no'}; output written: "
              f"{'YES' if (root / f'trust-{name}').exists() else 'no'}")


if __name__ == "__main__":
    main()
