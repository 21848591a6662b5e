"""The documentation keeps up with the code: every flag of every `knowflow` command appears on
that command's page under docs/commands/ (a subcommand's own page, or its group's page for the
options the group shares), every registered experiment has its page, every page is reachable
from mkdocs.yml's nav, and the README stays a short entry point whose links resolve.
(`make test` builds the site itself with `mkdocs build --strict`.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from helpers import load_benchmark
from knowflow.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
COMMANDS = DOCS / "commands"


def leaf_commands(command, path=()):
    """(path, command) for every runnable command under the Typer app's click group."""
    subs = getattr(command, "commands", None)
    if subs is None:
        yield path, command
        return
    for name, sub in sorted(subs.items()):
        yield from leaf_commands(sub, (*path, name))


def flags(command) -> list[str]:
    """Every long option name a command accepts (both halves of --x/--no-x), but --help."""
    names = []
    for param in command.params:
        if getattr(param, "param_type_name", "") != "option" or getattr(param, "hidden", False):
            continue
        names += [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
    return [n for n in names if n != "--help"]


def pages_for(path: tuple[str, ...]) -> list[Path]:
    """The pages that may document a command's flags: docs/commands/<group>-<sub>.md where a
    subcommand has its own page, and the group's (or the command's) docs/commands/<name>.md,
    where options shared by a group's subcommands are documented once."""
    own = COMMANDS / f"{'-'.join(path)}.md"
    group = COMMANDS / f"{path[0]}.md"
    return [p for p in dict.fromkeys((own, group)) if p.exists()]


def mentions(text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


ROOT_COMMAND = typer.main.get_command(app)
LEAVES = list(leaf_commands(ROOT_COMMAND))


def test_the_walk_finds_the_commands_and_their_flags():
    """A guard on the walk itself: it must see known commands and known flags, or every
    coverage check below would pass vacuously."""
    found = {" ".join(p): flags(c) for p, c in LEAVES}
    assert {"run", "eval", "sft", "probe knockout", "export lm-eval"} <= set(found)
    assert {"--keep-peak", "--stop-drop", "--no-track", "--max-length"} <= set(found["sft"])
    assert {"--no-final-norm", "--top-k"} <= set(found["probe project"])
    assert not mentions("--no-final-norm", "--final-norm")
    assert mentions("use `--final-norm`.", "--final-norm")


def test_every_command_has_a_page():
    missing = sorted(f"docs/commands/{'-'.join(p)}.md" for p, _ in LEAVES if not pages_for(p))
    assert not missing, f"commands without a page: {missing}"


def test_every_flag_of_every_command_is_documented_on_its_page():
    gaps = []
    for path, command in LEAVES:
        pages = pages_for(path)
        text = "\n".join(p.read_text(encoding="utf-8") for p in pages)
        where = " or ".join(str(p.relative_to(ROOT)) for p in pages) or "no page"
        gaps += [f"knowflow {' '.join(path)} {flag} (not in {where})"
                 for flag in flags(command) if not mentions(text, flag)]
    assert not gaps, "undocumented flags:\n" + "\n".join(gaps)


def test_global_options_are_documented():
    text = (COMMANDS / "index.md").read_text(encoding="utf-8")
    gaps = [f for f in flags(ROOT_COMMAND) if not mentions(text, f)]
    assert not gaps, f"global options missing from docs/commands/index.md: {gaps}"


def test_every_experiment_has_a_page():
    from knowflow.experiments.registry import list_experiments

    names = [e.name for e in list_experiments()]
    assert "inversion-tiny" in names
    missing = [f"docs/experiments/{n}.md" for n in names
               if not (DOCS / "experiments" / f"{n}.md").exists()]
    assert not missing, f"experiments without a page: {missing}"


def nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for v in node.values() for p in nav_pages(v)]
    return [p for v in node for p in nav_pages(v)]


def test_every_page_is_in_the_nav():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = set(nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert not listed - pages, f"nav names pages that do not exist: {sorted(listed - pages)}"
    assert not pages - listed, f"add these pages to mkdocs.yml's nav: {sorted(pages - listed)}"


def test_readme_is_short_and_its_local_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 300
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "the README links no docs page"
    broken = [t for t in local if not (ROOT / t).exists()]
    assert not broken, f"README links to missing files: {broken}"


# Output blocks allowed to stay unmarked, per page (none now; the count may only fall). Every
# block that shows a command's output is a docs-example (or an excerpt of one), or, on
# docs/findings/, a dated docs-record (benchmarks/docs/docs_examples.py).
UNMARKED_PENDING: dict[str, int] = {}


def test_every_command_output_in_the_docs_regenerates_or_is_a_dated_record():
    docs_examples = load_benchmark("docs/docs_examples")
    problems = [p for path in docs_examples.doc_files() for p in docs_examples.unmarked(path)]
    per_page: dict[str, list[str]] = {}
    for problem in problems:
        per_page.setdefault(problem.split(":")[0], []).append(problem)
    too_many = [p for page, found in per_page.items()
                if len(found) > UNMARKED_PENDING.get(page, 0) for p in found]
    assert not too_many, "\n".join(too_many)


def test_every_figure_under_docs_img_is_drawn_by_a_docs_example():
    """docs/img/ holds only figures a `docs-figure` marker copies from its example's run
    (findings' figures, records like their blocks, live under docs/findings/img/)."""
    docs_examples = load_benchmark("docs/docs_examples")
    targets = {found.group(2).split("->")[1].strip()
               for path in docs_examples.doc_files()
               for line in path.read_text(encoding="utf-8").split("\n")
               if (found := docs_examples.MARKER.match(line)) and found.group(1) == "figure"}
    figures = {str(p.relative_to(ROOT)) for p in (DOCS / "img").iterdir()}
    assert figures <= targets, f"figures no docs-figure marker draws: {sorted(figures - targets)}"
    assert figures, "docs/img holds no figure"


def test_every_command_page_is_a_short_reference():
    """A command's page is a reference (the research behind it lives in docs/findings/)."""
    long = {p.name: n for p in COMMANDS.glob("*.md")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 300}
    assert not long, f"command pages over 300 lines: {long}"
