"""Rerun the examples the README and docs show, and rewrite their output blocks.

    python benchmarks/docs/docs_examples.py          # rerun the fast examples, rewrite the docs
    python benchmarks/docs/docs_examples.py --check  # rerun, change nothing, exit 1 on a difference
    python benchmarks/docs/docs_examples.py --slow   # the slow ones too (minutes to hours)
    python benchmarks/docs/docs_examples.py --list   # which blocks, fast or slow
    python benchmarks/docs/docs_examples.py --ran-in DIR FILE.md   # the slow blocks of FILE.md
                             # already ran in DIR: keep their output, take figures and tables
    python benchmarks/docs/docs_examples.py --slow --keep DIR FILE.md   # run in DIR/FILE (kept,
                             # for numbers the page quotes from the run's files)

An example is a fenced block right after a marker line in a Markdown file:
`<!-- docs-example: fast -->` (under about a minute of CPU: SmolLM2-135M or a tiny model, few
items, one thread) or `<!-- docs-example: slow -->`. A shell block holds `$ knowflow ...`
lines (a `\\` continues one); each command runs (in a fresh temporary folder that links the
checkout's `benchmarks/` and `tests/`, so a command reads as typed in the checkout; the
project's `.venv/bin` first on PATH, 150 columns) and its output replaces the lines up to the
next `$` line. A command that exits non-zero stops the script (file, line, the output's tail)
unless the command shows its exit code itself (`...; echo "exit $?"`), as a bad-input example
does; a traceback in any output stops it too, so a broken example is never written into a
page. `<!-- docs-file: NAME -->` before a fenced block writes that block's text to NAME in
the page's folder before the next example runs: the file a tutorial asks the reader to save
(`make_tiny.py`), the malformed file an error example reads; `<!-- docs-file: NAME < PAGE.md -->`
(no block) writes the file PAGE.md saves under that name, for a page whose commands use a file
another page makes (the tutorial's `make_tiny.py`).

A `python` block is run statement by statement as a notebook would: the value of
an expression statement and what a statement prints become the `# ` lines right after it (floats
rounded to 3 places; the comment lines after a statement are output and are rewritten; a
comment of the author's goes on the statement's own line or after a blank line).

The blocks of one file share a working folder, so a later block can read an earlier one's
run. Three more markers make the rest of a page regenerate from the run folder the last block
above names (its `run directory:` or `results:` line):
`<!-- docs-figure: figures/x.png -> docs/img/y.png -->` copies that run's figure into the docs;
`<!-- docs-table: NAME summary.json -->` rebuilds the Markdown table below it from that run's
file (NAME is one of `TABLES`); `<!-- docs-excerpt: FILE keep=REGEX -->` before a fenced block
rebuilds it from FILE's first example with an output line REGEX matches: its `$` lines and
those output lines, `...` for each gap (the README's headline is an excerpt of its experiment
page; report.md's overlay, of the tutorial's last block).

Every fenced block that shows a `$` command and its output carries one of these markers
(tests/test_docs.py checks it), except on docs/findings/ pages: those are dated benchmark
records, numbers measured at one time, commit and machine load by a benchmarks/ script, often
for many minutes. Rerunning them would replace a record with another measurement, not correct
it, so they are exempt; each of their output blocks carries
`<!-- docs-record: YYYY-MM-DD, COMMIT, MACHINE -->` instead (when, at which commit and where it
ran), which this script leaves alone.

Timings (`12.3 s`, `0.5 s/it`, `0:00:08`), run folders' timestamps and temporary paths are
masked when outputs are compared, so `--check` fails only on a real difference (a figure
differs when its bytes do). `make docs-examples` runs the fast ones;
tests/test_docs_examples.py (slow) runs `--check`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import io
import json
import os
import pprint
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- docs-(example|figure|table|excerpt|file|record): (.+?) -->\s*$")
RUN_LINE = re.compile(r"^(run directory|results): (\S+)")
WIDTH = 150
_MASKS = ((re.compile(r"\d+(\.\d+)? ?[a-z]+/s\b"), "<rate>"),  # tqdm's `333.91 examples/s`
          (re.compile(r"\d+(\.\d+)?\s?(s|ms|min|s/it|it/s)\b"), "<time>"),
          (re.compile(r"\b\d+:\d\d:\d\d\b"), "<time>"),
          (re.compile(r"\b\d+:\d\d<\d+:\d\d\b"), "<time>"),  # tqdm's elapsed<left
          (re.compile(r"'train_(runtime|samples_per_second|steps_per_second)': '[\d.e+-]+'"),
           "<time>"),  # the HF Trainer's closing log
          (re.compile(r"\d{8}-\d{6}"), "<timestamp>"),
          (re.compile(r"/tmp/[\w./-]+"), "<tmp>"))


TIME_COLUMNS = ("seconds",)  # rich-table columns that hold a timing


def _mask_time_columns(text: str) -> str:
    """The cells of a printed table's timing columns (`seconds`) replaced by `<time>`."""
    lines, spans = text.split("\n"), []
    for k, line in enumerate(lines):
        if line.startswith("┃"):
            bars = [i for i, c in enumerate(line) if c == "┃"]
            spans = [(a + 1, b) for a, b in zip(bars, bars[1:], strict=False)
                     if line[a + 1:b].strip() in TIME_COLUMNS] or spans
        elif line.startswith("│") and spans:
            for a, b in spans:
                if len(line) >= b and line[a:b].strip():
                    line = line[:a] + " <time>".ljust(b - a) + line[b:]
            lines[k] = line
        elif not line.startswith(("┡", "┏", "└")):
            spans = []
    return "\n".join(lines)


