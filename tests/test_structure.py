"""The layout rules of the library, checked on every file (and shown to fail on a planted violation).

- a chapter's registry file sits beside its driver: ``<family>/chapters/<id>.yaml`` and
  ``<family>/chapters/<id with _>.py``, and the registry's ``driver`` names that module;
- the notebook imports its own driver and no other chapter's; it defines no functions or classes;
- a chapter driver never imports another chapter driver; a method or core module never imports
  a chapter module; the machinery imports no family;
- nobody imports another module's ``_private`` name or reads one through a module (``mod._name``);
  no function-local imports of ``repro``;
- a family never imports another family (a piece two families need lives below both);
- every dataclass in ``repro`` is keyword-only, and no call passes more than four positional
  arguments to one;
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


MAX_POSITIONAL = 4
"""The most positional arguments a call may pass to a record (a dataclass)."""


def _families(lib: Path) -> set[str]:
    return {p.parent.parent.name for p in (lib / "repro").glob("*/chapters/__init__.py")}


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target) in ("dataclass", "dataclasses.dataclass")


def record_classes(lib: Path) -> dict[str, bool]:
    """Every dataclass name under ``lib/repro`` and whether it is keyword-only."""
    out: dict[str, bool] = {}
    for path in sorted((lib / "repro").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for dec in node.decorator_list:
                    if _is_dataclass_decorator(dec):
                        kw = isinstance(dec, ast.Call) and any(
                            k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True
                            for k in dec.keywords)
                        out[node.name] = out.get(node.name, True) and kw
    return out


def record_violations(lib: Path, others: list[Path]) -> list[str]:
    """Dataclasses that are not keyword-only, and calls that pass a record over four positional arguments."""
    records = record_classes(lib)
    out = [f"{name}: a dataclass that is not keyword-only" for name, kw in sorted(records.items()) if not kw]
    for path in sorted([*(lib / "repro").rglob("*.py"), *others]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else (
                    node.func.attr if isinstance(node.func, ast.Attribute) else "")
                if name in records and len(node.args) > MAX_POSITIONAL:
                    out.append(f"{path.name}:{node.lineno}: {name}(...) with {len(node.args)} positional arguments; "
                               "name them")
    return out


def _module_aliases(tree: ast.AST) -> set[str]:
    """Names bound to ``repro`` modules by ``import repro.x as y`` or ``from repro.x import module``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("repro"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("repro"):
            out.update(a.asname or a.name for a in node.names if a.name[:1].islower())
    return out


def library_violations(lib: Path) -> list[str]:
    """Every breach of the import and naming rules under ``lib`` (the folder holding ``repro``)."""
    out = []
    families = _families(lib)
    for path in sorted((lib / "repro").rglob("*.py")):
        mod = _module_name(lib, path)
        if HISTORY.search(path.stem):
            out.append(f"{path.relative_to(lib)}: a name that carries history; name it by its role")
        tree = ast.parse(path.read_text())
        aliases = _module_aliases(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                out.append(f"{mod}: reads the private name {node.value.id}.{node.attr}")
        own = mod.split(".")[1] if mod.count(".") >= 1 else ""
        for target, names, local in _imports(tree, mod):
            tparts = target.split(".")
            if own in families and len(tparts) > 1 and tparts[0] == "repro" and tparts[1] in families and tparts[1] != own:
                out.append(f"{mod}: the family {own} imports the family {tparts[1]} ({target}); move the shared piece below both")
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


def test_records_are_keyword_only():
    assert record_violations(ROOT / "lib", [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]) == []


def test_planted_record_violations_are_found(tmp_path):
    lib = tmp_path / "lib"
    (lib / "repro").mkdir(parents=True)
    (lib / "repro" / "rec.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass(frozen=True)\nclass Run:\n    a: int\n\n"
        "@dataclass(frozen=True, kw_only=True)\nclass Ok:\n    a: int\n\nRun(1, 2, 3, 4, 5)\nOk(a=1)\n")
    found = "\n".join(record_violations(lib, []))
    assert "Run: a dataclass that is not keyword-only" in found and "Ok:" not in found
    assert "Run(...) with 5 positional arguments" in found


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
    other = lib / "repro" / "other" / "chapters"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text('"""Drivers."""\n')
    (lib / "repro" / "other" / "__init__.py").write_text('"""Another planted family."""\n')
    (lib / "repro" / "other" / "core.py").write_text('"""Core."""\nfrom repro.fam import core\n\nx = core._hidden\n')
    found = "\n".join(library_violations(lib))
    assert "fam.chapters.one: a chapter driver imports another chapter driver" in found
    assert "fam.chapters.two: function-local import" in found
    assert "private name repro.fam._core" in found
    assert "repro.fam.core: a method, core or machinery module imports a chapter module" in found
    assert "worker_b.py: a name that carries history" in found
    assert "repro.other.core: the family other imports the family fam" in found
    assert "repro.other.core: reads the private name core._hidden" in found
