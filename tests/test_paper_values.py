"""Paper values and assumptions live in the registry and the profiles only: no notebook code cell types one.

Every numeric literal in a chapter's code cells (the ``parameters`` cell
aside: its values are the run's settings) is compared with the paper values
of that chapter's claims, and with what a notebook must read rather than
type: the claims' null values, swept margins and learning margins, the
reproduction band, and the numbers of the chapter's cpu profile (its
hyper-parameters, sizes and seeds).  Some literals are none of these and are
let through: a unit factor (``100 * share``, ``x / 1000``, ``s / 60``,
``bytes * 8``), a plotting style or table format keyword (``alpha=0.5``,
``precision=3``), and 0, 1, -1 and 2.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from repro.params import load_profiles
from repro.registry import BAND, Chapter, load_registry

ROOT = Path(__file__).resolve().parents[1]
UNIT_FACTORS = {8.0, 10.0, 60.0, 100.0, 1000.0, 1024.0, 1e6, 1e9, 1e-3, 1e-6, 1e-9}
STYLE_KEYWORDS = {"alpha", "lw", "linewidth", "ls", "s", "markersize", "ms", "fontsize", "zorder", "width", "pad",
                  "precision", "decimals"}
HARMLESS = {0.0, 1.0, -1.0, 2.0}


def _is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _exempt(tree: ast.AST) -> set[int]:
    """Ids of literal nodes that are unit factors in a product or quotient, or plotting style keywords."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            out.update(id(side) for side in (node.left, node.right) if _is_number(side) and float(side.value) in UNIT_FACTORS)
        if isinstance(node, ast.keyword) and node.arg in STYLE_KEYWORDS and _is_number(node.value):
            out.add(id(node.value))
    return out


def typed_paper_values(source: str, paper_values: set[float]) -> list[str]:
    """Lines of ``source`` whose numeric literals equal one of ``paper_values``.

    Parameters
    ----------
    source:
        Python code (a notebook's code cells, the parameters cell left out).
    paper_values:
        The chapter's numeric paper values.

    Returns
    -------
    list of str
        One ``"<value>: <line>"`` per offending literal.
    """
    tree = ast.parse(source)
    exempt = _exempt(tree)
    lines = source.splitlines()
    return [f"{node.value}: {lines[node.lineno - 1].strip()}" for node in ast.walk(tree)
            if _is_number(node) and id(node) not in exempt
            and any(float(node.value) == pytest.approx(v, rel=1e-9, abs=0) for v in paper_values)]


def _code_without_parameters(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells
                     if c["cell_type"] == "code" and "parameters" not in c.get("metadata", {}).get("tags", []))


CHAPTERS = [ch for ch in load_registry().chapters
            if any(isinstance(c.paper_value, (int, float)) for c in ch.claims)]


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda ch: ch.id)
def test_no_paper_value_is_typed_in_a_notebook(ch):
    values = {float(c.paper_value) for c in ch.claims if isinstance(c.paper_value, (int, float))}
    assert typed_paper_values(_code_without_parameters(ROOT / ch.notebook), values) == []


def assumed_values(ch: Chapter) -> set[float]:
    """What a chapter's notebook must read, not type: margins, the band and its cpu profile's numbers."""
    values = set(BAND)
    for c in ch.claims:
        values.update({c.null_value, *c.null_sweep})
        if c.learning is not None:
            values.add(c.learning.margin)
            if c.learning.trivial_value is not None:
                values.add(c.learning.trivial_value)
    for v in load_profiles(ch)["cpu"].values():
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                values.add(float(x))
    return {float(v) for v in values} - HARMLESS


@pytest.mark.parametrize("ch", load_registry().chapters, ids=lambda ch: ch.id)
def test_no_assumed_value_is_typed_in_a_notebook(ch):
    """No hyper-parameter, seed, null value, margin or band is typed in a notebook: it reads Params or the registry."""
    assert typed_paper_values(_code_without_parameters(ROOT / ch.notebook), assumed_values(ch)) == []


def test_a_typed_paper_value_is_found_and_factors_are_not():
    src = ("ref = 1.66\n"
           "share = 100 * part / whole\n"
           "ax.plot(x, y, alpha=0.5)\n"
           "gap = ours - 7\n")
    assert typed_paper_values(src, {1.66, 100.0, 0.5, 7.0}) == ["1.66: ref = 1.66", "7: gap = ours - 7"]
    assert typed_paper_values(src, {2.5}) == []
