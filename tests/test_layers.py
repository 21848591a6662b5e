"""Layers point one way: every module under src/knowflow imports, and no package imports one
above it.

The order is the flow of data (docs/layout.md), lowest first:

    foundation (errors, config, store: what a run writes and reads; import only each other)
    data         facts, items, prompts, instruction rows, suites, loaders: what everything reads
    lens         model access: loading, architecture map, hooks, batching
    evaluation, probes   score and dissect a model (siblings; neither imports the other)
    explanation  one answer's provenance: scores with evaluation, knocks out with probes
    train        finetunes, tracks (with evaluation and probes) and curates
    report       reads run folders and draws; never touches a model
    experiments  one folder per reproduction, wiring all of the above
    cli, api     the `knowflow` command, and the Python API (knowflow/api.py: entry points that
                 load models and data by name and finish run folders as the CLI does;
                 knowflow/__init__.py exports them)

Imports are read from the source (module level and inside functions alike). An import that
must point the wrong way for a while goes in KNOWN_EXCEPTIONS with the reason;
an entry fails the test once it is no longer needed (delete it then).

Below the packages, modules: no import cycle among any knowflow modules, inside a package or
between packages (function-level imports counted too, so none can hide one), and imports of
knowflow modules sit at module level, except in the modules listed in FUNCTION_IMPORTS with
the reason. The import graph is `benchmarks/docs/code_shape.py`'s, which prints the same cycles and
the longest import chain.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import knowflow
from helpers import load_benchmark

SRC = Path(knowflow.__file__).parent
LAYERS = (
    {"errors", "config", "store"},
    {"data"},
    {"lens"},
    {"evaluation", "probes"},
    {"explanation"},  # uses evaluation's scorer and probes' knockout; below train
    {"train"},
    {"report"},
    {"experiments"},
    {"cli", "api", "__main__", "__init__"},
)
SIBLINGS_APART = {("evaluation", "probes"), ("probes", "evaluation")}

# (importing module, imported module) -> why it is still allowed
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}

# module (or package, ending in ".") whose functions may import knowflow modules -> why
FUNCTION_IMPORTS: dict[str, str] = {
    "knowflow.cli.": "a command imports the library (and its config classes, which build "
                     "its options) when it runs, so `knowflow --help` answers in 0.2 s "
                     "instead of importing torch, transformers and matplotlib (4 s)",
}


def _code_shape():
    return load_benchmark("docs/code_shape")  # benchmarks/docs/code_shape.py: the import graph


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
            if base == "knowflow":  # from knowflow import store -> knowflow.store
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
    # `import knowflow.evaluation.run` then `knowflow.evaluation.run.x` would fail
    bad = [f"{path}:{line}" for module, path in _modules().items()
           for target, line, how in _imports(path, module)
           if how == "import"
           and target.split(".")[1:2] in (["evaluate"], ["curate"], ["explain"])]
    assert not bad, "use `from knowflow.evaluate... import ...`: " + ", ".join(bad)


def test_the_checker_sees_an_upward_import(tmp_path):
    """The checker itself can fail: an upward import in a worlds module is found."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from knowflow.train.sft import train_model\n"
                    "from knowflow import store\nfrom .facts import Instruction\n")
    found = _imports(path, "knowflow.data.x")
    assert [(t, ln) for t, ln, _ in found] == [("knowflow.store", 3),
                                               ("knowflow.data.facts", 4),
                                               ("knowflow.train.sft", 2)]
    assert _layer(_unit("knowflow.train.sft")) > _layer(_unit("knowflow.data.x"))


def test_no_import_cycle_among_modules():
    shape = _code_shape()
    edges, inner = shape.graph(SRC)
    for module, target, _ in inner:  # a function-level import is still an edge
        if target in edges and target != module:
            edges[module].add(target)
    cycles = shape.cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_knowflow_imports_sit_at_module_level():
    _, inner = _code_shape().graph(SRC)
    allowed = list(FUNCTION_IMPORTS)

    def listed(module: str) -> bool:
        return any(module == a or (a.endswith(".") and module.startswith(a)) for a in allowed)

    bad = sorted({f"{module} imports {target} inside a function (line {line})"
                  for module, target, line in inner if not listed(module)})
    assert not bad, "move these to module level (or list the module, with the reason):\n" + \
        "\n".join(bad)
    stale = [a for a in allowed if not any(a == m or (a.endswith(".") and m.startswith(a))
                                           for m, _, _ in inner)]
    assert not stale, f"FUNCTION_IMPORTS entries no longer needed (delete them): {stale}"


def test_the_cycle_check_sees_a_cycle_and_a_function_level_import(tmp_path):
    """The checks can fail: a two-module cycle through a function-level import is found."""
    pkg = tmp_path / "knowflow"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from knowflow.sub.b import g\n")
    (pkg / "sub" / "b.py").write_text("def g():\n    from knowflow.sub import a\n")
    shape = _code_shape()
    edges, inner = shape.graph(pkg)
    assert edges["knowflow.sub.a"] == {"knowflow.sub.b"}
    assert inner == [("knowflow.sub.b", "knowflow.sub.a", 2)]
    edges["knowflow.sub.b"].add("knowflow.sub.a")
    assert shape.cycles(edges) == [["knowflow.sub.a", "knowflow.sub.b"]]
