"""The shape of the source tree, read from its text alone (no knowflow import needed).

    python benchmarks/docs/code_shape.py [SRC]        # SRC defaults to src/knowflow

Prints, from the source text alone:
- the module-level import graph between knowflow modules (imports at the top of a file, and in
  top-level `if`/`try` blocks, but not under `if TYPE_CHECKING:`): its cycles (strongly
  connected groups of modules) and its longest chain of imports (after collapsing cycles);
- how many imports of knowflow modules sit inside functions;
- lines per package (every .py file under it, blank lines included; experiments/ also per
  reproduction folder);
- module file names that repeat (outside experiments/<name>/, whose world.py, model.py, ...
  repeat by design, and inside them);
- the public entry points' return types (from knowflow/__init__.py's table and each function's
  return annotation) and the legacy / shim code lines (`*legacy` call forms, module-class swaps);
- the five longest functions and the five with the most parameters;
- `duplicates` (the tool library's command, when on PATH) on the source and the tests.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path


def modules(src: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        out[".".join((src.name, *parts)).removesuffix(".__init__")] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _resolve(node: ast.ImportFrom | ast.Import, module: str, is_pkg: bool,
             known: set[str]) -> list[str]:
    """The knowflow modules an import statement loads (a `from pkg import sub` names sub)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    package = module if is_pkg else module.rsplit(".", 1)[0]
    base = node.module or ""
    if node.level:
        head = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(head + ([base] if base else []))
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in known else base)
    return out


def imports(path: Path, module: str, known: set[str]) -> tuple[list[tuple[str, int]],
                                                               list[tuple[str, int]]]:
    """(module-level imports, function-level imports) of knowflow modules: (target, line)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    root = module.split(".")[0]
    top: list[tuple[str, int]] = []
    inner: list[tuple[str, int]] = []

    def _walk_inner(fn) -> None:
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                inner.extend((t, node.lineno) for t in _resolve(node, module, is_pkg, known)
                             if t.split(".")[0] == root)

    def visit(body, at_top: bool) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets = [t for t in _resolve(node, module, is_pkg, known)
                           if t.split(".")[0] == root]
                (top if at_top else inner).extend((t, node.lineno) for t in targets)
            elif isinstance(node, ast.If) and _is_type_checking(node):
                continue
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                _walk_inner(node)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, at_top)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []) or [], at_top)
                for h in getattr(node, "handlers", []) or []:
                    visit(h.body, at_top)

    visit(tree.body, True)
    return top, inner


def graph(src: Path) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    mods = modules(src)
    known = set(mods)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    inner_all = []
    for m, path in mods.items():
        top, inner = imports(path, m, known)
        edges[m] |= {t for t, _ in top if t in known and t != m}
        inner_all += [(m, t, ln) for t, ln in inner]
    return edges, inner_all


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(out)


def longest_chain(edges: dict[str, set[str]]) -> list[str]:
    """The longest import path, walking each cycle's modules as one node."""
    rep = {}
    for group in cycles(edges):
        for m in group:
            rep[m] = group[0]
    node = {m: rep.get(m, m) for m in edges}
    dag: dict[str, set[str]] = defaultdict(set)
    for m, ts in edges.items():
        dag[node[m]] |= {node[t] for t in ts if node[t] != node[m]}
    memo: dict[str, list[str]] = {}

    def best(v):
        if v not in memo:
            tails = [best(w) for w in sorted(dag[v])]
            memo[v] = [v] + max(tails, key=len, default=[])
        return memo[v]

    return max((best(v) for v in sorted(set(node.values()))), key=len)


def package_lines(src: Path) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for path in src.rglob("*.py"):
        parts = path.relative_to(src).parts
        key = parts[0] if len(parts) > 1 else "(top-level modules)"
        n = len(path.read_text().splitlines())
        out[key] += n
        if key == "experiments" and len(parts) > 2:
            out[f"experiments/{parts[1]}"] += n
    return dict(sorted(out.items()))


def repeated_names(src: Path) -> tuple[dict[str, int], dict[str, int]]:
    """File names that occur more than once: (outside experiments/<name>/, inside them)."""
    outside, inside = Counter(), Counter()
    for path in src.rglob("*.py"):
        parts = path.relative_to(src).parts
        if path.name != "__init__.py":
            (inside if parts[0] == "experiments" and len(parts) > 2 else outside)[path.name] += 1
    return ({k: v for k, v in outside.items() if v > 1},
            {k: v for k, v in inside.items() if v > 1})


