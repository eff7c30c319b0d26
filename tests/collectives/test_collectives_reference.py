"""Every schedule, run by the pure-numpy executor, computes the right collective.

p = 1..16, every valid parameterisation (node sizes, pipeline segments, grid
shapes), and lengths that do not divide evenly (including shorter than p).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import numpy as np
import pytest

from repro.collectives.algorithms import ALLREDUCE_ALGORITHMS, ALLTOALL_ALGORITHMS, build_schedule, parameter_grid
from repro.hpc.ir import Schedule
from repro.hpc.reference import execute_reference, expected_output

P_RANGE = range(1, 17)


@lru_cache(maxsize=None)
def _cached(name: str, p: int, n: int, params: tuple[tuple[str, int], ...]) -> Schedule:
    return build_schedule(name, p, n, **dict(params))


def build(name: str, p: int, n: int, params: dict) -> Schedule:
    """Build (once per test session) the schedule of ``name``."""
    return _cached(name, p, n, tuple(sorted(params.items())))


def allreduce_lengths(p: int) -> list[int]:
    """Empty, shorter than p, and uneven lengths."""
    return sorted({0, 1, max(p - 1, 1), 3 * p + 1})


A2A_BLOCK_LENGTHS = [0, 1, 3, 4]


@pytest.mark.parametrize("p", P_RANGE)
@pytest.mark.parametrize("name", ALLREDUCE_ALGORITHMS)
def test_allreduce_equals_numpy_sum(name: str, p: int) -> None:
    """Integer data: exactly np.sum on every rank; float data: np.sum to rounding, and bit-identical on all ranks.

    (Pipelines up to 3 segments here; the provenance test below covers 4.).
    """
    rng = np.random.default_rng(p)
    for params in parameter_grid(name, p, max_segments=3):
        for n in allreduce_lengths(p):
            sched = build(name, p, n, params)
            ints = [rng.integers(-10**6, 10**6, n) for _ in range(p)]
            out = execute_reference(sched, ints)
            want = np.sum(ints, axis=0)
            for r in range(p):
                assert np.array_equal(out[r], want), (name, params, n, r)
            floats = [rng.standard_normal(n) for _ in range(p)]
            out = execute_reference(sched, floats)
            np.testing.assert_allclose(out[0], np.sum(floats, axis=0), rtol=1e-12, atol=1e-12)
            for r in range(1, p):
                assert out[r].tobytes() == out[0].tobytes(), (name, params, n, r)


@pytest.mark.parametrize("p", P_RANGE)
@pytest.mark.parametrize("name", ALLREDUCE_ALGORITHMS)
def test_allreduce_counts_every_contribution_exactly_once(name: str, p: int) -> None:
    """Provenance: rank r contributes the one-hot vector e_r to every element.

    The result must be all ones (no contribution missing or counted twice).
    """
    for params in parameter_grid(name, p):
        n = 3 * p + 1
        sched = build(name, p, n, params)
        onehot = [np.tile(np.eye(p, dtype=np.int64)[r], (n, 1)) for r in range(p)]
        for r, out in enumerate(execute_reference(sched, onehot)):
            assert out.shape == (n, p)
            assert np.all(out == 1), (name, params, r)


@pytest.mark.parametrize("p", P_RANGE)
@pytest.mark.parametrize("name", ALLTOALL_ALGORITHMS)
def test_alltoall_equals_transpose(name: str, p: int) -> None:
    """Block j of rank i ends up as block i of rank j, for int and float data."""
    rng = np.random.default_rng(100 + p)
    for params in parameter_grid(name, p):
        for m in A2A_BLOCK_LENGTHS:
            sched = build(name, p, m, params)
            for data in ([rng.integers(-1000, 1000, p * m) for _ in range(p)],
                         [rng.standard_normal(p * m) for _ in range(p)]):
                out = execute_reference(sched, data)
                want = expected_output("alltoall", data)
                for r in range(p):
                    assert np.array_equal(out[r], want[r]), (name, params, m, r)


def max_hops(name: str, p: int) -> int:
    """Most links any element may cross."""
    return {"linear": 1, "pairwise": 1, "two_phase": 2, "2dfc": 2}.get(name, max((p - 1).bit_length(), 1))


@pytest.mark.parametrize("p", P_RANGE)
@pytest.mark.parametrize("name", ALLTOALL_ALGORITHMS)
def test_alltoall_delivers_each_block_exactly_once(name: str, p: int) -> None:
    """Every input element carries a unique id.

    Each output block is written exactly once, the final output is the transpose (so every block reached its
    destination once and only once), and no element crosses more links than the algorithm allows.
    """
    m = 3
    for params in parameter_grid(name, p):
        sched = build(name, p, m, params)
        ids = [1 + np.arange(p * m, dtype=np.int64) + r * p * m for r in range(p)]
        writes: Counter[tuple[int, int]] = Counter()
        hops: Counter[int] = Counter()
        outputs = {b for b in sched.output_blocks if sched.block_lengths[b] > 0}

        def observe(event: str, rank: int, step: int, blocks: tuple[int, ...], data: np.ndarray) -> None:
            for b in blocks:
                if b in outputs:
                    writes[(rank, b)] += 1
            if event == "recv":
                hops.update(data.tolist())

        out = execute_reference(sched, ids, observer=observe)
        want = expected_output("alltoall", ids)
        for r in range(p):
            assert np.array_equal(out[r], want[r]), (name, params, r)
        assert set(writes) == {(r, b) for r in range(p) for b in outputs}, (name, params)
        assert set(writes.values()) == {1}, (name, params)
        if p > 1:
            assert max(hops.values()) <= max_hops(name, p), (name, params)
        # Every element not destined to its own rank crossed at least one link.
        remote = {int(v) for r in range(p) for j in range(p) if j != r for v in ids[r][j * m:(j + 1) * m]}
        assert remote <= set(hops), (name, params)
