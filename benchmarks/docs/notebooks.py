"""Rerun the example notebooks under docs/ and rewrite their outputs.

    python benchmarks/docs/notebooks.py            # rerun, rewrite the notebooks' outputs
    python benchmarks/docs/notebooks.py --check    # rerun, change nothing, exit 1 on a difference

Each `docs/**/*.ipynb` runs top to bottom in one namespace, as a kernel would, in a fresh
temporary folder (the project's `tests/` and `benchmarks/` linked in): what a cell prints
becomes its stream output, and the value of its last expression its result, as the notebook
front end shows it: the object's `_repr_html_()` where it has one (a knowflow Result, a pandas
frame) beside its plain `repr` (floats rounded to 3 places). A cell that raises stops the
script with the notebook, the cell and the error, so a broken example is never written. Times
and temporary paths are masked when outputs are compared (`docs_examples.mask`), so `--check`
fails only on a real difference. `make docs-examples` runs it after the Markdown examples.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import json
import os
import pprint
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _docs_examples():
    spec = importlib.util.spec_from_file_location("docs_examples",
                                                  Path(__file__).parent / "docs_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def notebooks() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.ipynb"))


def _text(lines: str | list[str]) -> str:
    return lines if isinstance(lines, str) else "".join(lines)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def run_cell(source: str, namespace: dict, rounded) -> list[dict]:
    """The outputs of one code cell (see the module docstring)."""
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    buf, outputs = io.StringIO(), []
    with contextlib.redirect_stdout(buf):
        exec(compile(ast.Module(tree.body, []), "<cell>", "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace) \
            if last is not None else None
    if buf.getvalue():
        outputs.append({"name": "stdout", "output_type": "stream", "text": _lines(buf.getvalue())})
    if value is not None:
        data = {"text/plain": _lines(pprint.pformat(rounded(value), width=96,
                                                    sort_dicts=False, compact=True))}
        if hasattr(value, "_repr_html_"):
            data["text/html"] = _lines(value._repr_html_())
        outputs.append({"data": data, "metadata": {}, "output_type": "execute_result"})
    return outputs


def run_notebook(path: Path, cwd: Path) -> dict:
    """The notebook at `path` with every code cell rerun in `cwd`."""
    helpers = _docs_examples()
    book = json.loads(path.read_text())
    namespace: dict = {"__name__": "__main__"}
    count = 0
    old = os.getcwd()
    os.chdir(cwd)
    try:
        for k, cell in enumerate(book["cells"]):
            if cell["cell_type"] != "code":
                continue
            count += 1
            try:
                outputs = run_cell(_text(cell["source"]), namespace, helpers._rounded)
            except Exception as exc:
                raise SystemExit(f"{path.relative_to(ROOT)}: cell {k}: "
                                 f"{type(exc).__name__}: {exc}") from exc
            for out in outputs:
                if out["output_type"] == "execute_result":
                    out["execution_count"] = count
            cell["outputs"], cell["execution_count"] = outputs, count
    finally:
        os.chdir(old)
    return book


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, change nothing")
    args = parser.parse_args(argv)
    mask = _docs_examples().mask
    differ = 0
    for path in notebooks():
        with tempfile.TemporaryDirectory(prefix="knowflow-notebook-") as tmp:
            for name in ("tests", "benchmarks"):
                (Path(tmp) / name).symlink_to(ROOT / name)
            new = json.dumps(run_notebook(path, Path(tmp)), indent=1, ensure_ascii=False) + "\n"
        old = path.read_text()
        if mask(new) == mask(old):
            continue
        differ += 1
        if args.check:
            print(f"{path.relative_to(ROOT)}: outputs differ from a rerun")
        else:
            path.write_text(new)
            print(f"rewrote {path.relative_to(ROOT)}")
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
