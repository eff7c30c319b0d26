"""Per-layer communication accounting.

Every strategy reports what it moves: for each array (layer) and round, how
many clients downloaded it and how many uploaded it.  Costs are counted in
scalars (parameters); multiply by the dtype size for bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(kw_only=True)
class CommLedger:
    """Counts the scalars each layer moves, per round and in total.

    Parameters
    ----------
    sizes
        Number of scalars in each array, keyed by array name.
    """

    sizes: dict[str, int]
    down: dict[str, int] = field(default_factory=dict)
    up: dict[str, int] = field(default_factory=dict)
    syncs: dict[str, list[int]] = field(default_factory=dict)
    per_round: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for k in self.sizes:
            self.down.setdefault(k, 0)
            self.up.setdefault(k, 0)
            self.syncs.setdefault(k, [])

    def record(self, server_round: int, down_keys: list[str], up_keys: list[str], clients: int) -> None:
        """Record one round: ``clients`` clients each downloaded ``down_keys`` and uploaded ``up_keys``."""
        unknown = (set(down_keys) | set(up_keys)) - set(self.sizes)
        if unknown:
            raise KeyError(f"unknown arrays {sorted(unknown)}")
        moved = 0
        for k in down_keys:
            self.down[k] += clients
            moved += clients * self.sizes[k]
        for k in up_keys:
            self.up[k] += clients
            self.syncs[k].append(server_round)
            moved += clients * self.sizes[k]
        self.per_round.append(moved)

    @property
    def total(self) -> int:
        """Scalars moved so far, both directions, all layers."""
        return int(sum(self.per_round))

    def cumulative(self) -> np.ndarray:
        """Cumulative scalars moved after each recorded round."""
        return np.cumsum(np.asarray(self.per_round, dtype=np.int64))

    def sync_count(self, key: str) -> int:
        """How many rounds array ``key`` was aggregated (uploaded) in."""
        return len(self.syncs[key])
