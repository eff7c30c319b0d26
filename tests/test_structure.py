"""The layout rules of the library, checked on every file (and shown to fail on a planted violation).

- a chapter's registry file sits beside its driver: ``<family>/chapters/<id>.yaml`` and
  ``<family>/chapters/<id with _>.py``, and the registry's ``driver`` names that module;
- the notebook imports its own driver and no other chapter's; it defines no functions or classes;
- a chapter driver never imports another chapter driver; a method or core module never imports
  a chapter module; the machinery imports no family;
- nobody imports another module's ``_private`` name; no function-local imports of ``repro``;
- no file or module name carries history (``_b``, ``test_a_...``, ``part_a``).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

from repro.registry import load_registry

ROOT = Path(__file__).resolve().parents[1]
MACHINERY = {"cli", "registry", "params", "results", "runner", "book", "dvcgen", "deps", "atomic", "paths"}
HISTORY = re.compile(r"(^|_)(b|part_?[ab]|new|old|v\d+)(_|$)|^test_[ab]_|_[ab]_")


def _module_name(lib: Path, path: Path) -> str:
    rel = path.relative_to(lib).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.AST, module: str) -> list[tuple[str, list[str], bool]]:
    """(imported module, imported names, inside a function) for every import in ``tree``."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, [], in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                mod = child.module or ""
                if child.level:
                    base = module.split(".")[: -child.level] if child.level else []
                    mod = ".".join([*base, mod] if mod else base)
                found.append((mod, [a.name for a in child.names], in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def _is_chapter(mod: str) -> bool:
    parts = mod.split(".")
    return len(parts) >= 4 and parts[0] == "repro" and parts[2] == "chapters"


def library_violations(lib: Path) -> list[str]:
    """Every breach of the import and naming rules under ``lib`` (the folder holding ``repro``)."""
    out = []
    for path in sorted((lib / "repro").rglob("*.py")):
        mod = _module_name(lib, path)
        if HISTORY.search(path.stem):
            out.append(f"{path.relative_to(lib)}: a name that carries history; name it by its role")
        tree = ast.parse(path.read_text())
        for target, names, local in _imports(tree, mod):
            if not target.startswith("repro"):
                continue
            tparts = target.split(".")
            if local:
                out.append(f"{mod}: function-local import of {target}")
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    out.append(f"{mod}: imports the private name {target}.{n}")
            chapter_target = _is_chapter(target) or any(_is_chapter(f"{target}.{n}") for n in names)
            if _is_chapter(mod) and chapter_target:
                hit = target if _is_chapter(target) else next(f"{target}.{n}" for n in names if _is_chapter(f"{target}.{n}"))
                if hit.split(".")[:4] != mod.split(".")[:4]:
                    out.append(f"{mod}: a chapter driver imports another chapter driver ({hit})")
            elif not _is_chapter(mod) and chapter_target:
                out.append(f"{mod}: a method, core or machinery module imports a chapter module ({target})")
            if mod.split(".")[1:2] and mod.split(".")[1] in MACHINERY and len(tparts) > 1:
                if tparts[1] not in MACHINERY and (lib / "repro" / tparts[1]).is_dir():
                    out.append(f"{mod}: the machinery imports the family {tparts[1]}")
    return out


def notebook_violations(root: Path) -> list[str]:
    """Breaches of the chapter rules by the registry's chapters and their notebooks."""
    out = []
    lib = root / "lib"
    for ch in load_registry().chapters:
        module = ch.id.replace("-", "_")
        expected = f"repro.{ch.family}.chapters.{module}"
        if ch.driver != expected:
            out.append(f"{ch.id}: driver is {ch.driver!r}; expected {expected!r}")
        if not (lib / "repro" / ch.family / "chapters" / f"{module}.py").is_file():
            out.append(f"{ch.id}: no driver module lib/repro/{ch.family}/chapters/{module}.py")
        if ch.source != f"lib/repro/{ch.family}/chapters/{ch.id}.yaml":
            out.append(f"{ch.id}: registry entry in {ch.source}; it belongs beside the driver")
        nb = json.loads((root / ch.notebook).read_text())
        code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        tree = ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
        if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) for n in ast.walk(tree)):
            out.append(f"{ch.notebook}: defines a function or class; that belongs in the library")
        imported = set()
        for target, names, _ in _imports(tree, "notebook"):
            imported.add(target)
            imported.update(f"{target}.{n}" for n in names)
        if expected not in imported:
            out.append(f"{ch.notebook}: does not import its driver {expected}")
        for t in imported:
            if _is_chapter(t) and t.split(".")[:4] != expected.split("."):
                out.append(f"{ch.notebook}: imports another chapter's driver {t}")
    return out


def test_library_follows_the_layout():
    assert library_violations(ROOT / "lib") == []


def test_chapters_follow_the_layout():
    assert notebook_violations(ROOT) == []


def test_test_and_bench_names_carry_no_history():
    bad = [p.name for d in ("tests", "bench") for p in (ROOT / d).rglob("*.py") if HISTORY.search(p.stem)]
    assert bad == []


def test_planted_violations_are_found(tmp_path):
    lib = tmp_path / "lib"
    shutil.copytree(ROOT / "lib" / "repro", lib / "repro", ignore=shutil.ignore_patterns("__pycache__", "*.yaml"))
    chapters = lib / "repro" / "fam" / "chapters"
    chapters.mkdir(parents=True)
    (lib / "repro" / "fam" / "__init__.py").write_text('"""A planted family."""\n')
    (chapters / "__init__.py").write_text('"""Drivers."""\n')
    (chapters / "one.py").write_text('"""One."""\nfrom repro.fam.chapters.two import run\n')
    (chapters / "two.py").write_text('"""Two."""\n\ndef run():\n    from repro.fam import _core\n    return _core\n')
    (lib / "repro" / "fam" / "core.py").write_text('"""Core."""\nfrom repro.fam.chapters import one\n')
    (lib / "repro" / "fam" / "worker_b.py").write_text('"""History."""\n')
    found = "\n".join(library_violations(lib))
    assert "fam.chapters.one: a chapter driver imports another chapter driver" in found
    assert "fam.chapters.two: function-local import" in found
    assert "private name repro.fam._core" in found
    assert "repro.fam.core: a method, core or machinery module imports a chapter module" in found
    assert "worker_b.py: a name that carries history" in found