SHIM = re.compile(r"\*legacy\b|\blegacy\)|if legacy|__class__\s*=\s*_")


def shim_lines(src: Path) -> list[str]:
    return [f"{path.relative_to(src.parent)}:{i}: {line.strip()[:70]}"
            for path in sorted(src.rglob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1) if SHIM.search(line)]


ENTRY_POINTS = ("evaluate", "explain", "probe", "curate", "augment", "finetune",
                "run_experiment")


def entry_point_types(src: Path) -> dict[str, str]:
    """Entry point -> the name of its return annotation, read from the defining module."""
    init = ast.parse((src / "__init__.py").read_text())
    table = next((ast.literal_eval(n.value) for n in ast.walk(init) if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", "") == "_API"), {})
    out = {}
    for name in ENTRY_POINTS:
        module, attr = table.get(name, ":").split(":")
        path = src.parent / (module.replace(".", "/") + ".py")
        if not path.exists():
            out[name] = "(not exported)"
            continue
        fn = next((n for n in ast.parse(path.read_text()).body
                   if isinstance(n, ast.FunctionDef) and n.name == attr), None)
        out[name] = ast.unparse(fn.returns) if fn is not None and fn.returns else "(none)"
    return out


def duplicates(tree: Path) -> str:
    if not shutil.which("duplicates") or not tree.is_dir():
        return "not run (no `duplicates` command)"
    res = subprocess.run(["duplicates", "--repo", str(tree), "--seconds", "60"],
                         capture_output=True, text=True, cwd=tree, timeout=180)
    return (res.stdout.splitlines() or ["(no output)"])[0]


def functions(src: Path) -> list[tuple[int, int, str]]:
    """(lines, parameters, place) of every function and method."""
    out = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                n += bool(a.vararg) + bool(a.kwarg)
                if a.args and a.args[0].arg in ("self", "cls"):
                    n -= 1
                place = f"{path.relative_to(src.parent)}:{node.lineno} {node.name}"
                out.append((node.end_lineno - node.lineno + 1, n, place))
    return out


def main(src: Path) -> None:
    edges, inner = graph(src)
    found = cycles(edges)
    print(f"modules: {len(edges)}, module-level import edges: "
          f"{sum(map(len, edges.values()))}, function-level knowflow imports: {len(inner)}")
    print(f"import cycles (module level): {len(found)}")
    for group in found:
        print("  cycle: " + " <-> ".join(group))
    every = {m: set(ts) for m, ts in edges.items()}
    for m, t, _ in inner:
        if t in every and t != m:
            every[m].add(t)
    found = cycles(every)
    print(f"import cycles counting function-level imports too: {len(found)}")
    for group in found:
        print("  cycle: " + " <-> ".join(group))
    chain = longest_chain(edges)
    print(f"longest import chain ({len(chain)} modules): " + " -> ".join(chain))
    print("lines per package:")
    lines = package_lines(src)
    for k, v in lines.items():
        print(f"  {k:32s} {v:6d}")
    print(f"  {'total':32s} {sum(v for k, v in lines.items() if '/' not in k):6d}")
    outside, inside = repeated_names(src)
    print(f"file names that repeat outside experiments/<name>/: {len(outside)} "
          f"({sum(outside.values())} modules): "
          + ", ".join(f"{k} x{v}" for k, v in sorted(outside.items())))
    print("file names shared by experiments/<name>/ folders: "
          + ", ".join(f"{k} x{v}" for k, v in sorted(inside.items())))
    types = entry_point_types(src)
    print(f"entry-point return types: {len(set(types.values()))}: "
          + ", ".join(f"{k} -> {v}" for k, v in types.items()))
    shims = shim_lines(src)
    print(f"legacy / shim code lines: {len(shims)}")
    for line in shims:
        print(f"  {line}")
    fns = functions(src)
    print("five longest functions (lines, params):")
    for ln, n, place in sorted(fns, key=lambda f: (-f[0], f[2]))[:5]:
        print(f"  {ln:4d} lines {n:3d} params  {place}")
    print("five functions with the most parameters (params, lines):")
    for ln, n, place in sorted(fns, key=lambda f: (-f[1], f[2]))[:5]:
        print(f"  {n:4d} params {ln:3d} lines  {place}")
    print(f"duplicates src: {duplicates(src)}")
    print(f"duplicates tests: {duplicates(src.parent.parent / 'tests')}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "src/knowflow").resolve())
