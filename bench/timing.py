"""The one timing helper every benchmark uses (best of several runs)."""

from __future__ import annotations

import time
from typing import Callable


def timed(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best-of-``repeat`` wall time of ``fn`` in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
