"""The pipeline's contracts: registry consistency, notebooks, dvc.yaml, killed runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from repro import deps, dvcgen, params
from repro.registry import load_registry
from repro.runner import RUNTIME_PARAMS

REG = load_registry()
ANATOMY = ["The question", "The idea", "Parameters", "Setup", "Run", "Results against the paper",
           "At paper scale", "Try it", "References"]


def _nb(root, ch):
    return json.loads((root / ch.notebook).read_text())


def _params_cell(nb):
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    return "".join(tagged[0]["source"])


@pytest.mark.parametrize("ch", REG.chapters, ids=lambda c: c.id)
def test_registry_entry_is_complete(root, ch):
    assert (root / ch.notebook).is_file()
    assert ch.notebook == f"notebooks/{ch.family}/{ch.id}.ipynb"
    assert (root / ch.params_file).is_file()
    assert ch.claims, "every chapter states the paper's claims"
    bib = "".join(p.read_text() for p in (root / "book").glob("*.bib"))
    assert re.search(r"@\w+\{" + re.escape(ch.bibtex) + ",", bib), f"{ch.bibtex} missing from book/*.bib"
    for prof in params.PROFILES:
        params.resolve(ch, prof)  # every profile satisfies the schema


@pytest.mark.parametrize("ch", REG.chapters, ids=lambda c: c.id)
def test_notebook_committed_clean_with_parameters_and_anatomy(root, ch):
    nb = _nb(root, ch)
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            assert not c.get("outputs") and c.get("execution_count") is None, "notebooks are committed without outputs"
    ns: dict = {}
    exec(_params_cell(nb), ns)  # plain values only
    names = {k for k in ns if not k.startswith("__")}
    assert names == set(ch.parameters) | set(RUNTIME_PARAMS)
    cpu = params.resolve(ch, "cpu")
    assert {k: ns[k] for k in cpu} == cpu, "the parameters cell holds the cpu profile's values"
    headings = [line[3:].strip() for c in nb["cells"] if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("## ")]
    assert headings == ANATOMY
    src = deps.notebook_source(root / ch.notebook)
    assert f"Ledger(\"{ch.id}\"" in src, "the chapter records its claims in the ledger"


def test_dvc_yaml_is_generated_from_registry(root):
    assert (root / "dvc.yaml").read_text() == dvcgen.render(root=root), "run `repro dvc`"
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    assert set(stages) == {c.id for c in REG.chapters}
    lama = stages["fedlama"]
    assert "lib/repro/federated/fedlama.py" in lama["deps"] and "envs/cpu.lock" in lama["deps"]
    assert lama["params"] == [{"params/fedlama.yaml": ["cpu"]}]
    assert lama["cmd"] == "repro run fedlama --profile cpu"
    assert lama["outs"] == ["results/fedlama/cpu"], "the published set is the stage's one output"


def test_dependency_closure_follows_imports(tmp_path):
    lib = tmp_path / "lib" / "repro"
    (lib / "a").mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "a" / "__init__.py").write_text("from .x import f\n")
    (lib / "a" / "x.py").write_text("from repro import util\n")
    (lib / "a" / "y.py").write_text("import numpy\n")
    (lib / "util.py").write_text("")
    (lib / "other.py").write_text("")
    files = {p.relative_to(lib).as_posix() for p in deps.module_closure({"repro.a.y"}, tmp_path / "lib")}
    assert files == {"__init__.py", "a/__init__.py", "a/x.py", "a/y.py", "util.py"}


def _mini_project(tmp: Path) -> None:
    """Two chapters importing different modules, with trivial stage commands."""
    lib = tmp / "lib" / "repro"
    (lib / "fam").mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "fam" / "__init__.py").write_text("")
    (lib / "fam" / "one.py").write_text("A = 1\n")
    (lib / "fam" / "two.py").write_text("B = 2\n")
    for name, mod in (("c1", "one"), ("c2", "two")):
        nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": f"from repro.fam import {mod}\n",
                         "outputs": [], "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        (tmp / f"{name}.ipynb").write_text(json.dumps(nb))
    stages = {}
    for name in ("c1", "c2"):
        mods = deps.chapter_modules(tmp / f"{name}.ipynb", tmp / "lib")
        stages[name] = {"cmd": f"echo {name} > {name}.out", "deps": [f"{name}.ipynb", *(str(m.relative_to(tmp)) for m in mods)],
                        "outs": [f"{name}.out"]}
    (tmp / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))


def test_editing_a_module_reruns_only_its_chapters(tmp_path):
    dvc = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    run = lambda *a: subprocess.run([dvc, *a], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)  # noqa: E731
    _mini_project(tmp_path)
    assert run("init", "--no-scm", "-q").returncode == 0
    first = run("repro")
    assert first.returncode == 0, first.stderr
    assert "Running stage 'c1'" in first.stdout and "Running stage 'c2'" in first.stdout
    (tmp_path / "lib" / "repro" / "fam" / "two.py").write_text("B = 3\n")
    second = run("repro")
    assert second.returncode == 0, second.stderr
    assert "Running stage 'c2'" in second.stdout and "Running stage 'c1'" not in second.stdout
    # a shared parent package reruns both
    (tmp_path / "lib" / "repro" / "fam" / "__init__.py").write_text("# changed\n")
    third = run("repro")
    assert "Running stage 'c1'" in third.stdout and "Running stage 'c2'" in third.stdout


def test_a_chapter_registry_file_is_a_dependency_of_its_stage_only(root):
    """Editing one chapter's registry entry reruns that chapter alone; method modules belong to their users."""
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    for ch in REG.chapters:
        owners = [sid for sid, st in stages.items() if ch.source in st["deps"]]
        assert owners == [ch.id], f"{ch.source} is a dependency of {owners}"
    fedlama = [sid for sid, st in stages.items() if "lib/repro/federated/fedlama.py" in st["deps"]]
    assert fedlama == ["fedlama"]
    fedgrad_module = [sid for sid, st in stages.items() if "lib/repro/federated/robust.py" in st["deps"]]
    assert fedgrad_module == ["fedgrad"]


