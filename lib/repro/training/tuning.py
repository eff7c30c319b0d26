"""One tuning rule for every arm of a comparison: the same grid, the choice made on validation data.

A fair comparison gives the method and its baselines the same tuning budget: every arm tries every value
of one grid (learning rates, say) on the same tuning seeds, and keeps the value whose mean validation score
is highest.  The test data never enter the choice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Hashable, Iterable

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Trial:
    """One tuning run: an arm, the grid value it tried, and its validation score (higher is better)."""

    arm: Hashable
    value: float
    score: float


def choose(trials: Iterable[Trial]) -> dict[Hashable, float]:
    """Per arm, the grid value with the highest mean validation score over its trials.

    Parameters
    ----------
    trials
        Every tuning run (several seeds of one arm and value are averaged).

    Returns
    -------
    dict
        Arm to its chosen value; a tie goes to the smaller value.

    Raises
    ------
    ValueError
        If there are no trials or a score is not finite.
    """
    scores: dict[Hashable, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t in trials:
        if not np.isfinite(t.score):
            raise ValueError(f"arm {t.arm!r}, value {t.value!r}: validation score {t.score!r} is not finite")
        scores[t.arm][t.value].append(t.score)
    if not scores:
        raise ValueError("no tuning trials to choose from")
    return {arm: min(by, key=lambda v: (-float(np.mean(by[v])), v)) for arm, by in scores.items()}
