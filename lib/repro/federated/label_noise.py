"""Per-client label noise (FedAudio's scheme), usable by any chapter.

A client's noise is a ``C x C`` transition matrix ``T``: the diagonal is
``1 - eps``; of the off-diagonal cells of each row, a random 40% are set to
zero and the remaining mass ``eps`` is spread uniformly over the others.
Each training label ``y`` is replaced by a draw from row ``T[y]``.

FedAudio's code indexes the rows with ``idx * 4`` (it assumes four classes);
here rows are indexed by class for any ``C``.
"""

from __future__ import annotations

import numpy as np

ZEROED_SHARE = 0.4
"""Share of each row's off-diagonal cells set to zero."""


def transition_matrix(num_classes: int, eps: float, seed: int, zeroed_share: float = ZEROED_SHARE) -> np.ndarray:
    """A sparse label-noise transition matrix (rows sum to 1, diagonal ``1 - eps``).

    Parameters
    ----------
    num_classes
        ``C``.
    eps
        Probability that a label is changed.
    seed
        Seed of the zeroed cells.
    zeroed_share
        Share of each row's ``C - 1`` off-diagonal cells set to zero (rounded down; at least one cell stays).
    """
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"eps must be in [0, 1], got {eps}")
    if num_classes < 2:
        raise ValueError(f"need at least 2 classes, got {num_classes}")
    rng = np.random.default_rng(seed)
    t = np.zeros((num_classes, num_classes))
    zeroed = min(int(np.floor(zeroed_share * (num_classes - 1))), num_classes - 2)
    for c in range(num_classes):
        others = np.array([k for k in range(num_classes) if k != c])
        kept = np.sort(rng.permutation(others)[zeroed:])
        t[c, kept] = eps / len(kept)
        t[c, c] = 1.0 - eps
    return t


def noisy_labels(y: np.ndarray, matrix: np.ndarray, seed: int) -> np.ndarray:
    """Labels resampled from the rows of ``matrix`` (``eps = 0`` returns ``y`` unchanged)."""
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(matrix, axis=1)
    draws = rng.random(len(y))
    out = (draws[:, None] > cumulative[y]).sum(axis=1)
    return np.minimum(out, matrix.shape[0] - 1).astype(y.dtype)
