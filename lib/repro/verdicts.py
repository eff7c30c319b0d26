"""The book's verdict convention (version 2), applied alike to every claim.

A claim is a signed effect against a null value (:class:`repro.registry.Claim`).
Its verdict comes from the values the chapter recorded, one per seed, through
:func:`judge`:

* a **measured** claim is judged on the 95% confidence interval of the mean
  effect over seeds (Student t on the per-seed effects; the driver pairs the
  arms by seed).  The sign holds when the interval excludes the null value on
  the paper's side.  Then it is *reproduced* when the mean effect is within
  :data:`repro.registry.BAND` times the paper's number, *exceeds the paper*
  or is *smaller than the paper* outside the band, and *direction reproduced
  (the paper gives no number)* when the paper has no number: a class of its
  own, never counted as a reproduction.  One seed cannot be judged.
* a **deterministic** claim (a simulator or an analytic model) is one value at
  one named configuration; the sign is that value against the null value.
* a **modelled** claim (fixed by constants the chapter assumed) holds or not,
  and, with a paper number, lies in the band or outside it.
* a **structural** claim (true by construction) must hold on every seed.
* a **precondition** claim (what another claim needs, such as "the attack
  works") holds or fails and is never counted on the scoreboard.
* nothing recorded at the ``smoke`` profile is judged.

The ledger (:mod:`repro.results`) adds the two preconditions that need more
than one claim's values: another claim that must hold, and the learning
precondition (every arm of an accuracy or quality claim clears the trivial
level by a stated margin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from scipy import stats

from repro.registry import BAND, Claim

LEVEL = 0.95
"""The confidence level of every interval in the book."""

SMOKE_PROFILE = "smoke"
"""The profile that proves a code path and is never judged."""

REPRODUCED = "reproduced"
EXCEEDS = "exceeds the paper"
SMALLER = "smaller than the paper"
DIRECTION_ONLY = "direction reproduced (the paper gives no number)"
NOT_REPRODUCED = "not reproduced at this scale"
PRECONDITION_NOT_MET = "precondition not met"
STRUCTURAL_HOLDS = "structural check"
STRUCTURAL_FAILS = "structural check failed"
MODELLED_IN_BAND = "modelled, in band"
MODELLED_OUTSIDE = "modelled, outside the band"
MODELLED_HOLDS = "modelled"
MODELLED_FAILS = "modelled, does not hold"
PRECONDITION_HOLDS = "precondition holds"
PRECONDITION_FAILS = "precondition fails"
SMOKE_NOT_JUDGED = "smoke: not judged"
ONE_SEED = "not judged: one seed"

MEASURED_VERDICTS = (REPRODUCED, EXCEEDS, SMALLER, DIRECTION_ONLY, NOT_REPRODUCED)
"""Verdicts of measured claims, best first."""
STRUCTURAL_VERDICTS = (STRUCTURAL_HOLDS, STRUCTURAL_FAILS)
MODELLED_VERDICTS = (MODELLED_IN_BAND, MODELLED_OUTSIDE, MODELLED_HOLDS, MODELLED_FAILS)
PRECONDITION_VERDICTS = (PRECONDITION_HOLDS, PRECONDITION_FAILS)
NOT_JUDGED = (SMOKE_NOT_JUDGED, ONE_SEED)
VERDICTS = (*MEASURED_VERDICTS, PRECONDITION_NOT_MET, *STRUCTURAL_VERDICTS, *MODELLED_VERDICTS,
            *PRECONDITION_VERDICTS, *NOT_JUDGED)
"""Every verdict a record can carry."""

HOLDING = (REPRODUCED, EXCEEDS, SMALLER, DIRECTION_ONLY, STRUCTURAL_HOLDS, MODELLED_IN_BAND, MODELLED_OUTSIDE,
           MODELLED_HOLDS, PRECONDITION_HOLDS)
"""Verdicts under which the claim's sign holds."""
FAILING = (NOT_REPRODUCED, STRUCTURAL_FAILS, MODELLED_FAILS, PRECONDITION_FAILS)
"""Verdicts under which the claim's sign fails."""

