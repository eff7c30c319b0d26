"""The contract between schema, notebook, driver and ledger, checked chapter by chapter (run ``-k <id>``).

- the driver defines a frozen, keyword-only ``Params`` (a ``ChapterParams``) whose fields are the
  schema's parameters, a frozen, keyword-only ``Results``, ``run(params) -> Results`` and
  ``claims(results)``; every profile builds its ``Params`` and passes ``Params.checks()``;
  cross-field checks live in ``Params.checks()``, not in the registry;
- the notebook's setup builds ``Params`` in one line (``notebook_params``) and never names a
  parameter again (it reads ``p.<name>``); it draws no raw Matplotlib figure; a direct papermill
  run writes outside the runner's staging folders;
- every measured claim names where its paper number comes from (or what was searched), every
  accuracy or quality claim has a learning precondition, the cpu profile runs at least five
  seeds, and the chapter has its fidelity table.

Each rule is shown to fail on a planted violation.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

from repro import params as rp
from repro.registry import Chapter, load_registry

ROOT = Path(__file__).resolve().parents[1]
REG = load_registry()
MIN_CPU_SEEDS = 5
QUALITY_WORDS = re.compile(r"\b(accuracy|psnr|ssim|bleu|f1|auc|dice|mse|mae|perplexity|iou)\b", re.I)
RAW_PLOT_CALLS = {"subplots", "figure", "subplot", "plot", "bar", "scatter", "hist", "imshow", "title", "xlabel",
                  "ylabel", "legend", "axhline", "axvline", "fill_between"}


def _frozen_kw_only(cls: type) -> bool:
    params = getattr(cls, "__dataclass_params__", None)
    return params is not None and params.frozen and all(f.kw_only for f in dataclasses.fields(cls))


def driver_violations(chapter: Chapter, module: Any) -> list[str]:
    """Breaches of the driver half of the contract."""
    out = []
    P = getattr(module, "Params", None)
    if not (isinstance(P, type) and issubclass(P, rp.ChapterParams)):
        return [f"{chapter.id}: the driver defines no Params(ChapterParams)"]
    if not _frozen_kw_only(P):
        out.append(f"{chapter.id}: Params is not a frozen, keyword-only dataclass")
    fields = [f.name for f in dataclasses.fields(P)]
    if sorted(fields) != sorted(chapter.parameters):
        extra, missing = sorted(set(fields) - set(chapter.parameters)), sorted(set(chapter.parameters) - set(fields))
        out.append(f"{chapter.id}: Params fields differ from the schema (extra {extra}, missing {missing})")
    R = getattr(module, "Results", None)
    if not (isinstance(R, type) and _frozen_kw_only(R)):
        out.append(f"{chapter.id}: the driver defines no frozen, keyword-only Results")
    for name in ("run", "claims"):
        if not callable(getattr(module, name, None)):
            out.append(f"{chapter.id}: the driver defines no {name}()")
    run = getattr(module, "run", None)
    if callable(run):
        sig = inspect.signature(run)
        required = [p for p in sig.parameters.values() if p.default is inspect.Parameter.empty]
        if len(required) != 1 or str(required[0].annotation) not in ("Params", "'Params'"):
            out.append(f"{chapter.id}: run() takes one Params, got {sig}")
    if chapter.checks:
        out.append(f"{chapter.id}: cross-field checks in the registry; they belong in Params.checks()")
    return out


def _code_cells(nb: dict[str, Any]) -> list[tuple[bool, str]]:
    """(is the parameters cell, source) of every code cell, shell and magic lines dropped."""
    out = []
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        src = "".join(c["source"])
        src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
        out.append(("parameters" in c.get("metadata", {}).get("tags", []), src))
    return out


def notebook_contract_violations(chapter: Chapter, nb: dict[str, Any]) -> list[str]:
    """Breaches of the notebook half of the contract."""
    out = []
    cells = _code_cells(nb)
    params_cells = [src for is_params, src in cells if is_params]
    if len(params_cells) != 1:
        return [f"{chapter.notebook}: {len(params_cells)} cells tagged parameters"]
    defaults = {}
    for node in ast.parse(params_cells[0]).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            defaults[node.targets[0].id] = ast.literal_eval(node.value)
    if str(defaults.get("output_dir", "")).startswith("build/staging"):
        out.append(f"{chapter.notebook}: the default output_dir is the runner's staging folder; a direct papermill "
                   "run must write elsewhere")
    calls = 0
    for is_params, src in cells:
        if is_params:
            continue
        tree = ast.parse(src)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name == "notebook_params":
                    calls += 1
                if name == "injected":
                    out.append(f"{chapter.notebook}: uses injected(); build Params with notebook_params()")
                if (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id in ("plt", "ax", "axes")
                        and fn.attr in RAW_PLOT_CALLS):
                    out.append(f"{chapter.notebook}: draws a raw Matplotlib figure ({fn.value.id}.{fn.attr}); "
                               "figures come from the driver or the family's figures.py")
            if isinstance(node, ast.Name) and node.id in chapter.parameters:
                out.append(f"{chapter.notebook}: names the parameter {node.id!r} again (line "
                           f"{getattr(node, 'lineno', '?')} of a cell); read it from Params (p.{node.id})")
    if calls != 1:
        out.append(f"{chapter.notebook}: builds Params with notebook_params() {calls} times; once, in the setup")
    return sorted(set(out))


def claim_violations(chapter: Chapter, cpu_profile: dict[str, Any]) -> list[str]:
    """Breaches of the evidence rules (issue 22) and of the paper-number and fidelity rules (issue 24)."""
    out = []
    for c in chapter.claims:
        if c.kind == "measured" and not c.paper_source:
            out.append(f"{chapter.id}/{c.id}: no paper_source (the table or figure, or 'none found: <what was searched>')")
        if c.paper_value is not None and not c.paper_source:
            out.append(f"{chapter.id}/{c.id}: a paper_value without its source")
        if c.kind == "measured" and QUALITY_WORDS.search(c.metric) and c.learning is None:
            out.append(f"{chapter.id}/{c.id}: an accuracy or quality claim without a learning precondition")
    seeds = cpu_profile.get("seeds")
    if isinstance(seeds, list) and len(seeds) < MIN_CPU_SEEDS:
        out.append(f"{chapter.id}: the cpu profile runs {len(seeds)} seeds; the evidence needs at least {MIN_CPU_SEEDS}")
    if not chapter.fidelity:
        out.append(f"{chapter.id}: no fidelity table (the paper's parts, implemented, substituted or omitted)")
    return out


@pytest.mark.parametrize("chapter", REG.chapters, ids=lambda c: c.id)
def test_driver_follows_the_contract(chapter):
    module = importlib.import_module(chapter.driver)
    assert driver_violations(chapter, module) == []
    profiles = rp.load_profiles(chapter)
    for name, values in profiles.items():
        built = rp.build_params(chapter, rp.validate(chapter, values))
        assert isinstance(built, module.Params), f"profile {name}"


@pytest.mark.parametrize("chapter", REG.chapters, ids=lambda c: c.id)
def test_notebook_follows_the_contract(chapter):
    nb = json.loads((ROOT / chapter.notebook).read_text())
    assert notebook_contract_violations(chapter, nb) == []


@pytest.mark.parametrize("chapter", REG.chapters, ids=lambda c: c.id)
def test_claims_carry_their_evidence_rules(chapter):
    assert claim_violations(chapter, rp.load_profiles(chapter)["cpu"]) == []


def _planted_chapter() -> Chapter:
    return Chapter(id="toy", title="Toy", family="fam", notebook="notebooks/fam/toy.ipynb", bibtex="b",
                   parameters={"rounds": {"type": "int"}, "seeds": {"type": "list[int]"}}, claims=())


def _nb(*cells: tuple[bool, str]) -> dict[str, Any]:
    return {"cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"] if p else []}, "source": s}
                      for p, s in cells]}


def test_planted_contract_violations_are_found():
    ch = _planted_chapter()
    good = _nb((True, "rounds = 3\nseeds = [0, 1]\nprofile = 'cpu'\noutput_dir = 'build/notebook/toy'"),
               (False, "from repro.params import notebook_params\np = notebook_params('toy', globals())\nprint(p.rounds)"))
    assert notebook_contract_violations(ch, good) == []
    twice = _nb((True, "rounds = 3\noutput_dir = 'build/staging/toy/cpu'"),
                (False, "p = notebook_params('toy', globals())\ndriver.sweep(rounds=rounds)\nfig, ax = plt.subplots()"))
    found = "\n".join(notebook_contract_violations(ch, twice))
    assert "names the parameter 'rounds' again" in found
    assert "raw Matplotlib figure (plt.subplots)" in found
    assert "runner's staging folder" in found

    class Module:
        @dataclasses.dataclass(frozen=True)
        class Params(rp.ChapterParams):
            rounds: int = 1

    assert any("frozen, keyword-only" in v for v in driver_violations(ch, Module))
    assert any("missing ['seeds']" in v for v in driver_violations(ch, Module))
    assert any("no frozen, keyword-only Results" in v for v in driver_violations(ch, Module))
    assert "at least 5" in "\n".join(claim_violations(ch, {"seeds": [0, 1, 2]}))
