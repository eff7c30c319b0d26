"""Every chapter at the smoke profile, then a -W book build and a headless-browser check.

The tests in this module share one set of smoke runs (module fixture, each
chapter run when first needed), so run them on one worker
(`pytest -n 2 --dist loadfile`).
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

from repro import results
from repro.book import assemble, gpu_line
from repro.registry import load_registry
from repro.verdicts import SMOKE_NOT_JUDGED

REG = load_registry()
pytestmark = pytest.mark.chapter


class SmokeRuns:
    """Smoke runs into one private output root, each chapter run once, when a test first asks for it.

    So ``pytest tests/test_chapters.py -k <id>`` runs only that chapter; the
    book tests ask for every chapter.
    """

    def __init__(self, out: Path, root: Path) -> None:
        self.out, self.root = out, root
        self.procs: dict[str, subprocess.CompletedProcess] = {}

    def proc(self, chapter_id: str) -> subprocess.CompletedProcess:
        """The finished smoke run of ``chapter_id`` (run now if not yet)."""
        import os

        if chapter_id not in self.procs:
            env = {**os.environ, "REPRO_OUTPUT_ROOT": str(self.out)}
            self.procs[chapter_id] = subprocess.run(
                [sys.executable, "-m", "repro.cli", "run", chapter_id, "--profile", "smoke"],
                cwd=self.root, env=env, capture_output=True, text=True, timeout=600)
        return self.procs[chapter_id]

    def all(self) -> Path:
        """Run every chapter not run yet; the output root."""
        for ch in REG.chapters:
            self.proc(ch.id)
        return self.out


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, root) -> SmokeRuns:
    """The module's smoke runs (see :class:`SmokeRuns`)."""
    return SmokeRuns(tmp_path_factory.mktemp("smoke"), root)


@pytest.mark.parametrize("ch", REG.chapters, ids=lambda c: c.id)
def test_chapter_runs_at_smoke(smoke, ch):
    out, proc = smoke.out, smoke.proc(ch.id)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((out / "results" / ch.id / "smoke" / "record.json").read_text())
    assert set(rec["claims"]) == {c.id for c in ch.claims}
    for c in rec["claims"].values():  # a smoke run proves the path and is never judged
        assert c["verdict"] == SMOKE_NOT_JUDGED and c["n"] == len(c["values"]) >= 1
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


LAYOUT_PROBE = """
window.addEventListener("load", () => {
  const col = document.querySelector("article.bd-article") || document.querySelector("main");
  const right = col.getBoundingClientRect().right + 1;
  let over = 0;
  for (const el of col.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    const scrolled = el.parentElement && el.parentElement.closest('mjx-container[display="true"]');
    if (box.width > 0 && box.right > right && !scrolled && !el.closest("div.cell_output table, .bd-article table")) {
      over += 1;
    }
  }
  const params = document.querySelectorAll(".tag_parameters, .tag_injected-parameters").length;
  document.body.setAttribute("data-overflow", String(over));
  document.body.setAttribute("data-parameter-blocks", String(params));
});
"""


def _add_layout_probe(book: Path) -> None:
    """Add a script to the test copy of the book that records overflow and parameter blocks in the DOM."""
    (book / "_static" / "layout-probe.js").write_text(LAYOUT_PROBE)
    config = (book / "_config.yml").read_text()
    (book / "_config.yml").write_text(config.replace('html_css_files: ["custom.css"]',
                                                     'html_css_files: ["custom.css"]\n    html_js_files: ["layout-probe.js"]'))


