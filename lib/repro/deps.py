"""Which ``repro`` modules a chapter depends on, found from its imports.

The notebook's code cells are parsed for ``import repro...`` and
``from repro... import ...``; each module found is parsed in turn, so the
result is the transitive closure inside the ``repro`` package, including the
``__init__`` of every package on the way.  ``dvc.yaml`` lists these files as
the stage's dependencies, so editing a module reruns only the chapters that
import it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

PACKAGE = "repro"


def _module_file(lib: Path, dotted: str) -> Path | None:
    parts = dotted.split(".")
    base = lib.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _imports(tree: ast.AST, current: str | None = None) -> set[str]:
    """Dotted names of modules (and possible submodules) imported in ``tree``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level and current:
                parts = current.split(".")
                drop = node.level
                if parts[-1] == "__init__":
                    parts, drop = parts[:-1], node.level - 1
                pkg = parts[: len(parts) - drop]
                mod = ".".join([*pkg, mod] if mod else pkg)
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}


def notebook_source(notebook: Path) -> str:
    """The code of a notebook's code cells, joined (IPython magics dropped)."""
    nb = json.loads(Path(notebook).read_text())
    lines = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        lines += [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def module_closure(seeds: set[str], lib: Path) -> list[Path]:
    """Files of the modules ``seeds`` and everything they import from ``repro``, transitively."""
    todo = list(seeds)
    seen: set[str] = set()
    files: set[Path] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # parents' __init__ run on import
            parent = ".".join(parts[:i])
            f = _module_file(lib, parent)
            if f is None:
                continue
            if f not in files:
                files.add(f)
                mod = parent if f.name != "__init__.py" else parent + ".__init__"
                todo.extend(_imports(ast.parse(f.read_text()), mod) - seen)
    return sorted(files)


def chapter_modules(notebook: Path, lib: Path) -> list[Path]:
    """Library files a chapter notebook depends on.

    Parameters
    ----------
    notebook
        The chapter's ``.ipynb``.
    lib
        The folder holding the ``repro`` package (``lib/``).
    """
    seeds = _imports(ast.parse(notebook_source(notebook)))
    return module_closure(seeds, lib)
