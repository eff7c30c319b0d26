"""Assemble the Jupyter Book's sources from the registry and the executed chapters.

Generated (and git-ignored): ``book/_toc.yml`` (one part per family),
``book/chapters/<family>/<id>.ipynb`` (the executed notebook with a
provenance box added) and ``book/scoreboard.md`` (every claim of every
chapter with the paper's value, ours, the profile and the verdict).  Every
number on those pages comes from a ledger file; the only hand-typed numbers
are the paper's own values in the registry.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from matplotlib.figure import Figure

from repro import atomic, results
from repro.params import DEFAULT_PROFILE
from repro.paths import executed_notebook, repo_root
from repro.reference import REFERENCE_PROFILE, compare, latest_left_reference, load_reference
from repro.registry import BAND, Chapter, Registry, load_registry
from repro.runner import status, verdict_counts
from repro.verdicts import COUNTED_CLASSES, VERDICT_CLASSES, rule_text, verdict_class

#: The colour of each scoreboard class in the figures.
CLASS_COLOURS = {
    "reproduced": "#2e7d32",
    "direction only (no paper number)": "#fdd835",
    "smaller than the paper": "#fb8c00",
    "exceeds the paper": "#9ccc65",
    "not reproduced at this scale": "#c62828",
    "precondition not met": "#8d6e63",
    "structural": "#78909c",
    "modelled": "#7e57c2",
    "not judged": "#e0e0e0",
    "preconditions (not counted)": "#bdbdbd",
}


@dataclass(frozen=True, kw_only=True)
class ScoredClaim:
    """One claim of one chapter with its published result at a profile (None if never run)."""

    chapter: Chapter
    claim_id: str
    metric: str
    unit: str
    paper_value: float | None
    null_value: float
    paper_display: str
    rule: str
    mean: float | None
    std: float | None
    n: int
    verdict: str | None
    ci_low: float | None = None
    ci_high: float | None = None


def scored_claims(registry: Registry, profile: str) -> list[ScoredClaim]:
    """Every claim of every chapter with its ledger result at ``profile``."""
    out = []
    for ch in registry.chapters:
        rec = results.load_result(ch.id, profile)
        for claim in ch.claims:
            got = None if rec is None else rec["claims"].get(claim.id)
            out.append(ScoredClaim(
                chapter=ch, claim_id=claim.id, metric=claim.metric, unit=claim.unit, paper_value=claim.paper_value,
                null_value=claim.null_value, paper_display=claim.paper_display,
                rule=rule_text(claim), mean=None if got is None else got["mean"], std=None if got is None else got["std"],
                n=0 if got is None else got["n"], verdict=None if got is None else got["verdict"],
                ci_low=None if got is None else got.get("ci_low"), ci_high=None if got is None else got.get("ci_high"),
            ))
    return out


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]


def verdicts_by_family_svg(registry: Registry, claims: list[ScoredClaim]) -> str:
    """Stacked bars of verdict classes per family (an inline SVG)."""
    fams = [f for f in registry.families if any(c.chapter.family == f for c in claims)]
    fig = Figure(figsize=(7.5, 0.45 * len(fams) + 1.2))
    ax = fig.subplots()
    left = [0] * len(fams)
    for name in COUNTED_CLASSES:
        colour = CLASS_COLOURS[name]
        counts = [sum(1 for c in claims if c.chapter.family == f and c.verdict and verdict_class(c.verdict) == name)
                  for f in fams]
        ax.barh(range(len(fams)), counts, left=left, color=colour, label=name)
        left = [a + b for a, b in zip(left, counts)]
    ax.set_yticks(range(len(fams)), [registry.families[f] for f in fams])
    ax.invert_yaxis()
    ax.set_xlabel("claims")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4, fontsize=8, frameon=False)
    return _svg(fig)


def ours_vs_paper_svg(claims: list[ScoredClaim]) -> str:
    """Our effect against the paper's on log-log axes with the reproduction band; each point links to its chapter."""
    effects = [(abs(c.paper_value - c.null_value), c.mean - c.null_value, c.paper_value - c.null_value, c.verdict, c)
               for c in claims if c.paper_value is not None and c.mean is not None and c.verdict is not None]
    fig = Figure(figsize=(6.5, 5.5))
    ax = fig.subplots()
    shown = [(x, y, verdict, c) for x, y, gap, verdict, c in effects if x > 0 and y * gap > 0]
    if shown:
        lo = min(min(x, abs(y)) for x, y, _, _ in shown) / 3
        hi = max(max(x, abs(y)) for x, y, _, _ in shown) * 3
        grid = [lo, hi]
        ax.plot(grid, grid, color="black", lw=0.8, label="ours = paper")
        ax.fill_between(grid, [g * BAND[0] for g in grid], [g * BAND[1] for g in grid], color="0.85",
                        label=f"reproduction band ({BAND[0]:g}–{BAND[1]:g}×)")
        for x, y, verdict, c in shown:
            colour = CLASS_COLOURS[verdict_class(verdict)]
            dot = ax.scatter([x], [abs(y)], color=colour, edgecolor="black", s=36, zorder=3)
            dot.set_urls([f"chapters/{c.chapter.family}/{c.chapter.id}.html"])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xlabel("the paper's effect (|paper − null value|)")
    ax.set_ylabel("our effect, mean over seeds (same sign only)")
    missing = len(effects) - len(shown)
    ax.set_title(f"{len(shown)} claims with a number; {missing} with our effect of the opposite sign not shown",
                 fontsize=9)
    if shown:
        ax.legend(fontsize=8, loc="upper left")
    return _svg(fig)