def _chromium_dom(page: Path) -> str:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is required (make setup installs it)")
    with tempfile.TemporaryDirectory() as prof:
        res = subprocess.run(
            ["timeout", "90", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={prof}", "--window-size=1280,900", "--virtual-time-budget=5000", "--dump-dom",
             page.as_uri()],
            capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _plain(text: str) -> str:
    """HTML text with entities decoded and typographic quotes made plain (Sphinx smartens quotes)."""
    return html.unescape(text).replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')


@pytest.fixture(scope="module")
def built_book(smoke, root, tmp_path_factory):
    """The book built with -W -n --keep-going from the smoke runs."""
    import os

    out = smoke.all()
    book = tmp_path_factory.mktemp("book") / "book"
    shutil.copytree(root / "book", book, ignore=shutil.ignore_patterns("_build", "chapters", "_toc.yml", "scoreboard.md",
                                                                        "status.md"))
    _add_layout_probe(book)
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
        assert "Fidelity to the paper" in page
        assert ch.id in score
        for claim in ch.claims:
            assert _plain(" ".join(claim.metric.split()[:2])) in score


def test_scoreboard_lists_every_claim(built_book):
    book, _ = built_book
    md = (book / "scoreboard.md").read_text()
    every = md.split("## Every claim", 1)[1]
    rows = [line for line in every.splitlines() if line.startswith("| {doc}")]
    assert len(rows) == sum(len(c.claims) for c in REG.chapters)
    assert all(r.rstrip(" |").endswith(SMOKE_NOT_JUDGED) for r in rows)
    assert "These are `smoke` runs" in md


def test_chapter_page_renders_figure_in_chromium(built_book):
    book, proc = built_book
    ch = REG.chapters[0]
    page = book / "_build" / "html" / "chapters" / ch.family / f"{ch.id}.html"
    dom = _chromium_dom(page)
    srcs = re.findall(r'<img[^>]+src="([^"]+\.png)"', dom)
    assert srcs, "the rendered chapter page shows at least one figure"
    for s in srcs:
        img = (page.parent / s).resolve()
        assert img.is_file() and img.stat().st_size > 5000
    assert "mjx-container" in dom, "equations are typeset by the bundled MathJax"


@pytest.mark.parametrize("family", list(REG.by_family()))
def test_pages_show_one_parameters_block_and_stay_in_the_column(built_book, family):
    """The first chapter of each family, rendered in Chromium at 1280 px."""
    book, _ = built_book
    ch = REG.by_family()[family][0]
    dom = _chromium_dom(book / "_build" / "html" / "chapters" / ch.family / f"{ch.id}.html")
    blocks = re.search(r'data-parameter-blocks="(\d+)"', dom)
    overflow = re.search(r'data-overflow="(\d+)"', dom)
    assert blocks and overflow, "the layout probe ran"
    assert blocks.group(1) == "1", f"{ch.id}: {blocks.group(1)} parameters blocks on the page"
    assert overflow.group(1) == "0", f"{ch.id}: {overflow.group(1)} elements overflow the content column"
    assert "Rerun with papermill directly" in dom and "This page shows the" in dom


def test_status_page_lists_every_chapter_and_profile(built_book):
    book, _ = built_book
    md = (book / "status.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| {doc}")]
    assert len(rows) == 3 * len(REG.chapters)
    smoke_rows = [r for r in rows if "| `smoke` |" in r]
    assert all("fresh" in r or "stale" in r for r in smoke_rows) and all(" s |" in r for r in smoke_rows)
    gpu_rows = [r for r in rows if results.GPU_MARK in r]
    assert ("No run on a GPU is on record" in md) == (not gpu_rows)  # the page says whether any run used a GPU


def test_gpu_line_names_the_runs_on_a_gpu_or_says_there_are_none():
    assert "No run on a GPU" in gpu_line([])
    assert gpu_line(["`fedlama` at `paper`"]) == "Runs on a GPU on record: `fedlama` at `paper`.\n\n"


def test_two_chapter_course_builds_with_only_its_chapters(smoke, root, tmp_path):
    """A course book holds only its chapters, in its order, in the table of contents and the scoreboard."""
    import os

    out = smoke.all()
    course_root = tmp_path / "repo"
    shutil.copytree(root / "book", course_root / "book", ignore=shutil.ignore_patterns("_build", "chapters", "_toc.yml"))
    (course_root / "notebooks").symlink_to(root / "notebooks")
    picked = [REG.chapters[-1].id, REG.chapters[0].id]
    (course_root / "book" / "courses" / "two.yaml").write_text(
        f"title: Two chapters\nchapters: {picked}\nintro: A course of two.\nexercises: Run both.\n")
    os.environ["REPRO_OUTPUT_ROOT"] = str(out)
    try:
        assemble(profile="smoke", root=course_root, course="two")
    finally:
        del os.environ["REPRO_OUTPUT_ROOT"]
    course_book = course_root / "build" / "courses" / "two"
    toc_text = (course_book / "_toc.yml").read_text()
    assert [line.split("/")[-1] for line in toc_text.splitlines() if "file: chapters/" in line] == picked
    score = (course_book / "scoreboard.md").read_text()
    rows = [line for line in score.splitlines() if line.startswith("| {doc}")]
    # the family table has one row per chapter (its second cell the fidelity score); the claims table one per claim
    per_chapter = [line for line in rows if re.match(r"\| \{doc\}`[^`]+` \| (–|\d\.\d\d) \|", line)]
    assert len(per_chapter) == len(picked)
    assert len(rows) - len(per_chapter) == sum(len(REG.get(c).claims) for c in picked)
    jb = shutil.which("jupyter-book") or str(Path(sys.executable).with_name("jupyter-book"))
    proc = subprocess.run([jb, "build", str(course_book), "-W", "-n", "--keep-going"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    html = course_book / "_build" / "html"
    assert sorted(p.stem for p in (html / "chapters").rglob("*.html")) == sorted(picked)
    assert "Two chapters" in (html / "intro.html").read_text() and (html / "exercises.html").is_file()


def test_papermill_direct_run_checks_its_parameters(root, tmp_path):
    """A reader's own papermill run: lists given as -p text are read, bad values are refused by name."""
    ch = REG.get("pnetcdf-compress")
    smoke = subprocess.run([sys.executable, "-m", "repro.cli", "params", ch.id, "--profile", "smoke"], cwd=root,
                           capture_output=True, text=True, check=True).stdout
    (tmp_path / "smoke.yaml").write_text(smoke)
    pm = [sys.executable, "-m", "papermill", str(root / ch.notebook), str(tmp_path / "out.ipynb"), "-k", "python3",
          "-f", str(tmp_path / "smoke.yaml"), "-p", "output_dir", str(tmp_path / "staging"), "--cwd", str(root)]
    ok = subprocess.run([*pm, "-p", "n_vars", "[3, 6]"], capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-3000:]
    bad = subprocess.run([*pm, "-p", "n_vars", "[0]"], capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "parameter 'n_vars[0]': 0 is below the minimum" in bad.stderr + bad.stdout
