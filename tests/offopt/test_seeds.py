"""Child seeds: deterministic, distinct per key, never 0."""

from __future__ import annotations

from repro.offopt.seeds import derive_seed


def test_derive_seed_is_deterministic_distinct_and_nonzero() -> None:
    assert derive_seed(7, 1, 2) == derive_seed(7, 1, 2)
    seeds = {derive_seed(s, k) for s in range(20) for k in range(20)}
    assert len(seeds) == 400  # no collisions among 400 child streams
    assert all(1 <= s < 2**31 - 1 for s in seeds)
    assert derive_seed(7, 1, 2) != derive_seed(7, 2, 1)