VERDICT_CLASSES: dict[str, tuple[str, ...]] = {
    "reproduced": (REPRODUCED,),
    "direction only (no paper number)": (DIRECTION_ONLY,),
    "smaller than the paper": (SMALLER,),
    "exceeds the paper": (EXCEEDS,),
    "not reproduced at this scale": (NOT_REPRODUCED,),
    "precondition not met": (PRECONDITION_NOT_MET,),
    "structural": STRUCTURAL_VERDICTS,
    "modelled": MODELLED_VERDICTS,
    "not judged": NOT_JUDGED,
    "preconditions (not counted)": PRECONDITION_VERDICTS,
}
"""Scoreboard classes in display order (the evidence first) and the verdicts each holds."""
COUNTED_CLASSES = tuple(VERDICT_CLASSES)[:8]
"""The classes the scoreboard counts; smoke runs and precondition claims are shown, not counted."""


def verdict_class(verdict: str) -> str:
    """The scoreboard class of a verdict.

    Raises
    ------
    ValueError
        For a string that is no verdict.
    """
    for name, members in VERDICT_CLASSES.items():
        if verdict in members:
            return name
    raise ValueError(f"unknown verdict {verdict!r}")


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (0 for one value).

    Raises
    ------
    ValueError
        For no values.
    """
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values to summarise")
    mean = math.fsum(vals) / len(vals)
    if len(vals) < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1))


def t_quantile(n: int, level: float = LEVEL) -> float:
    """The two-sided Student t quantile for ``n`` values (``n - 1`` degrees of freedom)."""
    if n < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {n}")
    return float(stats.t.ppf(0.5 + level / 2, n - 1))


def confidence_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """The Student t confidence interval of the mean of ``values`` (at least two of them)."""
    mean, sd = mean_sd(values)
    half = t_quantile(len(values), level) * sd / math.sqrt(len(values))
    return mean - half, mean + half


def prediction_interval(reference: Sequence[float], new_count: int, level: float = LEVEL) -> tuple[float, float]:
    """Where the mean of ``new_count`` new seeds should fall, given the ``reference`` seeds.

    The Student t prediction interval ``mean ± t * sd * sqrt(1/n + 1/m)``, with
    ``n`` reference seeds and ``m = new_count`` new ones.  One reference value
    (a deterministic claim) gives the point itself.
    """
    mean, sd = mean_sd(reference)
    if len(reference) < 2:
        return mean, mean
    half = t_quantile(len(reference), level) * sd * math.sqrt(1 / len(reference) + 1 / max(new_count, 1))
    return mean - half, mean + half


@dataclass(frozen=True, kw_only=True)
class Judgement:
    """A claim's values and what the convention makes of them.

    Attributes
    ----------
    verdict
        One of :data:`VERDICTS`.
    mean, sd, n
        Mean and sample standard deviation of the per-seed values, and their number.
    ci_low, ci_high
        The 95% confidence interval of the mean (the value itself for one deterministic value;
        ``None`` for one seed of a claim that is not deterministic).
    ratio
        Our effect over the paper's, both from the null value (``None`` without a paper number).
    sign_holds
        Whether the interval (or the value) lies beyond the null value on the paper's side.
    """

    verdict: str
    mean: float
    sd: float
    n: int
    ci_low: float | None
    ci_high: float | None
    ratio: float | None
    sign_holds: bool | None


def _beyond(claim: Claim, low: float, high: float) -> bool:
    return low > claim.null_value if claim.direction == "higher" else high < claim.null_value


def in_band(ratio: float | None) -> bool:
    """Whether our effect over the paper's lies in the reproduction band."""
    return ratio is not None and BAND[0] <= ratio <= BAND[1]


