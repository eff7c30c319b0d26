"""Assemble the Jupyter Book's sources from the registry and the executed chapters.

Generated (and git-ignored): ``book/_toc.yml`` (one part per family),
``book/chapters/<family>/<id>.ipynb`` (the executed notebook with a
provenance box added) and ``book/scoreboard.md`` (every claim of every
chapter with the paper's value, ours, the profile and the verdict).  Every
number on those pages comes from a ledger file; the only hand-typed numbers
are the paper's own values in the registry.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from repro import atomic, results
from repro.params import DEFAULT_PROFILE
from repro.paths import executed_notebook, repo_root
from repro.registry import Chapter, Registry, load_registry


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
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"```{{admonition}} Provenance of this page\n:class: note\n\n| | |\n|---|---|\n{table}\n```\n"


def chapter_page(chapter: Chapter, profile: str, root: Path) -> dict[str, Any]:
    """The notebook the book renders for ``chapter``: the executed one plus its provenance box.

    A chapter never run at ``profile`` gets a short page that says so.
    """
    src = executed_notebook(chapter.id, profile)
    record = results.load_result(chapter.id, profile)
    if not src.is_file() or record is None:
        nb = json.loads((root / chapter.notebook).read_text())
        title = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
        note = (f"```{{warning}}\nThis chapter has not been run at the `{profile}` profile on this machine yet: "
                f"run `repro run {chapter.id} --profile {profile}` (or `make book`).\n```\n")
        return {"cells": [title, _md_cell(note, "not-run")], "metadata": nb["metadata"], "nbformat": 4, "nbformat_minor": 5}
    nb = json.loads(src.read_text())
    first_md = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown")
    nb["cells"].insert(first_md + 1, _md_cell(provenance_markdown(record), "provenance"))
    return nb


def toc(registry: Registry) -> dict[str, Any]:
    """The table of contents: the intro, one part per family, then the scoreboard and references."""
    parts = [
        {"caption": registry.families[fam], "chapters": [{"file": f"chapters/{fam}/{ch.id}"} for ch in chs]}
        for fam, chs in registry.by_family().items()
    ]
    parts.append({"caption": "Results", "chapters": [{"file": "scoreboard"}, {"file": "references"}]})
    return {"format": "jb-book", "root": "intro", "parts": parts}


def scoreboard_rows(registry: Registry, profile: str) -> list[dict[str, str]]:
    """One row per claim of every chapter, from the ledger files."""
    rows = []
    for ch in registry.chapters:
        rec = results.load_result(ch.id, profile)
        for claim in ch.claims:
            got = None if rec is None else rec["claims"].get(claim.id)
            rows.append({
                "chapter": f"{{doc}}`{ch.id} <chapters/{ch.family}/{ch.id}>`",
                "claim": claim.metric,
                "paper": claim.paper_display,
                "ours": "not run" if got is None else f"{got['mean']:.2f} ± {got['std']:.2f} {claim.unit} (n={got['n']})",
                "profile": profile if got else "",
                "verdict": "not run" if got is None else got["verdict"],
            })
    return rows


def scoreboard_markdown(registry: Registry, profile: str) -> str:
    """The scoreboard page."""
    rows = scoreboard_rows(registry, profile)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = ", ".join(f"{v}: {n}" for v, n in sorted(counts.items()))
    head = "| " + " | ".join(rows[0]) + " |\n|" + "---|" * len(rows[0]) + "\n" if rows else ""
    body = "".join("| " + " | ".join(r.values()) + " |\n" for r in rows)
    return (
        "# Scoreboard\n\n"
        f"Every claim of every chapter at the `{profile}` profile: the paper's value, ours (mean ± standard "
        "deviation over seeds), and the verdict computed from the rule in the chapter registry. "
        "This page is generated from the results ledger; nothing on it is typed by hand except the papers' own values.\n\n"
        f"**Totals.** {summary or 'no claims yet'}\n\n"
        "Verdicts: *reproduced* means the registry's threshold for the claim was met; *direction only* means "
        "the effect points the paper's way but falls short of it; *not reproduced at this scale* means neither.\n\n"
        + head + body
    )


def assemble(profile: str = DEFAULT_PROFILE, root: Path | None = None, book_dir: Path | None = None) -> list[str]:
    """Write the generated book sources; return a line per file written.

    Parameters
    ----------
    profile
        Which profile's executed chapters and ledgers to render.
    root
        The repository root (notebooks, registry).
    book_dir
        The book folder to write into (default ``<root>/book``).
    """
    root = root or repo_root()
    registry = load_registry()
    book = Path(book_dir) if book_dir else root / "book"
    out = []
    chapters_dir = book / "chapters"
    if chapters_dir.exists():
        shutil.rmtree(chapters_dir)
    for ch in registry.chapters:
        page = chapter_page(ch, profile, root)
        path = chapters_dir / ch.family / f"{ch.id}.ipynb"
        atomic.write_text(path, json.dumps(page, indent=1, ensure_ascii=False) + "\n")
        out.append(f"chapter {path}")
    atomic.write_text(book / "_toc.yml", "# Generated by `repro book`.\n" + yaml.safe_dump(toc(registry), sort_keys=False))
    atomic.write_text(book / "scoreboard.md", scoreboard_markdown(registry, profile))
    out += ["toc book/_toc.yml", "scoreboard book/scoreboard.md"]
    return out
