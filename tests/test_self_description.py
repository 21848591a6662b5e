# samples: begin
"""The project describes itself, not how it was made: no text in the code, tests, benchmarks or
docs speaks of numbered work sessions or rounds, stop numbers, issue or pull-request numbers,
who ran what beside whom (helpers, agents), or which machines were or were not lent. A finding
names its date, commit, command and machine instead ("measured 2026-12-07 at 62759bf on a 2-core
CPU machine").

`process_talk(text)` finds such passages. Its patterns are narrow on purpose: an HTTP session,
a pytest fixture's `scope="session"`, a helper function, `tests/helpers.py`, a stop word, a run
that stops, measurement rounds (`--rounds 3`, "round 1  lm-eval ...") and "a known issue" are
ordinary technical English and pass; the checker's own tests below show both sides.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("src", "tests", "docs", "benchmarks", "README.md", "mkdocs.yml", "Makefile")
SKIPPED_SUFFIXES = {".safetensors", ".bin", ".pt", ".png", ".jpg", ".gif", ".pdf", ".gz",
                    ".zip", ".pyc", ".npz", ".npy", ".gguf", ".parquet", ".arrow"}
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", "site"}

_ORDINAL = (r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
            r"twelfth|thirteenth|fourteenth|fifteenth|twentieth|\d+(?:st|nd|rd|th))")
_NUMBER = r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d+)"
_GAP = r"[\s#*]+"  # words of a phrase, across a wrapped line or a comment's `#`

# (name, pattern): every match is process talk, unless `_ALLOWED` says otherwise.
PATTERNS: list[tuple[str, re.Pattern]] = [(name, re.compile(p, re.IGNORECASE)) for name, p in (
    # any work session: "the ninth session", "sessions one to seven", "session of 2026-12-07",
    # "this session's"; an HTTP session or a pytest fixture's scope is allowed below
    ("session", r"\bsessions?\b"),
    # numbered rounds of work: "in round 5", "(round 5)", "rounds one to three", "review round"
    ("numbered round", rf"(?:\b(?:in|since|until|after|before|during|from|by|of)\s+|\()"
                       rf"round{_GAP}#?\d+\b"),
    ("numbered round", rf"\brounds?{_GAP}{_NUMBER}{_GAP}(?:to|through|and){_GAP}{_NUMBER}\b"),
    ("numbered round", rf"\b(?:work|review|fix|editing){_GAP}rounds?\b"),
    ("numbered round", rf"\b{_ORDINAL}{_GAP}round{_GAP}of{_GAP}(?:work|review|changes|fixes)\b"),
    # stop numbers: "stop 57", "Stop 24's rule", "stops 20-22" (a stage that stops after 10
    # steps is allowed below)
    ("stop number", r"\bstops?\s+#?\d+(?:\s*[-–]\s*\d+)?\b"),
    # issue / pull-request numbers: "issue 46", "issue #12", "issues 42 and 43", "(#39)"
    ("issue number", r"\b(?:issues?|tickets?|PRs?|pull\s+requests?)\s*#?\d+\b"),
    ("issue number", r"(?:^|(?<=[\s(\[,;]))#\d{1,5}(?![\w-])"),
    # the task behind a change: "the goal", "the issue asks for"
    ("issue number", r"\bthe\s+issue's\b"
                     r"|\bthe\s+issue\s+(?:asks?|asked|wants|says|requires|requested)\b"),
    # who ran what: "other helpers' benchmarks", "another helper owns it", "other agents' jobs"
    ("helper or agent", r"(?<!user-)(?<!user )\bagents?\b"),
    ("helper or agent", r"\bhelpers'"),
    ("helper or agent", r"\b(?:other|another|fellow)\s+helpers?\b(?!\s+(?:functions?|modules?"
                        r"|class(?:es)?|methods?|scripts?)\b)"),
    ("helper or agent", r"\bhelpers?\s+(?:owns?|ran|wrote|measured|who|worked|was\s+running"
                        r"|were\s+running)\b"),
    ("helper or agent", r"\blead\s+engineer\b"),
    # machines lent or not: "no GPU was lent", "device status: not drawn"
    ("machine lending", r"\blent\b|\blending\b|\bloaned\b"),
    ("machine lending", r"\bnot\s+drawn\b"),
    ("machine lending", r"\b(?:device|GPU|accelerator|machine|H100|H200)s?\b[^.\n]{0,30}"
                        r"\b(?:was|were|been|is)\s+(?:drawn|granted|allotted)\b"),
)]

# Ordinary English a pattern would otherwise take: (pattern name, text just before the match,
# text from the match on).
_ALLOWED: list[tuple[str, re.Pattern, re.Pattern]] = [
    (name, re.compile(before, re.IGNORECASE), re.compile(after, re.IGNORECASE))
    for name, before, after in (
        ("session", r"scope\s*=\s*[\"']$", r""),                      # pytest fixture scope
        ("session", r"(?:https?|requests|aiohttp|ssh|tmux|shell|browser|login|database|db|"
                    r"inference|onnx|tls|interactive|jupyter|notebook|ipython|repl|terminal)"
                    r"[ .-]?$", r""),
        ("session", r"", r"sessions?[- ](?:scoped?|fixtures?|start|finish)\b"),
        ("session", r"\.$", r"Session\b"),                              # requests.Session
        # a stage or run that stops after a number of steps, tokens, seconds ...
        ("stop number", r"", r"stops?\s+#?\d+(?:\s*,\s*\d+)*\s*(?:(?:or|and)\s+\d+\s*)?"
                             r"(?:steps?|tokens?|epochs?|s|seconds|items|evaluations?|%)\b"),
        # a CSS colour (`border: 1px solid #222`)
        ("issue number", r"(?:solid|colou?r|fill|stroke|background|border)[\w-]*:?\s*$", r""),
        # `drawn` as a variable (`assert not drawn`) or a figure not drawn
        ("machine lending", r"(?:\b(?:assert|if|elif|and|or|return|while)\s+$|"
                            r"(?:figure|curve|plot|line|panel|bar|axis|legend|card|chart|"
                            r"marker|image)s?\b[^.\n]{0,40}$)", r""),
    )]
# samples: end


def process_talk(text: str) -> list[tuple[int, str, str]]:
    """(line number, pattern name, the line) of each passage of `text` that speaks of how the
    project was made."""
    found: dict[int, tuple[int, str, str]] = {}
    lines = text.split("\n")
    for name, pattern in PATTERNS:
        for match in pattern.finditer(text):
            before = text[max(0, match.start() - 40):match.start()]
            after = text[match.start():match.start() + 60]
            if any(n == name and b.search(before) and a.match(after)
                   for n, b, a in _ALLOWED):
                continue
            line = text.count("\n", 0, match.start()) + 1
            found.setdefault(line, (line, name, lines[line - 1].strip()))
    return sorted(found.values())


# The checker's own samples, its patterns' comments and the docstring above are text about
# process talk, not process talk: the scan skips the lines between these two markers (in
# this file only).
SAMPLES_BEGIN, SAMPLES_END = "# samples: begin", "# samples: end"


def scanned_files() -> list[Path]:
    """The project's own files under `SCANNED`: what git tracks or would track (never a build
    output such as src/knowflow.egg-info); every file when the tree is not a git checkout."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "--", *SCANNED], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0:
        candidates = [ROOT / line for line in sorted(set(listed.stdout.splitlines()))]
    else:
        candidates = []
        for entry in SCANNED:
            path = ROOT / entry
            candidates += [path] if path.is_file() else sorted(path.rglob("*")) \
                if path.is_dir() else []
    return [p for p in candidates if p.is_file() and p.suffix not in SKIPPED_SUFFIXES
            and not SKIPPED_DIRS & set(p.relative_to(ROOT).parts)
            and not any(part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)]


