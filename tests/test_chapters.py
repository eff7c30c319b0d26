"""Every chapter at the smoke profile, then a -W book build and a headless-browser check.

The tests in this module share one set of smoke runs (module fixture), so run
them on one worker (`pytest -n 2 --dist loadfile`).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from repro.book import assemble
from repro.registry import VERDICTS, load_registry

REG = load_registry()
pytestmark = pytest.mark.chapter


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, root):
    """Run every chapter at the smoke profile into a private output root."""
    import os

    out = tmp_path_factory.mktemp("smoke")
    env = {**os.environ, "REPRO_OUTPUT_ROOT": str(out)}
    procs = {}
    for ch in REG.chapters:
        procs[ch.id] = subprocess.run([sys.executable, "-m", "repro.cli", "run", ch.id, "--profile", "smoke"],
                                      cwd=root, env=env, capture_output=True, text=True, timeout=600)
    return out, procs


@pytest.mark.parametrize("ch", REG.chapters, ids=lambda c: c.id)
def test_chapter_runs_at_smoke(smoke, ch):
    out, procs = smoke
    proc = procs[ch.id]
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((out / "results" / ch.id / "smoke" / "record.json").read_text())
    assert set(rec["claims"]) == {c.id for c in ch.claims}
    for c in rec["claims"].values():
        assert c["verdict"] in VERDICTS and c["n"] == len(c["values"]) >= 1
    assert rec["figures"], "each chapter saves its headline figure"
    for f in rec["figures"]:
        png = out / "results" / ch.id / "smoke" / "figures" / f
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    prov = rec["provenance"]
    assert prov["command"] == f"repro run {ch.id} --profile smoke" and prov["env_lock_sha256"] != "missing"
    nb = json.loads((out / "results" / ch.id / "smoke" / "executed.ipynb").read_text())
    text = json.dumps(nb)
    assert "start_time" not in text and "end_time" not in text, "no timestamps in what DVC hashes"
    assert '"name": "stderr"' not in text, "no progress-bar timings in what DVC hashes"
    assert not any(o.get("output_type") == "error" for c in nb["cells"] for o in c.get("outputs", []))
    assert not (out / "build" / "staging" / ch.id).exists(), "empty staging folders removed after publishing"


def _plain(text: str) -> str:
    """HTML text with entities decoded and typographic quotes made plain (Sphinx smartens quotes)."""
    return html.unescape(text).replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')


@pytest.fixture(scope="module")
def built_book(smoke, root, tmp_path_factory):
    """The book built with -W -n --keep-going from the smoke runs."""
    import os

    out, _ = smoke
    book = tmp_path_factory.mktemp("book") / "book"
    shutil.copytree(root / "book", book, ignore=shutil.ignore_patterns("_build", "chapters", "_toc.yml", "scoreboard.md"))
    os.environ["REPRO_OUTPUT_ROOT"] = str(out)
    try:
        assemble(profile="smoke", book_dir=book)
    finally:
        del os.environ["REPRO_OUTPUT_ROOT"]
    jb = shutil.which("jupyter-book") or str(Path(sys.executable).with_name("jupyter-book"))
    proc = subprocess.run([jb, "build", str(book), "-W", "-n", "--keep-going"], capture_output=True, text=True,
                          timeout=600)
    return book, proc


def test_book_builds_without_warnings(built_book):
    book, proc = built_book
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    html = book / "_build" / "html"
    score = _plain((html / "scoreboard.html").read_text())
    for ch in REG.chapters:
        page = (html / "chapters" / ch.family / f"{ch.id}.html").read_text()
        assert "Provenance of this page" in page and "wall time" in page and "environment lock" in page
        assert ch.id in score
        for claim in ch.claims:
            assert _plain(" ".join(claim.metric.split()[:2])) in score


def test_scoreboard_lists_every_claim(built_book):
    book, _ = built_book
    md = (book / "scoreboard.md").read_text()
    rows = [l for l in md.splitlines() if l.startswith("| {doc}")]
    assert len(rows) == sum(len(c.claims) for c in REG.chapters)
    assert all(any(v in r for v in VERDICTS) for r in rows)


def test_chapter_page_renders_figure_in_chromium(built_book):
    book, proc = built_book
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is required (make setup installs it)")
    ch = REG.chapters[0]
    page = book / "_build" / "html" / "chapters" / ch.family / f"{ch.id}.html"
    with tempfile.TemporaryDirectory() as prof:
        res = subprocess.run(
            ["timeout", "90", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={prof}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    srcs = re.findall(r'<img[^>]+src="([^"]+\.png)"', dom)
    assert srcs, "the rendered chapter page shows at least one figure"
    for s in srcs:
        img = (page.parent / s).resolve()
        assert img.is_file() and img.stat().st_size > 5000
    assert "mjx-container" in dom, "equations are typeset by the bundled MathJax"
