"""Platform builders (pure python) and the SimGrid executor (skipped without SimGrid)."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from repro.collectives.algorithms import build_schedule, closed_form_cost
from repro.hpc.platforms import fat_tree, fully_connected, kautz, kautz_arcs, two_dim_fc
from repro.hpc.simgrid import simgrid_available, simulate

BW, LAT = 25e9, 1e-6  # 25 GB/s, 1 us per link


def adjacency(pf) -> np.ndarray:
    """Direct (one-link) connections of a platform as a 0/1 matrix."""
    n = len(pf.hosts)
    a = np.zeros((n, n), dtype=int)
    for (i, j), route in pf.routes.items():
        a[i, j] = len(route) == 1
    return a


@pytest.mark.parametrize("rows,cols", [(1, 4), (2, 2), (2, 3), (3, 3), (4, 4)])
def test_2dfc_platform_invariants(rows: int, cols: int) -> None:
    """a2a-2dfc.

    N = R*C hosts, degree R+C-2, diameter 2 (1 if a dimension is 1), and every non-aligned pair has exactly
    two minimal 2-hop paths (row-first and column-first); routes are row-first.
    """
    pf = two_dim_fc(rows, cols, BW, LAT)
    pf.check()
    a = adjacency(pf)
    n = rows * cols
    assert len(pf.hosts) == n
    assert set(a.sum(axis=1)) == {rows + cols - 2} and set(a.sum(axis=0)) == {rows + cols - 2}
    assert max(pf.hops(i, j) for i, j in pf.routes) == (1 if min(rows, cols) == 1 else 2)
    two = a @ a
    for i, j in itertools.permutations(range(n), 2):
        (r1, c1), (r2, c2) = divmod(i, cols), divmod(j, cols)
        if r1 != r2 and c1 != c2:
            assert a[i, j] == 0 and two[i, j] == 2
            first = pf.routes[(i, j)][0]
            assert first == f"{pf.hosts[i]}->{pf.hosts[r1 * cols + c2]}"


@pytest.mark.parametrize("d", [2, 3, 4, 5, 6])
def test_kautz_invariants(d: int) -> None:
    """kautz-fpga.

    N = d(d+1), in/out degree d, A^2 + A = J (diameter 2 with unique paths), exactly N/2 bidirectional pairs,
    every uni-directional arc on exactly one directed triangle; the platform routes every pair in 1 or 2
    links.
    """
    names, arcs = kautz_arcs(d)
    n = d * (d + 1)
    assert len(names) == n
    a = np.zeros((n, n), dtype=int)
    for i, j in arcs:
        a[i, j] = 1
    assert set(a.sum(axis=0)) == {d} and set(a.sum(axis=1)) == {d}
    assert np.array_equal(a @ a + a, np.ones((n, n), dtype=int))
    bidir = {frozenset(e) for e in arcs if (e[1], e[0]) in arcs}
    assert len(bidir) == n // 2
    for i, j in arcs:
        if (j, i) not in arcs:
            triangles = [k for k in range(n) if (j, k) in arcs and (k, i) in arcs]
            assert len(triangles) == 1
    pf = kautz(d, BW, LAT, forward_latency=5e-7)
    pf.check()
    assert np.array_equal(adjacency(pf), a)
    for (i, j), route in pf.routes.items():
        assert pf.route_latency(i, j) == pytest.approx(LAT if a[i, j] else 2 * LAT + 5e-7)


def test_fat_tree_routes_are_d_mod_k() -> None:
    """Two-level fat tree: 2 links inside a leaf, 4 across leaves through spine dst mod k."""
    pf = fat_tree(8, 4, 2, BW, LAT, uplink_bandwidth=BW / 2)
    pf.check()
    for (i, j), route in pf.routes.items():
        if i // 4 == j // 4:
            assert len(route) == 2
        else:
            assert len(route) == 4 and route[1] == f"L{i // 4}->S{j % 2}"
            assert pf.route_bandwidth(i, j) == BW / 2


def test_platform_xml_is_well_formed() -> None:
    """The XML has one host per host, one link per link and a route per ordered pair."""
    pf = two_dim_fc(2, 3, BW, LAT)
    root = ET.fromstring(pf.to_xml().split("\n", 2)[2])  # skip the XML and DOCTYPE lines
    zone = root.find("zone")
    assert zone is not None and zone.get("routing") == "Full"
    assert len(zone.findall("host")) == 6
    assert len(zone.findall("link")) == len(pf.links)
    assert len(zone.findall("route")) == 6 * 5


needs_simgrid = pytest.mark.skipif(not simgrid_available(),
                                   reason="SimGrid binding missing: run envs/simgrid-setup.sh <venv>")


@needs_simgrid
@pytest.mark.parametrize("platform", ["full8", "2dfc4x4"])
def test_uncontended_ring_matches_alpha_beta(platform: str) -> None:
    """A ring allreduce whose flows never share a link matches its closed form in SimGrid.

    Within 5% of 2(p-1) alpha + 2(p-1)/p n beta (alpha = one link's latency, beta = 1/bandwidth).
    On the 4x4 2dfc the row wrap-around takes 2 hops (extra latency only).
    """
    pf = fully_connected(8, BW, LAT) if platform == "full8" else two_dim_fc(4, 4, BW, LAT)
    p, nbytes = len(pf.hosts), 64 * 2**20
    sim = simulate(build_schedule("ring", p, nbytes // 4), pf, 4)
    want = 2 * (p - 1) * LAT + 2 * (p - 1) / p * nbytes / BW
    assert sim.time == pytest.approx(want, rel=0.05)
    assert max(sim.rank_finish) == pytest.approx(sim.time)


@needs_simgrid
def test_reduction_cost_gamma_is_simulated() -> None:
    """With gamma > 0 the simulated ring also matches the closed form's gamma term."""
    pf = fully_connected(4, BW, LAT)
    nbytes, gamma = 16 * 2**20, 1e-10
    sim = simulate(build_schedule("ring", 4, nbytes // 4), pf, 4, gamma=gamma)
    assert sim.time == pytest.approx(closed_form_cost("ring", 4, nbytes, LAT, 1 / BW, gamma), rel=0.05)


@needs_simgrid
def test_2dfc_alltoall_on_2dfc_platform() -> None:
    """On a 4x4 2dfc the two-phase all-to-alls match their closed forms within 5%.

    Striped and non-striped (all messages between direct neighbours, no shared links); striping makes
    it nearly twice as fast at m = 1 MiB.
    """
    pf = two_dim_fc(4, 4, BW, LAT)
    m = 2**20
    times = {}
    for name in ("2dfc", "two_phase"):
        sim = simulate(build_schedule(name, 16, m // 4, rows=4), pf, 4)
        assert sim.time == pytest.approx(closed_form_cost(name, 16, m, LAT, 1 / BW, rows=4), rel=0.05)
        times[name] = sim.time
    assert times["two_phase"] / times["2dfc"] > 1.8


@needs_simgrid
def test_contention_is_simulated_on_a_tapered_fat_tree() -> None:
    """Rabenseifner on 8 hosts, 4 per leaf, one spine.

    In the first (distance-4) step four flows share each leaf's single uplink, so the simulated time clearly
    exceeds the contention-free alpha-beta cost (here with the 4-link route latency).
    """
    pf = fat_tree(8, 4, 1, BW, LAT)
    nbytes = 16 * 2**20
    sim = simulate(build_schedule("rabenseifner", 8, nbytes // 4), pf, 4)
    free = closed_form_cost("rabenseifner", 8, nbytes, 4 * LAT, 1 / BW)
    assert sim.time > 1.5 * free
