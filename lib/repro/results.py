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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from repro import atomic
from repro.paths import record_file, repo_root, run_file
from repro.registry import Chapter, Claim, load_registry
from repro.verdicts import HOLDING, NOT_JUDGED, PRECONDITION_NOT_MET, judge, mean_sd, rule_text, sign_at

LEDGER_NAME = "claims.json"


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What a driver records for one claim: the per-seed effect, and for a learning claim its arms.

    Attributes
    ----------
    values
        The claim's metric, one value per seed (arms paired by seed), or the one value of a deterministic claim.
    arms
        For a claim with a learning precondition: each compared arm's quality per seed (e.g. test accuracy).
    trivial
        The trivial level of the task in the arms' unit (chance, the majority class, the identity
        prediction), when the data decide it rather than the registry's ``trivial_value``.
    """

    values: Sequence[float]
    arms: Mapping[str, Sequence[float]] = field(default_factory=dict)
    trivial: float | None = None


@dataclass(frozen=True, kw_only=True)
class ClaimResult:
    """A claim's reproduced values over seeds and its verdict (with the numbers behind it)."""

    claim: str
    values: list[float]
    mean: float
    std: float
    n: int
    verdict: str
    ci_low: float | None = None
    ci_high: float | None = None
    ratio: float | None = None
    sign_holds: bool | None = None
    arms: dict[str, float] = field(default_factory=dict)
    trivial: float | None = None
    learned: bool | None = None
    margin_sweep: list[dict[str, Any]] = field(default_factory=list)

    @property
    def interval(self) -> str:
        """The 95% interval as text (empty for one seed)."""
        if self.ci_low is None or self.ci_high is None or self.n < 2:
            return ""
        return f"[{self.ci_low:.3g}, {self.ci_high:.3g}]"


def summarise(values: Sequence[float]) -> tuple[float, float]:
    """Return the mean and the sample standard deviation (0 for one value)."""
    return mean_sd(values)


def _learned(claim: Claim, evidence: Evidence) -> tuple[dict[str, float], float | None, bool | None]:
    """The arms' mean quality, the trivial level, and whether every arm clears it by the claim's margin."""
    learning = claim.learning
    if learning is None:
        return {}, None, None
    if not evidence.arms:
        raise ValueError(f"claim {claim.id!r} has a learning precondition ({learning.quality} beyond "
                         f"{learning.trivial}): record Evidence(values=..., arms={{arm: per-seed quality}})")
    trivial = evidence.trivial if evidence.trivial is not None else learning.trivial_value
    if trivial is None:
        raise ValueError(f"claim {claim.id!r}: its trivial level ({learning.trivial}) has no value; give "
                         "Evidence(trivial=...) or trivial_value in the registry")
    arms = {name: mean_sd(vals)[0] for name, vals in evidence.arms.items()}
    return arms, float(trivial), all(learning.clears(a, trivial) for a in arms.values())


class Ledger:
    """Collects one run's claim values, judges them by :mod:`repro.verdicts` and writes them atomically.

    Parameters
    ----------
    chapter_id
        The chapter's registry id.
    profile
        The profile this run used (``smoke`` runs are recorded, never judged).
    output_dir
        Where :meth:`save` writes ``claims.json`` (the runner's staging folder).
    """

    def __init__(self, chapter_id: str, profile: str, output_dir: str | Path) -> None:
        self.chapter: Chapter = load_registry().get(chapter_id)
        self.profile = profile
        self.output_dir = Path(output_dir)
        self.results: dict[str, ClaimResult] = {}

    def record(self, claim_id: str, values: Sequence[float] | Evidence) -> ClaimResult:
        """Record one claim's per-seed values (or its :class:`Evidence`) and compute its verdict.

        Raises
        ------
        ValueError
            If a value is not finite (the message names the claim), there are none, a deterministic
            claim gets more than one, or a learning claim lacks its arms.
        """
        claim = self.chapter.claim(claim_id)
        evidence = values if isinstance(values, Evidence) else Evidence(values=values)
        vals = [float(v) for v in evidence.values]
        if not all(math.isfinite(v) for v in vals):
            raise ValueError(f"chapter {self.chapter.id!r}, claim {claim_id!r}: non-finite value in {vals}")
        j = judge(claim, vals, profile=self.profile)
        arms, trivial, learned = _learned(claim, evidence)
        sweep = [{"null_value": v, "sign_holds": sign_at(claim, vals, v)} for v in claim.null_sweep]
        self.results[claim_id] = ClaimResult(
            claim=claim_id, values=vals, mean=j.mean, std=j.sd, n=j.n, verdict=j.verdict, ci_low=j.ci_low,
            ci_high=j.ci_high, ratio=j.ratio, sign_holds=j.sign_holds, arms=arms, trivial=trivial, learned=learned,
            margin_sweep=sweep)
        self._apply_preconditions()
        return self.results[claim_id]

    def record_all(self, values: Mapping[str, Sequence[float] | Evidence]) -> dict[str, ClaimResult]:
        """Record several claims at once (claim id to per-seed values or evidence); return their results."""
        return {claim_id: self.record(claim_id, vals) for claim_id, vals in values.items()}

    def _apply_preconditions(self) -> None:
        """Give "precondition not met" to every judged claim whose learning or named precondition fails."""
        for claim in self.chapter.claims:
            res = self.results.get(claim.id)
            if res is None or res.verdict in NOT_JUDGED:
                continue
            verdict = judge(claim, res.values, profile=self.profile).verdict
            pre = self.results.get(claim.precondition) if claim.precondition else None
            if res.learned is False or (pre is not None and pre.verdict not in HOLDING):
                verdict = PRECONDITION_NOT_MET
            self.results[claim.id] = replace(res, verdict=verdict)

    def rows(self) -> list[dict[str, Any]]:
        """One row per recorded claim, in registry order, for tables."""
        rows = []
        for claim in self.chapter.claims:
            r = self.results.get(claim.id)
            needs = [f"needs {claim.precondition}"] if claim.precondition else []
            if claim.learning is not None:
                needs.append(f"every arm ≥ {claim.learning.margin:g} beyond {claim.learning.trivial}")
            rows.append(
                {
                    "claim": claim.metric,
                    "paper": claim.paper_display,
                    "ours (mean ± sd)": "not run" if r is None else f"{r.mean:.3g} ± {r.std:.2g} {claim.unit}".strip(),
                    "95% interval": "" if r is None else r.interval,
                    "seeds": 0 if r is None else r.n,
                    "profile": self.profile,
                    "rule": rule_text(claim) + "".join(f"; {n}" for n in needs),
                    "verdict": "not run" if r is None else r.verdict,
                }
            )
        return rows

    def table(self) -> Any:  # a pandas Styler
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
    rec: dict[str, Any] = json.loads(p.read_text())
    run = run_file(chapter_id, profile)
    if run.is_file():
        rec["run"] = json.loads(run.read_text())
    return rec
