"""Importance sampling with replacement (ISWR), the KAKURENBO paper's with-replacement baseline.

Each epoch draws N sample ids with replacement, with probability proportional
to each sample's last recorded loss (Katharopoulos and Fleuret, 2018), using
torch's ``WeightedRandomSampler``; the loss of a drawn sample is weighted by
``1 / (N p_i)`` so the gradient stays unbiased.  To keep those weights
bounded, a tenth of the mean loss is added to every loss before normalising
(our choice; the spec only says "proportional to the last loss").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import WeightedRandomSampler

SMOOTHING = 0.1
"""Share of the mean loss added to every sample's loss before normalising."""


@dataclass(frozen=True, kw_only=True)
class ImportanceDraw:
    """An epoch's sampler and the per-sample loss weights that unbias it."""

    sampler: WeightedRandomSampler
    weights: np.ndarray


def importance_draw(losses: np.ndarray, generator: torch.Generator) -> ImportanceDraw:
    """Sampling probabilities from the last losses (uniform while any loss is unknown).

    Parameters
    ----------
    losses
        Last recorded loss per sample (``inf`` where never seen).
    generator
        Torch generator of the draw.
    """
    n = len(losses)
    if not np.all(np.isfinite(losses)):
        p = np.full(n, 1.0 / n)
    else:
        score = losses + SMOOTHING * losses.mean() + 1e-12
        p = score / score.sum()
    sampler = WeightedRandomSampler(torch.as_tensor(p, dtype=torch.double), num_samples=n, replacement=True,  # type: ignore[arg-type]
                                    generator=generator)
    return ImportanceDraw(sampler=sampler, weights=1.0 / (n * p))