def scan_text(path: Path) -> str | None:
    """The text the scan reads from `path`: None for a binary file; this file without its
    samples (blank lines keep the line numbers)."""
    raw = path.read_bytes()
    if b"\0" in raw[:8192]:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if path == Path(__file__).resolve():
        lines, inside = text.split("\n"), False
        for k, line in enumerate(lines):
            if line.strip() == SAMPLES_BEGIN:
                inside = True
            elif line.strip() == SAMPLES_END:
                inside = False
            if inside:
                lines[k] = ""
        text = "\n".join(lines)
    return text


def hits(entries: tuple[str, ...] = SCANNED) -> list[str]:
    out = []
    for path in scanned_files():
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in entries:
            continue
        text = scan_text(path)
        if text is not None:
            out += [f"{rel}:{line}: [{name}] {snippet[:160]}"
                    for line, name, snippet in process_talk(text)]
    return out


# samples: begin
FORBIDDEN = [
    "Measured in the ninth session (2026-12-06).",
    "explain against ContextCite: sessions one to seven",
    "the session of 2026-12-07 added the soft feature",
    "No GPU was lent this session either.",
    "It was fixed in round 5.",
    "rounds one to three were spent on the guard",
    "(round 12) moved the tracker",
    "the rule before stop 23 re-admitted points",
    "Stop 24's clean clone printed 2.48x.",
    "a knob changed at a time (stops 20-22)",
    "the input boundaries (issue 46)",
    "as issue #12 asked",
    "See issues 42 and 43.",
    "not the 24-48 items the issue asks for",
    "so the issue's criterion is not met",
    "the fix (#39) keeps the cache",
    "load 5-11 with two other helpers' benchmarks",
    "another helper owns it",
    "a 2-core machine shared with ~7 agents",
    "other agents' jobs",
    "(lead engineer, 2026-12-06 14:08-14:20 UTC)",
    "no device was lent",
    "(device status: not drawn)",
    "the GPU was not drawn for this task",
    "the accelerator was granted",
    "Measured in the previous\nsession, at load 4.",
]

