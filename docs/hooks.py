"""mkdocs hook: the API reference lists exactly the public names of `knowflow` (its `_API`
table), so a name that moves to another module is documented from its new home without an
edit here. mkdocstrings renders each from its docstrings."""

from __future__ import annotations

MARKER = "<!-- knowflow-api -->"


def _blocks() -> str:
    import knowflow  # light: the public names load on first use

    out = []
    for _name, target in sorted(knowflow._API.items(),
                                key=lambda kv: (kv[0][0].isupper(), kv[0])):
        out.append(f"::: {target.replace(':', '.')}\n    options:\n      show_root_heading: true\n")
    for name in ("ConfigError", "DataError", "KnowflowError"):
        out.append(f"::: knowflow.errors.{name}\n")
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, _blocks())
    return markdown
