"""`make bench`: the project's speed targets, measured side by side in one run.

Timings live here and never in unit tests.  Each section prints its numbers
and the ratio that the target is stated in.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("REPRO_ROOT", str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from timing import timed  # noqa: E402


def bench_papermill() -> list[tuple[str, float, str]]:
    """Papermill's fixed cost per chapter: an empty notebook, against the smallest chapter run."""
    import nbformat
    import papermill as pm

    with tempfile.TemporaryDirectory() as tmp:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]})]
        nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        src = Path(tmp) / "empty.ipynb"
        nbformat.write(nb, src)
        empty = timed(lambda: pm.execute_notebook(str(src), str(Path(tmp) / "out.ipynb"), kernel_name="python3",
                                                  progress_bar=False, parameters={"x": 2}), repeat=2)
        env = {**os.environ, "REPRO_OUTPUT_ROOT": tmp}
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "repro.cli", "run", "fedlama", "--profile", "smoke"], env=env,
                       check=True, capture_output=True, cwd=ROOT)
        chapter = time.perf_counter() - t
    return [
        ("papermill, empty notebook", empty, "fixed cost per chapter"),
        ("fedlama at smoke via `repro run`", chapter, f"papermill overhead = {100 * empty / chapter:.0f}% of it"),
    ]


def bench_dvc_noop() -> list[tuple[str, float, str]]:
    """A no-op `dvc repro` (everything up to date) in a copy of a tiny DVC project."""
    dvc = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
        run = lambda *a: subprocess.run([dvc, *a], cwd=tmp, env=env, check=True, capture_output=True)  # noqa: E731
        Path(tmp, "in.txt").write_text("x\n")
        Path(tmp, "dvc.yaml").write_text("stages:\n  s:\n    cmd: cp in.txt out.txt\n    deps: [in.txt]\n    outs: [out.txt]\n")
        run("init", "--no-scm", "-q")
        run("repro", "-q")
        noop = timed(lambda: run("repro", "-q"))
    rows = [("dvc repro, nothing to do (tiny project)", noop, f"{noop / 2.0:.2f}x of the 2 s target")]
    up_to_date = (ROOT / "dvc.lock").is_file() and subprocess.run(
        [dvc, "status", "-q"], cwd=ROOT, env=env, capture_output=True).returncode == 0
    if up_to_date:  # only then is `dvc repro` a no-op here (after `make book`)
        real = timed(lambda: subprocess.run([dvc, "repro", "-q"], cwd=ROOT, env=env, capture_output=True), repeat=2)
        rows.append(("dvc repro, nothing to do (this repo)", real, f"{real / 2.0:.2f}x of the 2 s target"))
    return rows


def main() -> int:
    """Run every benchmark and print one table."""
    rows: list[tuple[str, float, str]] = []
    for section in (bench_papermill, bench_dvc_noop):
        print(f"... {section.__doc__.splitlines()[0]}", file=sys.stderr)
        rows += section()
    family_benches = sorted(p for p in (ROOT / "bench").glob("*.py") if p.stem not in ("run", "timing"))
    for f in family_benches:  # one file per family, each defines run() -> rows
        spec = importlib.util.spec_from_file_location(f.stem, f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        print(f"... {f.name}", file=sys.stderr)
        rows += mod.run()
    width = max(len(r[0]) for r in rows)
    print(f"\n{'benchmark':<{width}}  {'seconds':>9}  ratio")
    for name, sec, ratio in rows:
        print(f"{name:<{width}}  {sec:9.3f}  {ratio}")
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps([{"name": n, "seconds": s, "ratio": r} for n, s, r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
