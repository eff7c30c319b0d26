"""Mixed dense/sparse segments and the sparse allreduce algorithms of ``repro.collectives.sparse``.

Format rule after every operation (property test on random segments), algebra
of the sum (commutative, associative, exact on ints), every algorithm exact
against the dense sum for P in 1..8, k in {1,2,4}, densities {0, 1/64, 1/2, 1},
byte accounting, the replay schedule, and every algorithm on a real MPI (one launch).
"""

from __future__ import annotations

import numpy as np
import pytest

from repro.collectives import sparse as S
from repro.collectives.chapters.sparse_allreduce import ClusterModel, density_sweep, replay_schedule
from repro.collectives.mpi_worker import launch_worker
from repro.hpc.ir import validate
from repro.hpc.simgrid import simgrid_available


def _random_segment(rng: np.random.Generator, lo: int, hi: int) -> S.Segment:
    dens = rng.choice([0.0, 0.05, 0.3, 0.49, 0.5, 0.51, 0.9, 1.0])
    vals = np.where(rng.random(hi - lo) < dens, rng.integers(-50, 50, hi - lo), 0)
    return S.from_dense(lo, vals)


def _rule_holds(seg: S.Segment) -> bool:
    nnz = seg.nnz if not seg.is_dense else int(np.count_nonzero(seg.dense))
    return seg.is_dense == S.prefers_dense(nnz, seg.length)


def test_format_rule_after_every_operation() -> None:
    """Dense iff nnz*8 >= len*4, after construction, split, concat and sum (random segments)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        lo = int(rng.integers(0, 50))
        hi = lo + int(rng.integers(1, 200))
        a, b = _random_segment(rng, lo, hi), _random_segment(rng, lo, hi)
        s = S.add(a, b)
        assert _rule_holds(a) and _rule_holds(b) and _rule_holds(s)
        assert np.array_equal(s.to_dense(), a.to_dense() + b.to_dense())
        cuts = sorted({lo, hi, *rng.integers(lo, hi, 3).tolist()})
        parts = S.split(s, cuts)
        assert all(_rule_holds(p) for p in parts)
        joined = S.concat(parts)
        assert _rule_holds(joined) and np.array_equal(joined.to_dense(), s.to_dense())
        assert S.prefers_dense(1, 2) and not S.prefers_dense(1, 3)


def test_sum_is_commutative_and_associative() -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        a, b, c = (_random_segment(rng, 10, 110) for _ in range(3))
        assert np.array_equal(S.add(a, b).to_dense(), S.add(b, a).to_dense())
        assert np.array_equal(S.add(S.add(a, b), c).to_dense(), S.add(a, S.add(b, c)).to_dense())


def test_bytes_of_segments() -> None:
    dense = S.from_dense(0, np.arange(1, 11))
    assert dense.is_dense and dense.nbytes() == 4 + 10 * 4
    sp = S.from_pairs(0, 100, np.array([3, 50]), np.array([1, 2]))
    assert not sp.is_dense and sp.nbytes() == 4 + 2 * 8
    with pytest.raises(ValueError, match="density"):
        S.random_sparse_vector(10, 1.5, 0, 0)


@pytest.mark.parametrize("p,k", [(1, 1), (2, 1), (2, 2), (3, 1), (4, 2), (4, 4), (6, 2), (8, 1), (8, 2), (8, 4)])
@pytest.mark.parametrize("density", [0.0, 1 / 64, 0.5, 1.0])
def test_every_algorithm_returns_the_exact_sum(p: int, k: int, density: float) -> None:
    xs = [S.random_sparse_vector(517, density, seed=p, rank=r) for r in range(p)]
    want = np.sum([x.to_dense() for x in xs], axis=0)
    for algo in S.ALGORITHMS:
        if algo == "sparse_rdb" and p & (p - 1):
            with pytest.raises(ValueError, match="power-of-two"):
                S.run_threads(p, lambda c: S.allreduce(algo, c, xs[c.rank], k=k))
            continue
        outs, _ = S.run_threads(p, lambda c: S.allreduce(algo, c, xs[c.rank], k=k))
        for out in outs:
            assert np.array_equal(out.to_dense(), want), (algo, p, k, density)
            assert out.is_dense if algo.startswith("dense") else _rule_holds(out)


def test_ring_ring_rejects_bad_node_size() -> None:
    xs = [S.random_sparse_vector(64, 0.1, 0, r) for r in range(6)]
    with pytest.raises(ValueError, match="k \\(ranks per node\\)"):
        S.run_threads(6, lambda c: S.allreduce("sparse_ring_ring", c, xs[c.rank], k=4))


@pytest.mark.parametrize("algo", ["ring", "ring_ring"])
def test_sparse_at_density_one_sends_exactly_the_dense_bytes(algo: str) -> None:
    """At density 1 the sparse schedule sends byte for byte what the dense one sends.

    Every segment is dense there (payload and per-message count headers alike); at low density it sends
    strictly less.
    """
    for dens, cmp in ((1.0, "eq"), (1 / 64, "lt")):
        _, sparse_logs = S.dry_run(f"sparse_{algo}", 8, 4096, dens, 0, k=4)
        _, dense_logs = S.dry_run(f"dense_{algo}", 8, 4096, dens, 0, k=4)
        s = [sum(b for *_, b in log) for log in sparse_logs]
        d = [sum(b for *_, b in log) for log in dense_logs]
        assert all((x == y) if cmp == "eq" else (x < y) for x, y in zip(s, d))
        assert [len(x) for x in sparse_logs] == [len(x) for x in dense_logs]


def test_replay_schedule_keeps_every_message() -> None:
    _, logs = S.dry_run("sparse_split_ag", 4, 400, 0.05, 0)
    sched = replay_schedule(logs, 2.0, "t")
    validate(sched)
    assert sum(1 for row in sched.steps for st in row for _ in st.sends) == sum(len(lg) for lg in logs)
    # every pair exchanges exactly one block in the all-to-all phase (steps 0..p-2)
    pairs = sorted((st.rank, sd.peer) for row in sched.steps[:3] for st in row for sd in st.sends)
    assert pairs == sorted((i, j) for i in range(4) for j in range(4) if i != j)


@pytest.mark.skipif(not simgrid_available(), reason="SimGrid not installed (envs/simgrid-setup.sh)")
def test_sparse_ring_ring_faster_than_dense_at_low_density() -> None:
    model = ClusterModel(nodes=2, k=2)
    model.platform().check()
    df = density_sweep(model, ["dense_ring_ring", "sparse_ring_ring"], [1.0, 1 / 64], 4096, 65536, [0],
                       progress=False)
    t = df.set_index(["algorithm", "density"]).time_s
    assert t[("sparse_ring_ring", 1 / 64)] < t[("dense_ring_ring", 1 / 64)]
    assert t[("sparse_ring_ring", 1.0)] == pytest.approx(t[("dense_ring_ring", 1.0)])


def test_every_algorithm_equals_mpi_allreduce() -> None:
    """One mpiexec launch of 8 ranks (4 per node): every algorithm and density equals MPI's dense Allreduce."""
    cases = [f"{a}:k=4:density={d!r}" for a in S.ALGORITHMS for d in (0.0, 1 / 64, 0.5, 1.0)]
    rep = launch_worker("sparse", 8, ["--cases", ";".join(cases), "--lengths", "1,1000", "--seed", "3"], timeout=240)
    assert len(rep["cases"]) == len(cases) * 2 == rep["n_cases"]
    bad = [c for c in rep["cases"] if not c["ok"]]
    assert not bad and rep["ok"] is True, bad