def judge(claim: Claim, values: Sequence[float], *, profile: str) -> Judgement:
    """Judge a claim's per-seed values by the book's convention.

    Parameters
    ----------
    claim
        The registry's claim.
    values
        One value of the claim's metric per seed (one value for a deterministic claim).
    profile
        The profile of the run; ``smoke`` is never judged.

    Returns
    -------
    Judgement
        The verdict with the numbers it rests on.

    Raises
    ------
    ValueError
        For no values, a value that is not finite, or more than one value of a deterministic claim.
    """
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError(f"claim {claim.id!r}: no values")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"claim {claim.id!r}: non-finite value in {vals}")
    if claim.deterministic and len(vals) != 1:
        raise ValueError(f"claim {claim.id!r} is deterministic (judged at {claim.configuration!r}): record its value "
                         f"once, not {len(vals)} times; a sweep is a figure, not an sd")
    mean, sd = mean_sd(vals)
    n = len(vals)
    low: float | None
    high: float | None
    if n >= 2:
        low, high = confidence_interval(vals)
    elif claim.deterministic or claim.kind == "structural":
        low = high = mean
    else:
        low = high = None
    holds = None if low is None or high is None else _beyond(claim, low, high)
    if claim.kind == "structural":  # true by construction: it must hold on every seed
        holds = all(_beyond(claim, v, v) for v in vals)
    ratio = claim.ratio(mean)
    base = Judgement(verdict="", mean=mean, sd=sd, n=n, ci_low=low, ci_high=high, ratio=ratio, sign_holds=holds)
    return replace(base, verdict=_verdict(claim, holds, ratio, profile))


def _verdict(claim: Claim, holds: bool | None, ratio: float | None, profile: str) -> str:
    if profile == SMOKE_PROFILE:
        return SMOKE_NOT_JUDGED
    if holds is None:
        return ONE_SEED
    if claim.kind == "structural":
        return STRUCTURAL_HOLDS if holds else STRUCTURAL_FAILS
    if claim.kind == "precondition":
        return PRECONDITION_HOLDS if holds else PRECONDITION_FAILS
    if claim.kind == "modelled":
        if not holds:
            return MODELLED_FAILS
        if ratio is None:
            return MODELLED_HOLDS
        return MODELLED_IN_BAND if in_band(ratio) else MODELLED_OUTSIDE
    if not holds:
        return NOT_REPRODUCED
    if ratio is None:
        return DIRECTION_ONLY
    if in_band(ratio):
        return REPRODUCED
    return EXCEEDS if ratio > BAND[1] else SMALLER


def sign_at(claim: Claim, values: Sequence[float], null_value: float) -> bool | None:
    """Whether the claim's sign holds against another null value (a margin of a sweep); ``None`` for one seed."""
    vals = [float(v) for v in values]
    if len(vals) >= 2:
        low, high = confidence_interval(vals)
    elif claim.deterministic:
        low = high = vals[0]
    else:
        return None
    return _beyond(replace(claim, null_value=null_value), low, high)


def rule_text(claim: Claim) -> str:
    """The claim's verdict rule in words, for tables."""
    side = ">" if claim.direction == "higher" else "<"
    over = "the value" if claim.deterministic else f"the {LEVEL:.0%} interval over seeds"
    sign = f"{over} {side} {claim.null_value:g}"
    if claim.deterministic:
        sign += f" at {claim.configuration}"
    if claim.kind == "structural":
        return f"structural: every seed {side} {claim.null_value:g}"
    if claim.kind == "precondition":
        return f"precondition: {sign}"
    band = f"{BAND[0]:g}–{BAND[1]:g}× the paper's{' maximum' if claim.paper_stat == 'max' else ''}"
    if claim.kind == "modelled":
        return f"modelled: holds if {sign}" + ("" if claim.paper_value is None else f"; in band if {band}")
    if claim.paper_value is None:
        return f"direction only if {sign} (the paper gives no number)"
    return f"sign: {sign}; reproduced if the mean effect is {band}"
