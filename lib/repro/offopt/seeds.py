"""Child seeds for the independent random streams of an offline-optimisation run."""

from __future__ import annotations

import numpy as np


def derive_seed(seed: int, *keys: int) -> int:
    """Derive an independent 31-bit seed from ``seed`` and integer ``keys``.

    Parameters
    ----------
    seed
        The parent seed.
    *keys
        Integers naming the child stream.

    Returns
    -------
    int
        A seed in ``[1, 2**31 - 1)`` (never 0, which some libraries read as
        "seed from the clock").
    """
    ss = np.random.SeedSequence([int(seed), *[int(k) for k in keys]])
    return int(ss.generate_state(1, dtype=np.uint32)[0] % (2**31 - 2)) + 1