def mask(text: str) -> str:
    """`text` with timings (a table's `seconds` cells too), timestamps and temporary paths
    replaced."""
    text = _mask_time_columns(text)
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return text


def _name(path: Path) -> str:
    """`path` as the docs name it: relative to the checkout where it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(text: str) -> list[tuple[str, int, int, str]]:
    """(speed, first line, end line (exclusive), language) of each marked fenced block."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        found = MARKER.match(line)
        if found and found.group(1) == "example" and i + 1 < len(lines) \
                and lines[i + 1].startswith("```"):
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            out.append((found.group(2), i + 2, end, lines[i + 1][3:].strip()))
    return out


class ExampleFailed(SystemExit):
    """An example's command failed where the page does not show a failure."""


def saved_file(text: str, name: str, where: str) -> str:
    """The text of the block right after `text`'s first `<!-- docs-file: NAME -->` line."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        found = MARKER.match(line)
        if found and found.groups() == ("file", name) and k + 1 < len(lines) \
                and lines[k + 1].startswith("```"):
            end = next(j for j in range(k + 2, len(lines)) if lines[j].startswith("```"))
            return "\n".join(lines[k + 2:end]) + "\n"
    raise ExampleFailed(f"docs-file {where}: no fenced block saved as {name!r} follows a "
                        f"docs-file marker")


RECORD = re.compile(r"^(on or before )?\d{4}-\d\d-\d\d [0-9a-f]{7,40}, \S")
RECORD_PAGES = "docs/findings/"  # dated benchmark records: exempt from rerunning


def output_blocks(text: str) -> list[tuple[int, str | None, str]]:
    """(line of the fence, marker kind or None, marker argument) of each fenced block that
    is not python and shows a `$` command followed by output (a line that is neither a `$`
    line nor a command's `\\` continuation): what a reader takes for a command's output."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")),
                   len(lines))
        shown, continued = False, False
        for line in lines[i + 1:end]:
            if line.startswith("$ "):
                shown, continued = True, line.endswith("\\")
            elif continued:
                continued = line.endswith("\\")
            elif shown and line.strip():
                found = MARKER.match(lines[i - 1]) if i else None
                if lines[i][3:].strip() != "python":
                    out.append((i + 1, *(found.groups() if found else (None, ""))))
                break
        i = end + 1
    return out