ALLOWED = [
    "Shared test helpers (plain functions and constants, no fixtures).",
    "from helpers import byte_tokenizer",
    "tests/helpers.py builds the tiny tokenizer",
    "The one prefix-cache helper runs a shared prefix once.",
    "another helper function of the scorer",
    '@pytest.fixture(scope="session")',
    "a session-scoped fixture",
    "the hub client reuses one HTTP session",
    "s = requests.Session()",
    "the user-agent header",
    "A stopped run keeps its finished suites.",
    "stage 1 stops 0, 10 or 20 steps early",
    "the tokenizer's stop words and stop tokens",
    "`--stop-drop 0.1` stops a run early",
    "a known issue with the cache; this issue is rare",
    "an issue of scale, not of code",
    "median over 3 rounds; each round alternates the order",
    "round 1  lm-eval                      whole  16.5 s",
    "`--rounds 3` runs every cell three times",
    "values are rounded to 3 places; round(x, 3); a round trip",
    "The figure is not drawn when the run has no curves.",
    "assert not drawn and not figures.exists()",
    "a mask drawn twice costs nothing",
    "items drawn from random.Random(seed)",
    "border: 1px solid #222",
    "heading anchors like explain.md#measured-2026-12-06",
    "Measured 2026-12-07 at 62759bf on a 2-core CPU machine.",
    "A Brief History of Time",
    "a key another engineer may add",
]
# samples: end


@pytest.mark.parametrize("text", FORBIDDEN)
def test_the_checker_finds_each_forbidden_form(text):
    assert process_talk(text), f"not caught: {text!r}"


@pytest.mark.parametrize("text", ALLOWED)
def test_the_checker_passes_ordinary_technical_english(text):
    assert not process_talk(text), f"wrongly caught: {text!r}: {process_talk(text)}"


def test_the_checker_reports_the_line_of_a_wrapped_phrase():
    assert [line for line, _, _ in process_talk("intro\nsee the tenth\nsession's end")] == [3]


def test_the_scan_reads_the_trees_and_skips_only_this_files_samples():
    files = {str(p.relative_to(ROOT)) for p in scanned_files()}
    assert {"README.md", "mkdocs.yml", "Makefile", "tests/test_docs.py"} <= files
    assert any(f.startswith("src/knowflow/") for f in files)
    own = scan_text(Path(__file__).resolve())
    assert own is not None and "def process_talk" in own
    assert not any(sample in own for sample in FORBIDDEN)


@pytest.mark.parametrize("tree", ["docs", "README.md", "mkdocs.yml", "Makefile", "tests"])
def test_the_docs_and_tests_speak_of_the_project_only(tree):
    found = hits((tree,))
    assert not found, "process talk (state the facts: date, commit, command, machine):\n" \
        + "\n".join(found)


@pytest.mark.parametrize("tree", ["src", "benchmarks"])
def test_the_code_and_benchmarks_speak_of_the_project_only(tree):
    found = hits((tree,))
    assert not found, "process talk (state the facts: date, commit, command, machine):\n" \
        + "\n".join(found)
