"""Rerun the examples the README and docs show, and rewrite their output blocks.

    python benchmarks/docs_examples.py            # rerun the fast examples, rewrite the docs
    python benchmarks/docs_examples.py --check    # rerun, change nothing, exit 1 on a difference
    python benchmarks/docs_examples.py --slow     # the slow ones too (minutes to hours)
    python benchmarks/docs_examples.py --list     # which blocks, fast or slow

An example is a fenced block right after a marker line in a Markdown file:
`<!-- docs-example: fast -->` or `<!-- docs-example: slow -->`. A shell block holds `$ knowflow
...` lines (a `\\` continues one); each command runs (in a fresh temporary folder, the
project's `.venv/bin` first on PATH, 150 columns) and its output replaces the lines up to the
next `$` line. A `python` block is run statement by statement as a notebook would: the value of
an expression statement and what a statement prints become the `# ` lines right after it (floats
rounded to 3 places; the comment lines after a statement are output and are rewritten; a
comment of the author's goes on the statement's own line or after a blank line).

Timings (`12.3 s`, `0.5 s/it`), run folders' timestamps and temporary paths are masked when
outputs are compared, so `--check` fails only on a real difference. `make docs-examples` runs
the fast ones; tests/test_docs_examples.py (slow) runs `--check`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import io
import os
import pprint
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- docs-example: (fast|slow) -->\s*$")
WIDTH = 150
_MASKS = ((re.compile(r"\d+(\.\d+)?\s?(s|ms|min|s/it|it/s)\b"), "<time>"),
          (re.compile(r"\d{8}-\d{6}"), "<timestamp>"),
          (re.compile(r"/tmp/[\w./-]+"), "<tmp>"))


def mask(text: str) -> str:
    """`text` with timings, timestamps and temporary paths replaced."""
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return text


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(text: str) -> list[tuple[str, int, int, str]]:
    """(speed, first line, end line (exclusive), language) of each marked fenced block."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        found = MARKER.match(line)
        if found and i + 1 < len(lines) and lines[i + 1].startswith("```"):
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            out.append((found.group(1), i + 2, end, lines[i + 1][3:].strip()))
    return out


def run_shell(body: list[str], cwd: Path) -> list[str]:
    """The block with each `$` command's output rerun."""
    out, i = [], 0
    env = {**os.environ, "COLUMNS": str(WIDTH), "PATH": f"{ROOT / '.venv' / 'bin'}:"
           f"{os.environ.get('PATH', '')}", "NO_COLOR": "1", "TERM": "dumb"}
    while i < len(body):
        if not body[i].startswith("$ "):
            i += 1
            continue
        command = [body[i]]
        while command[-1].endswith("\\") and i + 1 < len(body):
            i += 1
            command.append(body[i])
        i += 1
        while i < len(body) and not body[i].startswith("$ "):
            i += 1  # the old output
        shell = "\n".join(command)[2:]
        done = subprocess.run(["bash", "-c", shell], cwd=cwd, env=env, capture_output=True,
                              text=True, check=False)
        out += command + (done.stdout + done.stderr).rstrip("\n").split("\n")
    return out


def _rounded(value):
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_rounded(v) for v in value)
    return value


def _comment(text: str) -> list[str]:
    lines = text.rstrip("\n").split("\n")
    return ["# " + line for line in lines]


def run_python(body: list[str], cwd: Path) -> list[str]:
    """The block with each statement's output comments rerun."""
    code = [line for k, line in enumerate(body)
            if not (line.startswith("#") and _is_output(body, k))]
    tree = ast.parse("\n".join(code))
    namespace: dict = {"__name__": "__docs__"}
    out: list[str] = []
    old = os.getcwd()
    os.chdir(cwd)
    try:
        for node in tree.body:
            out += code[node.lineno - 1:node.end_lineno]
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                if isinstance(node, ast.Expr):
                    value = eval(compile(ast.Expression(node.value), "<docs>", "eval"), namespace)
                    if value is not None:
                        print(pprint.pformat(_rounded(value), width=96, sort_dicts=False,
                                             compact=True))
                else:
                    exec(compile(ast.Module([node], []), "<docs>", "exec"), namespace)
            if buf.getvalue().strip():
                out += _comment(buf.getvalue())
            gap = node.end_lineno
            while gap < len(code) and not code[gap].strip():
                out.append("")
                gap += 1
    finally:
        os.chdir(old)
    return out


def _is_output(body: list[str], k: int) -> bool:
    """A comment line right after a statement (or after another output line) is output."""
    j = k - 1
    while j >= 0 and body[j].startswith("#"):
        j -= 1
    return j >= 0 and bool(body[j].strip())


def regenerate(path: Path, speeds: set[str]) -> str:
    text = path.read_text()
    lines = text.split("\n")
    for speed, start, end, lang in reversed(blocks(text)):
        if speed not in speeds:
            continue
        with tempfile.TemporaryDirectory(prefix="kf-docs-") as tmp:
            runner = run_python if lang == "python" else run_shell
            lines[start:end] = runner(lines[start:end], Path(tmp))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, change nothing")
    parser.add_argument("--slow", action="store_true", help="the slow examples too")
    parser.add_argument("--list", action="store_true", help="list the examples")
    args = parser.parse_args(argv)
    speeds = {"fast", "slow"} if args.slow else {"fast"}
    differ = 0
    for path in doc_files():
        text = path.read_text()
        found = blocks(text)
        if args.list:
            for speed, start, _, lang in found:
                print(f"{speed:4}  {path.relative_to(ROOT)}:{start}  {lang or 'shell'}")
            continue
        if not any(speed in speeds for speed, *_ in found):
            continue
        new = regenerate(path, speeds)
        if mask(new) == mask(text):
            continue
        if args.check:
            differ += 1
            sys.stdout.writelines(difflib.unified_diff(
                mask(text).splitlines(True), mask(new).splitlines(True),
                str(path.relative_to(ROOT)), "rerun"))
        else:
            path.write_text(new)
            print(f"rewrote {path.relative_to(ROOT)}")
    if not args.slow and not args.list:
        slow = [f"{p.relative_to(ROOT)}:{b[1]}" for p in doc_files()
                for b in blocks(p.read_text()) if b[0] == "slow"]
        print(f"skipped {len(slow)} slow example(s) (--slow runs them): {', '.join(slow)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