def unmarked(path: Path) -> list[str]:
    """What is wrong with `path`'s output blocks: outside docs/findings/ each must be an
    example or an excerpt; on a findings page, a record that says when, at which commit and
    on which machine it ran."""
    name, problems = _name(path), []
    record = name.startswith(RECORD_PAGES)
    for line, kind, arg in output_blocks(path.read_text()):
        if record and not (kind == "record" and RECORD.match(arg)):
            problems.append(f"{name}:{line}: a findings block needs <!-- docs-record: "
                            f"YYYY-MM-DD COMMIT, MACHINE -->")
        elif not record and kind not in ("example", "excerpt"):
            problems.append(f"{name}:{line}: command output without a docs-example marker")
    return problems


def run_shell(body: list[str], cwd: Path, where: str = "<block>") -> list[str]:
    """The block with each `$` command's output rerun. `where` (FILE:LINE) names the block
    when a command fails unexpectedly or prints a traceback."""
    out, i = [], 0
    env = {**os.environ, "COLUMNS": str(WIDTH), "PATH": f"{ROOT / '.venv' / 'bin'}:"
           f"{os.environ.get('PATH', '')}", "NO_COLOR": "1", "TERM": "dumb",
           "PYTHONUNBUFFERED": "1"}
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
        done = subprocess.run(["bash", "-c", shell], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
        printed = done.stdout.rstrip("\n")
        shows_exit = "$?" in shell
        if (done.returncode and not shows_exit) or "Traceback (most recent call last)" in printed:
            tail = "\n".join(printed.split("\n")[-15:])
            raise ExampleFailed(f"docs-example {where}: `{shell}` exited {done.returncode}"
                                + ("" if shows_exit else " (show it with `; echo \"exit $?\"` "
                                   "if the failure is the example)") + f":\n{tail}")
        out += command + ([line.rstrip() for line in printed.split("\n")] if printed else [])
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


def _run_folder(output: list[str], cwd: Path) -> Path:
    """The run folder a block's output names (`run directory:` / `results:`), else `cwd`."""
    named = [m.group(2) for line in output if (m := RUN_LINE.match(line))]
    return cwd / named[-1] if named else cwd


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if not found:
        raise SystemExit(f"docs-example: nothing matches {pattern!r} in {folder}")
    return found[-1]


def _table_end(lines: list[str], start: int) -> int:
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return end


class Pass:
    """One pass over the docs: the rewritten texts, and the figures that differ."""

    def __init__(self, speeds: set[str], ran_in: Path | None, check: bool,
                 keep: Path | None = None):
        self.speeds, self.ran_in, self.check, self.keep = speeds, ran_in, check, keep
        self.texts: dict[Path, str] = {}
        self.figures_differ: list[str] = []

    def regenerate(self, path: Path) -> str:
        """`path`'s text with its examples rerun, figures copied and tables rebuilt. The
        blocks of one file share a working folder (a later block reads an earlier one's
        run); a figure or table marker reads the folder of the last block above it."""
        lines = path.read_text().split("\n")
        out: list[str] = []
        with contextlib.ExitStack() as stack:
            if self.keep is None:
                cwd = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kf-docs-")))
            else:  # a new folder per page, left in place
                cwd = self.keep / path.stem
                cwd.mkdir(parents=True)
            folder, i = None, 0  # folder: None until a block ran above
            for name in ("benchmarks", "tests"):
                (cwd / name).symlink_to(ROOT / name)
            while i < len(lines):
                found = MARKER.match(lines[i])
                out.append(lines[i])
                i += 1
                if not found:
                    continue
                kind, arg = found.groups()
                if kind == "example" and i < len(lines) and lines[i].startswith("```"):
                    end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                    body, lang = lines[i + 1:end], lines[i][3:].strip()
                    where = f"{_name(path)}:{i + 1}"
                    if arg == "slow" and self.ran_in is not None:
                        # run before, output as shown; its run folder, if it names one
                        named = _run_folder(body, self.ran_in)
                        folder = named if named != self.ran_in else None
                    elif arg in self.speeds:
                        body = (run_python(body, cwd) if lang == "python"
                                else run_shell(body, cwd, where))
                        folder = _run_folder(body, cwd)
                    else:
                        folder = None
                    out += [lines[i], *body, lines[end]]
                    i = end + 1
                elif kind == "file":
                    name, _, page = (part.strip() for part in arg.partition("<"))
                    text = (ROOT / page).read_text() if page else "\n".join(lines[i - 1:])
                    target = cwd / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(saved_file(text, name, f"{_name(path)}:{i}"))
                elif kind == "figure" and folder is not None:
                    source, dest = (part.strip() for part in arg.split("->"))
                    self.figure(_one(folder, source), ROOT / dest)
                elif kind == "table" and folder is not None:
                    name, pattern = arg.split(maxsplit=1)
                    end = _table_end(lines, i)
                    out += TABLES[name](json.loads(_one(folder, pattern).read_text()))
                    i = end
        return "\n".join(out)

    def figure(self, source: Path, dest: Path) -> None:
        if dest.exists() and dest.read_bytes() == source.read_bytes():
            return
        if self.check:
            self.figures_differ.append(str(dest.relative_to(ROOT)))
        else:
            shutil.copyfile(source, dest)
            print(f"copied {dest.relative_to(ROOT)}")

    def excerpts(self, path: Path, text: str) -> str:
        """`text` with each `docs-excerpt: FILE keep=REGEX` block rebuilt from FILE's first
        example with an output line REGEX matches: its `$` lines and those output lines, `...`
        for each gap."""
        lines = text.split("\n")
        for i in reversed(range(len(lines))):
            found = MARKER.match(lines[i])
            if not found or found.group(1) != "excerpt":
                continue
            name, keep = found.group(2).split(" keep=", 1)
            source = self.texts.get(ROOT / name) or (ROOT / name).read_text()
            src, rule, picked, gap = source.split("\n"), re.compile(keep), [], False
            start, end = next(
                ((b[1], b[2]) for b in blocks(source) if any(
                    rule.search(line) for line in src[b[1]:b[2]] if not line.startswith("$ "))),
                None) or (0, 0)
            if start == end:
                raise ExampleFailed(f"docs-excerpt in {_name(path)}: no example of "
                                    f"{name} has an output line {keep!r} matches")
            for line in src[start:end]:
                if line.startswith("$ ") or rule.search(line):
                    picked += ["..."] if gap and picked else []
                    picked.append(line)
                    gap = False
                else:
                    gap = True
            close = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            lines[i + 2:close] = picked
        return "\n".join(lines)


def _per_seed(summary: dict) -> list[str]:
    """inversion-tiny's per-seed rows: start, peak (step), final and fall of every arm."""
    rows = ["| arm | seed | start | peak | peak step | final | fall |",
            "|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        if arm not in summary or arm == "qk_only":
            continue
        a = summary[arm]
        for k, seed in enumerate(a["seeds"]):
            rows.append(f"| {arm} | {seed} | {a['cf_acc_start_seeds'][k]:.3f} | "
                        f"{a['cf_acc_peak_seeds'][k]:.3f} | {a['cf_acc_peak_step_seeds'][k]} | "
                        f"{a['cf_acc_final_seeds'][k]:.3f} | {a['cf_acc_fall_seeds'][k]:.3f} |")
    return rows


def _mitigations(summary: dict) -> list[str]:
    """inversion-tiny's mitigations: each arm's fall (mean of the per-seed falls), its 95%
    interval over seeds, and the findings' shares."""
    f = summary["findings"]
    rows = ["| arm | fall (mean of the per-seed falls) | 95% interval over seeds | reduces the "
            "fall on every seed | share of the fall removed | in-distribution change |",
            "|---|---|---|---|---|---|"]
    for arm in ARMS:
        if arm not in summary:
            continue
        a, lo_hi = summary[arm], summary[arm]["cf_acc_fall_ci95"]
        fall = sum(a["cf_acc_fall_seeds"]) / len(a["cf_acc_fall_seeds"])
        every = {True: "yes", False: "no"}.get(f.get(f"{arm}_reduces_fall_every_seed"), "-")
        share = f.get(f"{arm}_fall_removed")
        change = f.get(f"{arm}_indist_minus_mixed")
        rows.append(f"| {arm} | {fall:.3f} | [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}] | {every} | "
                    + (f"{100 * share:.0f}%" if share is not None else "-") + " | "
                    + (f"{change:+.3f}" if change is not None else "-") + " |")
    return rows


def _phase(summary: dict) -> list[str]:
    """A phase study's falls (mean of the per-seed falls), theory and tiny model per
    reliability row, `*` where the cell inverts."""
    grids = summary["phase"]
    shares = sorted({row["cs_share"] for row in grids["tiny"]})
    rows = ["| delta_C / lookup reliability | model | "
            + " | ".join(f"C+S {x:g}" if k == 0 else f"{x:g}" for k, x in enumerate(shares))
            + " |", "|---" * (2 + len(shares)) + "|"]
    for r in sorted({row["reliability"] for row in grids["tiny"]}):
        for model, name in (("toy", "theory"), ("tiny", "tiny")):
            cell = {row["cs_share"]: row for row in grids[model] if row["reliability"] == r}
            rows.append(f"| {r:g} | {name} | " + " | ".join(
                f"{cell[x][cell[x]['metric'] + '_fall']:.3f}" + ("*" if cell[x]["inverts"] else "")
                for x in shares) + " |")
    return rows


ARMS = ("mixed", "c_only", "filtered", "augmented", "qk_only", "lora", "dynamic")
TABLES = {"inversion-tiny-per-seed": _per_seed, "inversion-tiny-mitigations": _mitigations,
          "inversion-tiny-phase": _phase}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, change nothing")
    parser.add_argument("--slow", action="store_true", help="the slow examples too")
    parser.add_argument("--ran-in", type=Path, default=None,
                        help="a folder where the slow examples' commands already ran: keep "
                             "their outputs as shown, take their figures and tables from it "
                             "(they are not rerun)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="run each page in a new folder DIR/<page> and keep it (the runs' "
                             "files, to read what the page quotes from them)")
    parser.add_argument("--list", action="store_true", help="list the examples")
    parser.add_argument("files", nargs="*", type=Path,
                        help="only these Markdown files (default: the README and docs/)")
    args = parser.parse_args(argv)
    chosen = {p.resolve() for p in args.files}
    if args.list:
        for path in doc_files():
            for speed, start, _, lang in blocks(path.read_text()):
                print(f"{speed:4}  {path.relative_to(ROOT)}:{start}  {lang or 'shell'}")
        return 0
    speeds = {"fast", "slow"} if args.slow else {"fast"}
    run = Pass(speeds, args.ran_in.resolve() if args.ran_in else None, args.check,
               args.keep.resolve() if args.keep else None)
    olds = {path: path.read_text() for path in doc_files()
            if not chosen or path.resolve() in chosen}
    for path, text in olds.items():
        run.texts[path] = run.regenerate(path) if "<!-- docs-" in text else text
    differ = 0
    for path, text in olds.items():
        new = run.excerpts(path, run.texts[path])
        if mask(new) == mask(text):
            continue
        differ += 1
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(
                mask(text).splitlines(True), mask(new).splitlines(True),
                str(path.relative_to(ROOT)), "rerun"))
        else:
            path.write_text(new)
            print(f"rewrote {path.relative_to(ROOT)}")
    for name in run.figures_differ:
        print(f"{name}: differs from the figure its example draws")
    if not args.slow:
        slow = [f"{p.relative_to(ROOT)}:{b[1]}" for p in doc_files()
                for b in blocks(p.read_text()) if b[0] == "slow"]
        print(f"{'took' if args.ran_in else 'skipped'} {len(slow)} slow example(s) "
              f"({'from ' + str(args.ran_in) if args.ran_in else '--slow runs them'}): "
              f"{', '.join(slow)}")
    return 1 if args.check and (differ or run.figures_differ) else 0


if __name__ == "__main__":
    sys.exit(main())
