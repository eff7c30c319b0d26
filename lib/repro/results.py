"""The results ledger: reproduced values, verdicts and provenance.

A notebook records, for each of its chapter's claims, the metric's value for
every seed.  The ledger turns them into a mean and a spread, applies the
registry's verdict rule and saves everything atomically.  The runner then adds
provenance (git sha, environment-lock hash, profile, wall time, hardware) and
publishes the record under ``results/<id>/<profile>.json``.

Nothing in a ledger file is typed by hand: the paper's values come from the
registry, ours from the run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from repro import atomic
from repro.paths import record_file, repo_root, run_file
from repro.registry import PRECONDITION_NOT_MET, Chapter, load_registry

LEDGER_NAME = "claims.json"


@dataclass(frozen=True)
class ClaimResult:
    """A claim's reproduced value over seeds and its verdict."""

    claim: str
    values: list[float]
    mean: float
    std: float
    n: int
    verdict: str


def summarise(values: Sequence[float]) -> tuple[float, float]:
    """Return the mean and the sample standard deviation (0 for one value)."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values to summarise")
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    return mean, math.sqrt(var)


class Ledger:
    """Collects one run's claim values and writes them atomically.

    Parameters
    ----------
    chapter_id
        The chapter's registry id.
    profile
        The profile this run used.
    output_dir
        Where :meth:`save` writes ``claims.json`` (the runner's staging folder).
    """

    def __init__(self, chapter_id: str, profile: str, output_dir: str | Path) -> None:
        self.chapter: Chapter = load_registry().get(chapter_id)
        self.profile = profile
        self.output_dir = Path(output_dir)
        self.results: dict[str, ClaimResult] = {}

    def record(self, claim_id: str, values: Sequence[float]) -> ClaimResult:
        """Record the per-seed values of one claim's metric and compute its verdict.

        Raises
        ------
        ValueError
            If a value is not finite (the message names the claim), or there are none.
        """
        claim = self.chapter.claim(claim_id)
        vals = [float(v) for v in values]
        if not all(math.isfinite(v) for v in vals):
            raise ValueError(f"chapter {self.chapter.id!r}, claim {claim_id!r}: non-finite value in {vals}")
        mean, std = summarise(vals)
        self.results[claim_id] = ClaimResult(claim_id, vals, mean, std, len(vals), claim.verdict(mean, std))
        self._apply_preconditions()
        return self.results[claim_id]

    def record_all(self, values: dict[str, Sequence[float]]) -> dict[str, ClaimResult]:
        """Record several claims at once (claim id to per-seed values); return their results."""
        return {claim_id: self.record(claim_id, vals) for claim_id, vals in values.items()}

    def _apply_preconditions(self) -> None:
        """Give "precondition not met" to every recorded claim whose precondition claim does not hold."""
        for claim in self.chapter.claims:
            res = self.results.get(claim.id)
            pre = self.results.get(claim.precondition) if claim.precondition else None
            if res is None or pre is None:
                continue
            holds = self.chapter.claim(claim.precondition).sign_holds(pre.mean, pre.std)
            verdict = claim.verdict(res.mean, res.std) if holds else PRECONDITION_NOT_MET
            self.results[claim.id] = replace(res, verdict=verdict)

    def rows(self) -> list[dict[str, Any]]:
        """One row per recorded claim, in registry order, for tables."""
        rows = []
        for claim in self.chapter.claims:
            r = self.results.get(claim.id)
            rows.append(
                {
                    "claim": claim.metric,
                    "paper": claim.paper_display,
                    "ours (mean ± sd)": "not run" if r is None else f"{r.mean:.2f} ± {r.std:.2f} {claim.unit}".strip(),
                    "seeds": 0 if r is None else r.n,
                    "profile": self.profile,
                    "rule": claim.rule + (f"; needs {claim.precondition}" if claim.precondition else ""),
                    "verdict": "not run" if r is None else r.verdict,
                }
            )
        return rows

    def table(self):  # -> pandas.io.formats.style.Styler
        """The claims table, styled for display in the notebook (full text, no index)."""
        import pandas as pd

        return pd.DataFrame(self.rows()).style.hide(axis="index")

    def save(self) -> Path:
        """Write the ledger atomically to ``output_dir/claims.json``; return its path."""
        missing = [c.id for c in self.chapter.claims if c.id not in self.results]
        if missing:
            raise ValueError(f"chapter {self.chapter.id!r}: claims not recorded: {missing}")
        path = self.output_dir / LEDGER_NAME
        atomic.write_json(
            path,
            {
                "chapter": self.chapter.id,
                "profile": self.profile,
                "claims": {k: asdict(v) for k, v in self.results.items()},
            },
        )
        return path


def git_sha(root: Path | None = None) -> str:
    """The checkout's commit (with ``-dirty`` if the tree has changes), or ``unknown``."""
    root = root or repo_root()
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def env_lock_path(root: Path | None = None) -> Path:
    """The environment lock this run's environment was built from."""
    root = root or repo_root()
    return root / os.environ.get("REPRO_ENV_LOCK", "envs/cpu.lock")


def env_lock_hash(root: Path | None = None) -> str:
    """SHA-256 (first 16 hex digits) of the environment lock, or ``missing``."""
    p = env_lock_path(root)
    if not p.is_file():
        return "missing"
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16]


GPU_MARK = ", GPU "
"""What :func:`hardware` writes before a GPU's name (the status page looks for it)."""


def hardware() -> str:
    """A one-line description of the machine (CPU cores, memory, GPU if any)."""
    cores = os.cpu_count() or 0
    try:
        mem_kb = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal")).split()[1])
        mem = f"{mem_kb / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        mem = "? GiB"
    gpu = ""
    try:
        import torch

        if torch.cuda.is_available():
            gpu = f"{GPU_MARK}{torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return f"{platform.machine()} {cores} cores, {mem}{gpu}, {platform.system()} {platform.release()}"


def load_result(chapter_id: str, profile: str) -> dict[str, Any] | None:
    """Return the published record of ``chapter_id`` at ``profile``, or ``None``."""
    p = record_file(chapter_id, profile)
    if not p.is_file():
        return None
    rec = json.loads(p.read_text())
    run = run_file(chapter_id, profile)
    if run.is_file():
        rec["run"] = json.loads(run.read_text())
    return rec