def test_killed_run_leaves_no_complete_looking_result(root, out_root):
    """SIGKILL during execution: no ledger record, no executed notebook; an older result stays intact."""
    old = out_root / "results" / "fedlama" / "smoke" / "record.json"
    old.parent.mkdir(parents=True)
    old.write_text('{"old": true}\n')
    proc = subprocess.Popen([sys.executable, "-m", "repro.cli", "run", "fedlama", "--profile", "smoke"],
                            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "REPRO_OUTPUT_ROOT": str(out_root)})
    staged = out_root / "build" / "staging" / "fedlama" / "smoke" / "executed.ipynb"
    deadline = time.monotonic() + 120
    while not staged.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert staged.exists(), "the run should have started executing"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert old.read_text() == '{"old": true}\n'
    assert not (out_root / "results" / "fedlama" / "smoke" / "run.json").exists()
    assert not (out_root / "results" / "fedlama" / "smoke" / "executed.ipynb").exists()
    assert not list((out_root / "results").rglob("*.tmp"))


def test_status_fresh_then_stale(root, out_root):
    """`repro status` compares a run's recorded input fingerprint with the current one."""
    from repro import runner
    from repro.atomic import write_json

    ch = REG.get("fedlama")
    values = params.resolve(ch, "smoke")
    res = out_root / "results" / ch.id / "smoke"
    write_json(res / "record.json", {"parameters": values, "claims": {}})
    write_json(res / "run.json", {"wall_time_s": 9.5, "inputs_hash": runner.inputs_hash(ch, "smoke", values)})
    st = runner.status(ch)
    assert st["smoke"] == {"state": "fresh", "wall_time_s": 9.5}
    assert st["cpu"]["state"] == "never run"
    write_json(res / "run.json", {"wall_time_s": 9.5, "inputs_hash": "0000"})
    assert runner.status(ch)["smoke"]["state"] == "stale"
    # a run with overridden parameters is not a fresh result of the profile
    other = {**values, "rounds": values["rounds"] * 2}
    write_json(res / "record.json", {"parameters": other, "claims": {}})
    write_json(res / "run.json", {"wall_time_s": 1.0, "inputs_hash": runner.inputs_hash(ch, "smoke", other)})
    assert runner.status(ch)["smoke"]["state"] == "stale"


def test_inputs_hash_tracks_params_and_files(root):
    from repro import runner

    ch = REG.get("fedlama")
    v = params.resolve(ch, "smoke")
    h = runner.inputs_hash(ch, "smoke", v)
    assert h == runner.inputs_hash(ch, "smoke", dict(v))
    assert h != runner.inputs_hash(ch, "smoke", {**v, "lr": 0.01})
    files = {p.relative_to(root).as_posix() for p in runner.chapter_inputs(ch)}
    assert {"notebooks/federated/fedlama.ipynb", "lib/repro/federated/fedlama.py", "envs/cpu.lock",
            "lib/repro/federated/chapters/fedlama.yaml"} <= files
