"""Where the project's files live.

Every location is derived from the repository root, which is found from the
environment variable ``REPRO_ROOT`` or by walking up from the current working
directory to the folder holding ``dvc.yaml``/``pyproject.toml``.  Outputs can be
redirected with ``REPRO_OUTPUT_ROOT`` (the tests use this to stay out of the
real ``results/``).
"""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """Return the repository root.

    Returns
    -------
    Path
        ``$REPRO_ROOT`` if set, else the nearest ancestor of the working
        directory that holds ``pyproject.toml`` and a ``notebooks`` folder, else the
        checkout this module was imported from.
    """
    env = os.environ.get("REPRO_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for cand in (here, *here.parents):
        if (cand / "pyproject.toml").is_file() and (cand / "notebooks").is_dir():
            return cand
    return Path(__file__).resolve().parents[2]


def output_root() -> Path:
    """Return the folder under which runs write ``results/`` and ``build/``."""
    env = os.environ.get("REPRO_OUTPUT_ROOT")
    return Path(env).resolve() if env else repo_root()


def results_dir(chapter_id: str) -> Path:
    """Folder holding a chapter's ledger files, one JSON per profile."""
    return output_root() / "results" / chapter_id


def published_dir(chapter_id: str, profile: str) -> Path:
    """The published set of a chapter's run at ``profile``: record, run, executed notebook, figures.

    The runner replaces this folder as a whole, in one step, so its files
    always belong to one run.
    """
    return results_dir(chapter_id) / profile


def record_file(chapter_id: str, profile: str) -> Path:
    """The published ledger record (claims, parameters, provenance)."""
    return published_dir(chapter_id, profile) / "record.json"


def run_file(chapter_id: str, profile: str) -> Path:
    """The published run facts (wall time, when, input fingerprint)."""
    return published_dir(chapter_id, profile) / "run.json"


def executed_notebook(chapter_id: str, profile: str) -> Path:
    """Path of the notebook papermill executed for ``chapter_id`` at ``profile``."""
    return published_dir(chapter_id, profile) / "executed.ipynb"


def failed_notebook(chapter_id: str, profile: str) -> Path:
    """Where the executed notebook of a failed run is kept for inspection."""
    return output_root() / "build" / "failed" / chapter_id / f"{profile}.ipynb"


def data_dir() -> Path:
    """The DVC-tracked data folder (``data/``)."""
    return repo_root() / "data"


def cache_dir() -> Path:
    """An ignored scratch folder inside the repo (Ray, Flower, Matplotlib)."""
    return repo_root() / ".cache"
