"""Layers point one way: every module under src/knowflow imports, and no package imports one
above it.

The order is the flow of data in DESIGN.md, lowest first:

    foundation (errors, io, config, schema, runs: no knowflow imports but each other)
    worlds       facts, items, prompts, instruction rows, suites, loaders: what everything reads
    models       the theory toys, the tiny Llama (its tokenizer, answer scoring), HF models
    evaluate, probes   score and dissect a model (siblings; neither imports the other)
    explain      one answer's provenance: scores with evaluate, knocks out with probes
    curate       scores finetuning rows with a model
    train        finetunes, tracks (with evaluate and probes) and curates (with curate)
    report       reads run folders and draws; never touches a model
    experiments  wire all of the above (and register their report's figures)
    cli          the `knowflow` command and the Python API façade (knowflow/__init__.py)

Imports are read from the source (module level and inside functions alike). An import that
must point the wrong way for a while goes in KNOWN_EXCEPTIONS with the reason (none does now);
an entry fails the test once it is no longer needed (delete it then).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import knowflow

SRC = Path(knowflow.__file__).parent
LAYERS = (
    {"errors", "io", "config", "schema", "runs"},
    {"worlds"},
    {"models"},
    {"evaluate", "probes"},
    {"explain"},  # uses evaluate's scorer and probes' knockout, so above both; below train
    {"curate"},
    {"train"},
    {"report"},
    {"experiments"},
    {"cli", "__main__", "__init__"},
)
SIBLINGS_APART = {("evaluate", "probes"), ("probes", "evaluate")}

# (importing module, imported module) -> why it is still allowed
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _unit(module: str) -> str:
    """The package (or top-level module) a module belongs to: knowflow.train.sft -> train."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return "cli" if parts[1].startswith("cli") else parts[1]


def _layer(unit: str) -> int:
    for i, units in enumerate(LAYERS):
        if unit in units:
            return i
    raise AssertionError(f"{unit!r} is in no layer of tests/test_layers.py: place it")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(("knowflow", *parts)).removesuffix(".__init__")
        out[name] = path
    return out


def _imports(path: Path, module: str) -> list[tuple[str, int, str]]:
    """(imported knowflow module, line, how) for every import statement in the file."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, "import") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            if base == "knowflow":  # from knowflow import schema -> knowflow.schema
                found += [(f"knowflow.{a.name}", node.lineno, "from") for a in node.names]
            else:
                found.append((base, node.lineno, "from"))
    return [f for f in found if f[0].split(".")[0] == "knowflow"]


def _violations() -> tuple[list[str], set]:
    bad, used = [], set()
    for module, path in _modules().items():
        src = _unit(module)
        for target, line, _ in _imports(path, module):
            dst = _unit(target)
            if src == dst:
                continue
            upward = _layer(dst) > _layer(src) or (src, dst) in SIBLINGS_APART
            if not upward:
                continue
            if (module, target) in KNOWN_EXCEPTIONS:
                used.add((module, target))
                continue
            bad.append(f"{path.relative_to(SRC.parent)}:{line}: {src} imports {target} "
                       f"({dst} is above {src})")
    return bad, used


def test_every_module_imports():
    names = [m.name for m in pkgutil.walk_packages(knowflow.__path__, "knowflow.")
             if m.name != "knowflow.__main__"]  # importing it runs the CLI
    assert set(names) | {"knowflow", "knowflow.__main__"} == set(_modules())
    for name in names:
        importlib.import_module(name)


def test_no_package_imports_one_above_it():
    bad, used = _violations()
    assert not bad, "imports that point up:\n" + "\n".join(bad)
    stale = sorted(set(KNOWN_EXCEPTIONS) - used)
    assert not stale, f"known exceptions no longer needed (delete them): {stale}"


def test_subpackages_named_like_public_functions_are_imported_with_from():
    # `knowflow.evaluate` and `knowflow.curate` are the public functions, so
    # `import knowflow.evaluate.api` then `knowflow.evaluate.api.x` would fail
    bad = [f"{path}:{line}" for module, path in _modules().items()
           for target, line, how in _imports(path, module)
           if how == "import"
           and target.split(".")[1:2] in (["evaluate"], ["curate"], ["explain"])]
    assert not bad, "use `from knowflow.evaluate... import ...`: " + ", ".join(bad)


def test_the_checker_sees_an_upward_import(tmp_path):
    """The checker itself can fail: an upward import in a worlds module is found."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from knowflow.train.sft import finetune\n"
                    "from knowflow import schema\nfrom .facts import Instruction\n")
    found = _imports(path, "knowflow.worlds.x")
    assert [(t, ln) for t, ln, _ in found] == [("knowflow.schema", 3),
                                               ("knowflow.worlds.facts", 4),
                                               ("knowflow.train.sft", 2)]
    assert _layer(_unit("knowflow.train.sft")) > _layer(_unit("knowflow.worlds.x"))
