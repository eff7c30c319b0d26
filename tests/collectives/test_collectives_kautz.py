"""Kautz K(d,2) graph facts and the multi-port schedules of ``repro.collectives.kautz_mp``.

Exactness against the reference executor for several degrees and lengths, block
provenance (every block reaches every rank exactly once), per-step link loads
and the closed form, the WDM mapping, the Dragonfly platform, SimGrid against
the alpha-beta model, and the schedules on a real MPI (one launch per rank count).
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from repro.collectives import kautz_mp as K
from repro.collectives.algorithms import build_schedule
from repro.collectives.chapters.kautz_fpga import NetworkSetup, contention_free_time, ports_sweep, structure_checks
from repro.collectives.cost import schedule_cost
from repro.collectives.mpi_worker import launch_worker
from repro.hpc.dragonfly import dragonfly, with_endpoint_overhead
from repro.hpc.ir import link_bytes, validate
from repro.hpc.platforms import kautz
from repro.hpc.reference import execute_reference, expected_output
from repro.hpc.simgrid import simgrid_available, simulate

DEGREES = [1, 2, 3, 4]


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 6, 16])
def test_kautz_graph_size_degree_diameter(d: int) -> None:
    """K(d,2) has d(d+1) nodes, every in/out degree d, diameter 2 (1 for d=1), and A^2 + A = J."""
    g = K.kautz_digraph(d)
    n = d * (d + 1)
    assert g.number_of_nodes() == n == K.kautz_size(d)
    assert set(dict(g.out_degree()).values()) == {d} and set(dict(g.in_degree()).values()) == {d}
    assert nx.diameter(g) == (1 if d == 1 else 2)
    a = nx.to_numpy_array(g, nodelist=range(n), dtype=np.int64)
    assert np.array_equal(a @ a + a, np.ones((n, n), dtype=np.int64))


@pytest.mark.parametrize("d", [2, 3, 4, 5])
def test_bidirectional_pairs_and_triangles(d: int) -> None:
    """Exactly N/2 bidirectional pairs; every one-way arc lies on exactly one directed triangle."""
    g = K.kautz_digraph(d)
    pairs = {frozenset((u, v)) for u, v in g.edges if g.has_edge(v, u)}
    assert len(pairs) == g.number_of_nodes() // 2
    for u, v in g.edges:
        if g.has_edge(v, u):
            continue
        tri = [w for w in g.successors(v) if g.has_edge(w, u)]
        assert len(tri) == 1, (u, v, tri)


def test_degree_for_rejects_non_kautz_sizes() -> None:
    assert [K.degree_for(p) for p in (2, 6, 12, 272)] == [1, 2, 3, 16]
    with pytest.raises(ValueError, match="p=7"):
        K.degree_for(7)
    with pytest.raises(ValueError, match="Kautz degree"):
        K.kautz_size(0)


@pytest.mark.parametrize("d", DEGREES)
@pytest.mark.parametrize("n", [0, 1, 7, 31, 1003])
def test_allreduce_and_reduce_scatter_exact(d: int, n: int) -> None:
    """The allreduce gives the exact integer sum on every rank; the reduce-scatter gives block v on rank v."""
    ar = K.kautz_allreduce(d, n)
    validate(ar)
    rng = np.random.default_rng([d, n])
    xs = [rng.integers(-1000, 1000, n) for _ in range(ar.p)]
    for got, want in zip(execute_reference(ar, xs), expected_output("allreduce", xs)):
        assert np.array_equal(got, want)
    rs = K.kautz_reduce_scatter(d, n)
    validate(rs)
    total = np.sum(xs, axis=0)
    off = rs.offsets
    for v, out in enumerate(execute_reference(rs, xs)):
        assert np.array_equal(out[off[v]:off[v + 1]], total[off[v]:off[v + 1]])


@pytest.mark.parametrize("d", DEGREES)
def test_allgather_every_block_arrives_exactly_once(d: int) -> None:
    """Allgather output is the concatenation in rank order.

    Each rank receives every other rank's block exactly once (never its own).
    """
    m = 3
    sched = K.kautz_allgather(d, m)
    validate(sched)
    n = sched.p
    xs = [np.arange(m) + 100 * r for r in range(n)]
    want = np.concatenate(xs)
    got_counts = np.zeros((n, n), dtype=int)

    def observer(event, rank, step, blocks, data):
        if event == "recv":
            for b in blocks:
                got_counts[rank, b] += 1

    for out in execute_reference(sched, xs, observer=observer):
        assert np.array_equal(out, want)
    assert np.array_equal(got_counts, np.ones((n, n), dtype=int) - np.eye(n, dtype=int))


@pytest.mark.parametrize("d", [2, 3, 4, 16])
def test_link_loads_and_closed_form(d: int) -> None:
    """Only arcs carry messages.

    Per-step link loads are (d, 1, 1, d) blocks at most, and the multi-port alpha-beta cost of the schedule
    equals the closed form when N divides n.
    """
    n_ranks = d * (d + 1)
    n = 4 * n_ranks
    sched = K.kautz_allreduce(d, n)
    g = K.kautz_digraph(d)
    block = n // n_ranks
    loads = []
    for step in link_bytes(sched):
        assert all(g.has_edge(u, v) for u, v in step)
        loads.append(max(step.values()) // block)
    assert loads == [d, 1, 1, d]
    alpha, beta = 1e-6, 1e-9
    assert schedule_cost(sched, 4, alpha, beta) == pytest.approx(K.kautz_allreduce_cost(d, 4 * n, alpha, beta))
    assert len(sched.comm_steps()) == 4


@pytest.mark.parametrize("d", [1, 2, 3, 5, 16])
def test_hamiltonian_ring_uses_arcs(d: int) -> None:
    order = K.hamiltonian_ring_order(d)
    g = K.kautz_digraph(d)
    assert sorted(order) == list(range(d * (d + 1)))
    assert all(g.has_edge(order[i], order[(i + 1) % len(order)]) for i in range(len(order)))


@pytest.mark.parametrize("d", [2, 3, 4, 16])
def test_awg_mapping_d_wavelengths_d_plus_1_awgs_collision_free(d: int) -> None:
    wmap = K.awg_wavelength_map(d)
    assert len(wmap) == d * d * (d + 1)
    assert {wl for _, wl in wmap.values()} == set(range(d))
    assert {awg for awg, _ in wmap.values()} == set(range(d + 1))
    # no input (sender) uses one wavelength twice on an AWG, no output receives one twice
    ins = [(awg, u, wl) for (u, _), (awg, wl) in wmap.items()]
    outs = [(awg, v, wl) for (_, v), (awg, wl) in wmap.items()]
    assert len(set(ins)) == len(ins) and len(set(outs)) == len(outs)
    # every FPGA sends through exactly one AWG and receives from exactly one
    assert all(len({awg for (s, _), (awg, _) in wmap.items() if s == u}) == 1 for u in range(d * (d + 1)))
    assert structure_checks(d)["collision_free"] == 1.0


def test_dragonfly_platform_shape_and_routes() -> None:
    pf = dragonfly(5, 2, 2, 1e9, 1e-8, 1e-7)
    pf.check()
    assert len(pf.hosts) == 20
    hops = {pf.hops(i, j) for i, j in itertools.permutations(range(20), 2)}
    assert max(hops) <= 5 and min(hops) == 2
    globals_ = [n for n in pf.links if n.startswith("G")]
    assert len(globals_) == 5 * 4  # one link per ordered pair of groups
    pfa = with_endpoint_overhead(pf, 2e-6)
    assert pfa.route_latency(0, 19) == pytest.approx(pf.route_latency(0, 19) + 2e-6)
    with pytest.raises(ValueError, match="groups"):
        dragonfly(0, 2, 2, 1e9, 0, 0)


def test_network_setup_rejects_mismatched_dragonfly() -> None:
    with pytest.raises(ValueError, match="df_groups"):
        NetworkSetup(d=3, df_groups=2, df_routers=2, df_hosts_per_router=2)
    with pytest.raises(ValueError, match="df_injection"):
        NetworkSetup(d=3, df_groups=3, df_routers=2, df_hosts_per_router=2, df_injection="many")
    with pytest.raises(ValueError, match="df_routing"):
        NetworkSetup(d=3, df_groups=3, df_routers=2, df_hosts_per_router=2, df_routing=["adaptive"])


def test_valiant_routing_spreads_a_group_pair_over_intermediate_groups() -> None:
    minimal = dragonfly(5, 2, 2, 1e9, 1e-8, 1e-7)
    valiant = dragonfly(5, 2, 2, 1e9, 1e-8, 1e-7, routing="valiant")
    valiant.check()
    group0, group1 = range(0, 4), range(4, 8)
    pairs = [(i, j) for i in group0 for j in group1]
    assert {valiant.routes[pr] for pr in pairs} != {minimal.routes[pr] for pr in pairs}
    direct = sum("G0->G1" in valiant.routes[pr] for pr in pairs)
    assert direct == 0 and all(sum(n.startswith("G") for n in valiant.routes[pr]) == 2 for pr in pairs)
    assert max(len(r) for r in valiant.routes.values()) <= 7
    assert valiant.routes[(0, 1)] == minimal.routes[(0, 1)]  # same group: minimal
    with pytest.raises(ValueError, match="routing"):
        dragonfly(5, 2, 2, 1e9, 0, 0, routing="ugal")


def test_equal_injection_and_ports_sweep() -> None:
    fair = NetworkSetup(d=3, df_groups=3, df_routers=2, df_hosts_per_router=2)
    thin = NetworkSetup(d=3, df_groups=3, df_routers=2, df_hosts_per_router=2, df_injection="one_link")
    assert fair.dragonfly_bandwidth == pytest.approx(3 * thin.dragonfly_bandwidth)
    sweep = ports_sweep(fair, [8, 1 << 20], degrees=(2, 4))
    assert set(sweep.d) == {2, 3, 4}  # the run's own degree is added
    big = sweep[sweep.bytes == 1 << 20].set_index(["injection", "d"]).speedup
    assert all(big[("one_link", d)] > big[("equal", d)] for d in (2, 3, 4))


@pytest.mark.skipif(not simgrid_available(), reason="SimGrid not installed (envs/simgrid-setup.sh)")
def test_simgrid_matches_alpha_beta_on_kautz_and_ring_estimate() -> None:
    """Without contention SimGrid reproduces the closed form of the Kautz allreduce.

    The contention-free estimate of the Hamiltonian ring equals its simulation.
    """
    d, n = 3, 12 * 1000
    bw, lat, alpha = 1e10, 1e-7, 1e-6
    pf = with_endpoint_overhead(kautz(d, bw, lat), alpha)
    sim = simulate(K.kautz_allreduce(d, n), pf, 4).time
    assert sim == pytest.approx(K.kautz_allreduce_cost(d, 4 * n, alpha + lat, 1 / bw), rel=1e-6)
    ring = build_schedule("ring", 12, n)
    order = K.hamiltonian_ring_order(d)
    assert simulate(ring, pf, 4, placement=order).time == pytest.approx(
        contention_free_time(ring, pf, order, 4), rel=1e-6)


def test_kautz_schedules_equal_mpi_collectives(tmp_path) -> None:
    """On a real MPI (mpi4py over MPICH) the three schedules equal MPI's own collectives.

    ``Allreduce``, ``Allgather`` and ``Reduce_scatter``, exactly (int64), on 2, 6 and 12 ranks: one launch
    per rank count.
    """
    cases = ["allreduce", "allgather", "reduce_scatter"]
    lengths = [0, 1, 13, 1003]
    for p in (2, 6, 12):
        rep = launch_worker("kautz", p, ["--cases", ";".join(cases), "--lengths", ",".join(map(str, lengths)),
                                         "--seed", str(p)], timeout=180)
        assert rep["p"] == p and len(rep["cases"]) == len(cases) * len(lengths) == rep["n_cases"]
        bad = [c for c in rep["cases"] if not c["ok"]]
        assert not bad and rep["ok"] is True, bad
        assert {c["steps"] for c in rep["cases"] if c["case"] == "kautz_allreduce"} == {4 if p > 2 else 2}
