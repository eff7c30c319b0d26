"""Reference records: each chapter's committed ``cpu`` result, and ``repro check`` against it.

A reference record, ``reference/<id>.json``, is the small, committed copy of
a chapter's published ``cpu`` record: per claim the per-seed values, their
mean, sd and 95% interval and the verdict, plus the commit, hardware, wall
time and parameters of the run.  :func:`write_reference` makes it from the
published record, so ``repro reference`` regenerates every one after
``make book``.

:func:`compare` sets a newer record beside the reference: per claim, whether
its mean lies in the 95% prediction interval of the reference seeds (the
test CORE-Bench applies to a reproduced number).  ``repro check ID`` reruns
the chapter and exits non-zero when a claim left its interval.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro import atomic, results
from repro.paths import repo_root
from repro.registry import Chapter, load_registry
from repro.verdicts import judge, prediction_interval

REFERENCE_PROFILE = "cpu"
"""The profile whose records are kept as references."""
EXACT_TOLERANCE = 1e-9
"""Relative tolerance of a reference with one value or no spread (a deterministic claim): the new mean must equal it."""


def reference_file(chapter_id: str, root: Path | None = None) -> Path:
    """Where a chapter's reference record lives: ``reference/<id>.json``."""
    return (root or repo_root()) / "reference" / f"{chapter_id}.json"


def load_reference(chapter_id: str, root: Path | None = None) -> dict[str, Any] | None:
    """The chapter's reference record, or ``None`` when it has none."""
    path = reference_file(chapter_id, root)
    return json.loads(path.read_text()) if path.is_file() else None


def reference_from_record(record: dict[str, Any]) -> dict[str, Any]:
    """The reference record of a published record: what a check needs and what a reader wants to see."""
    run = record.get("run", {})
    prov = record["provenance"]
    keep = ("values", "mean", "std", "n", "ci_low", "ci_high", "verdict")
    return {
        "chapter": record["chapter"],
        "profile": record["profile"],
        "git_sha": prov["git_sha"],
        "hardware": prov["hardware"],
        "env_lock_sha256": prov["env_lock_sha256"],
        "finished_at": run.get("finished_at", ""),
        "wall_time_s": run.get("wall_time_s"),
        "parameters": record["parameters"],
        "claims": {cid: {k: c.get(k) for k in keep} for cid, c in record["claims"].items()},
    }


def write_reference(chapter_id: str, root: Path | None = None) -> Path:
    """Write ``reference/<id>.json`` from the chapter's published ``cpu`` record.

    Raises
    ------
    FileNotFoundError
        When the chapter has no published ``cpu`` record.
    ValueError
        When that record is a dirty-tree or a failed one (its claims are not all recorded).
    """
    record = results.load_result(chapter_id, REFERENCE_PROFILE)
    if record is None:
        raise FileNotFoundError(f"{chapter_id} has no published {REFERENCE_PROFILE} record: run "
                                f"`repro run {chapter_id} --profile {REFERENCE_PROFILE}` first")
    chapter = load_registry().get(chapter_id)
    missing = sorted({c.id for c in chapter.claims} - set(record["claims"]))
    if missing:
        raise ValueError(f"{chapter_id}: the published {REFERENCE_PROFILE} record lacks claims {missing}; rerun it")
    path = reference_file(chapter_id, root)
    atomic.write_text(path, json.dumps(reference_from_record(record), indent=1, sort_keys=True) + "\n")
    return path


def rejudged(chapter: Chapter, reference: dict[str, Any]) -> dict[str, str]:
    """The verdict the current registry gives each reference claim's values, before preconditions."""
    return {cid: judge(chapter.claim(cid), c["values"], profile=reference["profile"]).verdict
            for cid, c in reference["claims"].items()}


@dataclass(frozen=True, kw_only=True)
class ClaimCheck:
    """One claim of a newer run set against its reference seeds.

    Attributes
    ----------
    claim
        The claim id.
    reference_mean, low, high
        The reference mean and the 95% prediction interval for the new run's mean.
    new_mean, new_n
        The new run's mean and its number of seeds.
    inside
        Whether the new mean lies in the interval.
    """

    claim: str
    reference_mean: float
    low: float
    high: float
    new_mean: float
    new_n: int
    inside: bool

    def line(self) -> str:
        """One line of ``repro check``'s report."""
        mark = "inside" if self.inside else "OUTSIDE"
        return (f"  {self.claim}: {self.new_mean:.4g} (n={self.new_n}) {mark} the reference's 95% prediction "
                f"interval [{self.low:.4g}, {self.high:.4g}] (reference mean {self.reference_mean:.4g})")


def _inside(value: float, low: float, high: float) -> bool:
    if low == high:  # no spread: a deterministic value must come back unchanged
        return math.isclose(value, low, rel_tol=EXACT_TOLERANCE, abs_tol=EXACT_TOLERANCE)
    return low <= value <= high


def compare(reference: dict[str, Any], record: dict[str, Any]) -> list[ClaimCheck]:
    """Each claim of ``record`` against the prediction interval of ``reference``'s seeds.

    Raises
    ------
    ValueError
        When the two records are of different chapters, or the new record lacks a reference claim.
    """
    if reference["chapter"] != record["chapter"]:
        raise ValueError(f"reference of {reference['chapter']!r} set against a record of {record['chapter']!r}")
    out = []
    for cid, ref in reference["claims"].items():
        new = record["claims"].get(cid)
        if new is None:
            raise ValueError(f"{record['chapter']}: the new record has no claim {cid!r}")
        low, high = prediction_interval(ref["values"], new["n"])
        out.append(ClaimCheck(claim=cid, reference_mean=ref["mean"], low=low, high=high, new_mean=new["mean"],
                              new_n=new["n"], inside=_inside(new["mean"], low, high)))
    return out


def latest_left_reference(chapter_id: str) -> list[str] | None:
    """The claims whose latest published ``cpu`` mean left the reference interval (``None``: nothing to compare)."""
    reference = load_reference(chapter_id)
    record = results.load_result(chapter_id, REFERENCE_PROFILE)
    if reference is None or record is None:
        return None
    try:
        return [c.claim for c in compare(reference, record) if not c.inside]
    except ValueError:
        return list(reference["claims"])