def _md_cell(text: str, cell_id: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def provenance_markdown(record: dict[str, Any]) -> str:
    """The provenance box of a chapter page (a MyST admonition)."""
    prov = record["provenance"]
    run = record.get("run", {})
    wall = run.get("wall_time_s")
    rows = [
        ("profile", f"`{record['profile']}`"),
        ("git commit", f"`{prov['git_sha']}`"),
        ("environment lock", f"`{prov['env_lock']}` (sha256 `{prov['env_lock_sha256']}`)"),
        ("wall time", "unknown" if wall is None else f"{wall:.1f} s"),
        ("finished", run.get("finished_at", "unknown")),
        ("hardware", prov["hardware"]),
        ("rerun with", f"`{prov['command']}`"),
    ]
    if prov.get("checkpoints_from"):
        rows.append(("models", f"redrawn from the checkpoints of {prov['checkpoints_from']}, not retrained"))
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"```{{admonition}} Provenance of this page\n:class: note\n\n| | |\n|---|---|\n{table}\n```\n"


def profile_banner(profile: str) -> str:
    """A note on pages that show a profile other than the default one."""
    if profile == DEFAULT_PROFILE:
        return ""
    what = ("its numbers prove that the code runs and are not evidence of anything" if profile == "smoke"
            else "the paper's own scale")
    return f"```{{important}}\nThis page shows the `{profile}` profile: {what}.\n```\n"


def chapter_page(chapter: Chapter, profile: str, root: Path) -> dict[str, Any]:
    """The notebook the book renders for ``chapter``: the executed one plus its provenance box.

    The notebook's own ``parameters`` cell is hidden, so the page shows one
    parameters block: the values the run used (the cell papermill injected).
    A chapter never run at ``profile`` gets a short page that says so.
    """
    src = executed_notebook(chapter.id, profile)
    record = results.load_result(chapter.id, profile)
    if not src.is_file() or record is None:
        blank = json.loads((root / chapter.notebook).read_text())
        title = next(c for c in blank["cells"] if c["cell_type"] == "markdown")
        note = (f"```{{warning}}\nThis chapter has not been run at the `{profile}` profile on this machine yet: "
                f"run `repro run {chapter.id} --profile {profile}` (or `make book`).\n```\n")
        return {"cells": [title, _md_cell(note, "not-run")], "metadata": blank["metadata"], "nbformat": 4,
                "nbformat_minor": 5}
    nb: dict[str, Any] = json.loads(src.read_text())
    for cell in nb["cells"]:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    first_md = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown")
    box = (profile_banner(profile) + provenance_markdown(record) + reference_markdown(chapter, record)
           + papermill_markdown(chapter))
    nb["cells"].insert(first_md + 1, _md_cell(box, "provenance"))
    nb["cells"].insert(first_md + 2, _md_cell(fidelity_markdown(chapter), "fidelity"))
    return nb


def fidelity_markdown(chapter: Chapter) -> str:
    """The chapter's fidelity table: each part of the paper, implemented, substituted or omitted, and the score."""
    if not chapter.fidelity:
        return "## Fidelity to the paper\n\nThis chapter's fidelity table has not been drawn up yet.\n"
    rows = "\n".join(
        f"| {i.part} | {_cell(i.name)} | {i.status}{' (cpu profile only)' if i.cpu_only else ''} | "
        f"{_cell(i.by)} | {_cell(i.reason)} |" for i in chapter.fidelity)
    counts = {s: sum(1 for i in chapter.fidelity if i.status == s) for s in ("implemented", "substituted", "omitted")}
    return (
        "## Fidelity to the paper\n\n"
        f"**Fidelity score {chapter.fidelity_score:.2f}**: {counts['implemented']} of the paper's "
        f"{len(chapter.fidelity)} parts implemented, {counts['substituted']} substituted (half a point each) and "
        f"{counts['omitted']} omitted (see the {{doc}}`introduction </intro>`).\n\n"
        "| part | in the paper | here | substituted by | why |\n|---|---|---|---|---|\n" + rows + "\n"
    )


def reference_markdown(chapter: Chapter, record: dict[str, Any]) -> str:
    """The chapter's reference record beside the run on the page (empty when it has none)."""
    reference = load_reference(chapter.id)
    if reference is None:
        return ""
    mine = record["profile"] == REFERENCE_PROFILE
    checks = {c.claim: c for c in compare(reference, record)} if mine else {}
    rows = []
    for cid, ref in reference["claims"].items():
        ci = "" if ref.get("ci_low") is None or ref["n"] < 2 else f" [{ref['ci_low']:.3g}, {ref['ci_high']:.3g}]"
        check = checks.get(cid)
        here = "" if check is None else (f"{check.new_mean:.3g}, " + ("inside" if check.inside else "**outside**")
                                         + f" [{check.low:.3g}, {check.high:.3g}]")
        rows.append(f"| `{cid}` | {ref['mean']:.3g}{ci} (n={ref['n']}) | {ref['verdict']} | {here} |")
    return (
        "```{admonition} Reference record\n:class: note\n\n"
        f"`reference/{chapter.id}.json`: the committed `{REFERENCE_PROFILE}` run of commit "
        f"`{reference['git_sha'][:12]}` ({reference['finished_at']}, {reference['hardware']}). "
        "This page's run is set against the 95% prediction interval of the reference seeds "
        f"(`repro check {chapter.id}`).\n\n"
        "| claim | reference mean, 95% interval | reference verdict | this run against it |\n|---|---|---|---|\n"
        + "\n".join(rows) + "\n```\n"
    )


def papermill_markdown(chapter: Chapter) -> str:
    """How to rerun the chapter with papermill directly (the notebook checks what it is given)."""
    lists = [k for k, v in chapter.parameters.items() if v["type"].startswith("list[")]
    example = f' -p {lists[0]} "[...]"' if lists else ""
    return (
        "```{admonition} Rerun with papermill directly\n:class: tip\n\n"
        f"`papermill {chapter.notebook} out.ipynb -y \"$(repro params {chapter.id} --profile smoke)\"`"
        f" or `papermill {chapter.notebook} out.ipynb{example}`: the notebook checks every value against the "
        "chapter's schema before any work.\n```\n"
    )


def toc(registry: Registry) -> dict[str, Any]:
    """The table of contents: the intro, one part per family, then the scoreboard and references."""
    parts = [
        {"caption": registry.families[fam], "chapters": [{"file": f"chapters/{fam}/{ch.id}"} for ch in chs]}
        for fam, chs in registry.by_family().items()
    ]
    parts.append({"caption": "Results", "chapters": [{"file": "scoreboard"}, {"file": "status"}, {"file": "references"}]})
    return {"format": "jb-book", "root": "intro", "parts": parts}


def _ours(c: ScoredClaim) -> str:
    if c.mean is None:
        return "not run"
    interval = "" if c.ci_low is None or c.ci_high is None or c.n < 2 else f", 95% [{c.ci_low:.3g}, {c.ci_high:.3g}]"
    return f"{c.mean:.3g} ± {c.std:.2g} {c.unit}{interval} (n={c.n})"


def scoreboard_rows(registry: Registry, profile: str) -> list[dict[str, str]]:
    """One row per claim of every chapter, from the ledger files."""
    rows = []
    for c in scored_claims(registry, profile):
        rows.append({
            "chapter": f"{{doc}}`{c.chapter.id} <chapters/{c.chapter.family}/{c.chapter.id}>`",
            "claim": c.metric,
            "paper": c.paper_display,
            "ours": _ours(c),
            "profile": profile if c.mean is not None else "",
            "verdict": "not run" if c.verdict is None else c.verdict,
        })
    return rows


def _cell(text: str) -> str:
    """A markdown table cell: pipes escaped, line breaks folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def class_counts(registry: Registry, profile: str) -> dict[str, int]:
    """How many claims fall in each scoreboard class (plus ``not run``)."""
    counts = {name: 0 for name in VERDICT_CLASSES}
    counts["not run"] = 0
    for c in scored_claims(registry, profile):
        counts["not run" if c.verdict is None else verdict_class(c.verdict)] += 1
    return counts


def _score(chapter: Chapter) -> str:
    score = chapter.fidelity_score
    return "–" if score is None else f"{score:.2f}"


def family_table(registry: Registry, claims: list[ScoredClaim]) -> str:
    """Per family and chapter: the fidelity score and the count of each counted verdict class."""
    head = "| chapter | fidelity | " + " | ".join(COUNTED_CLASSES) + " |\n|---|---|" + "---|" * len(COUNTED_CLASSES) + "\n"
    rows = []
    for fam, chapters in registry.by_family().items():
        rows.append(f"| **{registry.families[fam]}** | |" + " |" * len(COUNTED_CLASSES))
        for ch in chapters:
            mine = [verdict_class(c.verdict) for c in claims if c.chapter.id == ch.id and c.verdict]
            counts = [str(mine.count(k)) if mine.count(k) else "" for k in COUNTED_CLASSES]
            rows.append(f"| {{doc}}`{ch.id} <chapters/{ch.family}/{ch.id}>` | {_score(ch)} | " + " | ".join(counts) + " |")
    return head + "\n".join(rows) + "\n"


def scoreboard_markdown(registry: Registry, profile: str) -> str:
    """The scoreboard page: the evidence first, the classes per family, two figures, then every claim."""
    rows = scoreboard_rows(registry, profile)
    claims = scored_claims(registry, profile)
    counts = class_counts(registry, profile)
    counted = sum(counts[k] for k in COUNTED_CLASSES)
    order = ", ".join(f"{name}: {counts[name]}" for name in COUNTED_CLASSES[1:])
    aside = ", ".join(f"{name}: {counts[name]}" for name in (*tuple(VERDICT_CLASSES)[len(COUNTED_CLASSES):], "not run")
                      if counts[name])
    scores = [ch.fidelity_score for ch in registry.chapters if ch.fidelity_score is not None]
    fidelity = (f" The mean fidelity score over {len(scores)} chapters is {sum(scores) / len(scores):.2f}."
                if scores else "")
    head = "| " + " | ".join(rows[0]) + " |\n|" + "---|" * len(rows[0]) + "\n" if rows else ""
    body = "".join("| " + " | ".join(_cell(v) for v in r.values()) + " |\n" for r in rows)
    smoke = ("\n```{important}\nThese are `smoke` runs: they prove that the code runs and are never judged.\n```\n"
             if profile == "smoke" else "")
    return (
        "# Scoreboard\n\n"
        f"Every claim of every chapter at the `{profile}` profile, judged by the book's one convention (see the "
        "{doc}`introduction <intro>`). This page is generated from the results ledger; nothing on it is typed "
        "by hand except the papers' own values.\n" + smoke + "\n"
        f"**{counts['reproduced']} of {counted} counted claims are reproduced within the band** (0.5–2× the "
        f"paper's number, with the 95% interval on the paper's side). The others: {order}."
        + (f" Shown, not counted: {aside}." if aside else "") + fidelity + "\n\n"
        "## Verdicts per family\n\n"
        "```{raw} html\n<div class=\"scoreboard-figure\">" + verdicts_by_family_svg(registry, claims) + "</div>\n```\n\n"
        + family_table(registry, claims) + "\n"
        "## Ours against the paper's\n\n"
        "Each point is a claim for which the paper gives a number, on log-log axes: the paper's effect against "
        "ours, both measured from the claim's null value. The grey band is the reproduction band; points above "
        "it exceed the paper, points below it are smaller than the paper's. Each point links to its chapter.\n\n"
        "```{raw} html\n<div class=\"scoreboard-figure\">" + ours_vs_paper_svg(claims) + "</div>\n```\n\n"
        "## Every claim\n\n"
        + head + body
    )


def gpu_line(on_gpu: list[str]) -> str:
    """The status page's sentence on GPU runs: which records ran on one, or that none did.

    Parameters
    ----------
    on_gpu
        ``chapter at profile`` labels of the records whose hardware names a GPU.
    """
    if on_gpu:
        return f"Runs on a GPU on record: {', '.join(on_gpu)}.\n\n"
    return ("No run on a GPU is on record: the `cuda` and `auto` device paths of the `paper` profiles have not "
            "run on this book's machines.\n\n")


def reference_line(flagged: list[str]) -> str:
    """The status page's sentence on chapters whose latest cpu run left its reference interval."""
    if flagged:
        return ("**Left their reference interval** (the latest `cpu` run's mean outside the 95% prediction interval "
                f"of the reference seeds): {'; '.join(flagged)}.\n\n")
    return "No chapter's latest `cpu` run left its reference interval.\n\n"


def status_markdown(registry: Registry) -> str:
    """The status page: per chapter and profile, the last run's wall time, date, hardware, freshness and verdicts."""
    rows: list[str] = []
    on_gpu: list[str] = []
    flagged: list[str] = []
    for ch in registry.chapters:
        st = status(ch)
        for prof, state in st.items():
            rec = results.load_result(ch.id, prof)
            run = (rec or {}).get("run", {})
            if results.GPU_MARK in (rec or {}).get("provenance", {}).get("hardware", ""):
                on_gpu.append(f"`{ch.id}` at `{prof}`")
            counts = verdict_counts(rec)
            if prof == REFERENCE_PROFILE and (left := latest_left_reference(ch.id)):
                flagged.append(f"`{ch.id}` ({', '.join(left)})")
            rows.append("| " + " | ".join([
                f"{{doc}}`{ch.id} <chapters/{ch.family}/{ch.id}>`", f"`{prof}`", state["state"],
                "" if state["wall_time_s"] is None else f"{state['wall_time_s']:.1f} s",
                run.get("finished_at", ""), (rec or {}).get("provenance", {}).get("hardware", ""),
                ", ".join(f"{k}: {n}" for k, n in counts.items()),
            ]) + " |")
    return (
        "# Execution status\n\n"
        "Every chapter at every profile: whether its last run is *fresh* (its notebook, the library modules it "
        "imports, its parameters, its data and the environment lock are unchanged since) or *stale*, how long "
        "it took, when, on what hardware, and its verdicts. `repro run <id> --dry-run` estimates a run's time "
        "from the same records. Generated from the results ledger.\n\n"
        + gpu_line(on_gpu) + reference_line(flagged) +
        "| chapter | profile | state | wall time | finished | hardware | verdicts |\n|---|---|---|---|---|---|---|\n"
        + "\n".join(rows) + "\n"
    )


@dataclass(frozen=True, kw_only=True)
class Course:
    """A book of chosen chapters, from ``book/courses/<name>.yaml``."""

    name: str
    title: str
    chapters: tuple[str, ...]
    intro: str = ""
    exercises: str = ""


def load_course(name: str, root: Path | None = None) -> Course:
    """Read and check ``book/courses/<name>.yaml`` (title, chapters in order, optional intro and exercises).

    Raises
    ------
    ValueError
        If the file is missing, names no chapters, or names a chapter the registry does not know.
    """
    path = (root or repo_root()) / "book" / "courses" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ValueError(f"course {name!r}: no file {path}; known courses: {', '.join(known) or 'none'}")
    raw = yaml.safe_load(path.read_text()) or {}
    chapters = tuple(raw.get("chapters") or ())
    if not chapters:
        raise ValueError(f"course {name!r}: {path} lists no chapters")
    known_ids = {c.id for c in load_registry().chapters}
    unknown = [c for c in chapters if c not in known_ids]
    if unknown:
        raise ValueError(f"course {name!r}: unknown chapter(s) {unknown} in {path}")
    return Course(name=name, title=raw.get("title", name), chapters=chapters, intro=raw.get("intro", ""),
                  exercises=raw.get("exercises", ""))


def course_registry(course: Course) -> Registry:
    """The registry restricted to a course's chapters, in the course's order."""
    reg = load_registry()
    chapters = tuple(reg.get(c) for c in course.chapters)
    order = list(dict.fromkeys(c.family for c in chapters))  # families in the order the course meets them
    fams = {f: reg.families[f] for f in order}
    return Registry(families=fams, chapters=chapters)


def book_dir_for(course: str | None, root: Path | None = None) -> Path:
    """Where the book's sources are assembled: ``book/``, or ``build/courses/<name>/`` for a course."""
    root = root or repo_root()
    return root / "book" if course is None else root / "build" / "courses" / course


def _course_sources(course: Course, root: Path, book: Path) -> None:
    """Copy the book's static sources into a course's folder, with the course's title, intro and exercises."""
    if book.exists():
        shutil.rmtree(book)
    shutil.copytree(root / "book", book, ignore=shutil.ignore_patterns("_build", "chapters", "_toc.yml", "scoreboard.md",
                                                                        "status.md", "courses"))
    config = yaml.safe_load((book / "_config.yml").read_text())
    config["title"] = course.title
    atomic.write_text(book / "_config.yml", yaml.safe_dump(config, sort_keys=False))
    if course.intro:
        atomic.write_text(book / "intro.md", f"# {course.title}\n\n{course.intro}\n\n"
                          + (book / "intro.md").read_text().split("\n", 1)[1])
    if course.exercises:
        atomic.write_text(book / "exercises.md", f"# Exercises\n\n{course.exercises}\n")


def assemble(profile: str = DEFAULT_PROFILE, root: Path | None = None, book_dir: Path | None = None,
             course: str | None = None) -> list[str]:
    """Write the generated book sources; return a line per file written.

    Parameters
    ----------
    profile
        Which profile's executed chapters and ledgers to render.
    root
        The repository root (notebooks, registry).
    book_dir
        The book folder to write into (default :func:`book_dir_for`).
    course
        A course name (``book/courses/<name>.yaml``): only its chapters, in its order.
    """
    root = root or repo_root()
    if course is None:
        registry = load_registry()
        book = Path(book_dir) if book_dir else book_dir_for(None, root)
    else:
        spec = load_course(course, root)
        registry = course_registry(spec)
        book = Path(book_dir) if book_dir else book_dir_for(course, root)
        _course_sources(spec, root, book)
    out = []
    chapters_dir = book / "chapters"
    if chapters_dir.exists():
        shutil.rmtree(chapters_dir)
    for ch in registry.chapters:
        page = chapter_page(ch, profile, root)
        path = chapters_dir / ch.family / f"{ch.id}.ipynb"
        atomic.write_text(path, json.dumps(page, indent=1, ensure_ascii=False) + "\n")
        out.append(f"chapter {path}")
    contents = toc(registry)
    if course is not None and (book / "exercises.md").is_file():
        contents["parts"][-1]["chapters"].insert(0, {"file": "exercises"})
    atomic.write_text(book / "_toc.yml", "# Generated by `repro book`.\n" + yaml.safe_dump(contents, sort_keys=False))
    atomic.write_text(book / "scoreboard.md", scoreboard_markdown(registry, profile))
    atomic.write_text(book / "status.md", status_markdown(registry))
    out += [f"toc {book / '_toc.yml'}", f"scoreboard {book / 'scoreboard.md'}", f"status {book / 'status.md'}"]
    return out
