"""Zoned platforms: SimGrid's hierarchical routing instead of all-pair routes (issue 13).

The Dragonfly with minimal routing is written as nested SimGrid zones; its
routes, resolved in python the way SimGrid composes them, and its simulated
times must equal those of the explicit all-pair form (``Platform.flattened``),
and a 1024-host platform must load and run.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest

from repro.collectives.algorithms import build_schedule
from repro.hpc.dragonfly import dragonfly, global_router, with_endpoint_overhead
from repro.hpc.platforms import Platform, ZoneRoute
from repro.hpc.simgrid import simgrid_available, simulate
from repro.pario.exchange_sim import DragonflyConstants, irregular_pattern, platform_for, simulate_kernel

CONSTANTS = DragonflyConstants(bandwidth=10e9, global_bandwidth=5e9, link_latency=100e-9, switch_latency=100e-9, alpha=1.5e-6)
needs_simgrid = pytest.mark.skipif(not simgrid_available(),
                                   reason="SimGrid binding missing: run envs/simgrid-setup.sh <venv>")


def expected_minimal_route(pf, groups: int, routers: int, per_router: int, i: int, j: int) -> tuple[str, ...]:
    """The minimal Dragonfly route written out link by link (the explicit writer's rule)."""
    (g1, r1), (g2, r2) = divmod(i // per_router, routers), divmod(j // per_router, routers)
    route = [f"{pf.hosts[i]}->R"]
    if g1 == g2:
        route += [f"g{g1}:r{r1}->r{r2}"] if r1 != r2 else []
    else:
        out, into = global_router(g1, g2, groups, routers), global_router(g2, g1, groups, routers)
        route += [f"g{g1}:r{r1}->r{out}"] if r1 != out else []
        route.append(f"G{g1}->G{g2}")
        route += [f"g{g2}:r{into}->r{r2}"] if into != r2 else []
    return (*route, f"R->{pf.hosts[j]}")


@pytest.mark.parametrize("groups,routers,per_router", [(5, 2, 2), (4, 3, 1), (1, 3, 2), (3, 1, 4)])
def test_zoned_routes_are_the_minimal_routes(groups: int, routers: int, per_router: int) -> None:
    pf = dragonfly(groups, routers, per_router, 1e9, 1e-8, 1e-7)
    assert pf.zone is not None
    pf.check()
    n = groups * routers * per_router
    for i, j in itertools.permutations(range(n), 2):
        assert pf.route(i, j) == expected_minimal_route(pf, groups, routers, per_router, i, j)
    flat = pf.flattened()
    assert flat.zone is None and dict(flat.routes) == dict(pf.routes) and len(flat.routes) == n * (n - 1)
    alpha = with_endpoint_overhead(pf, 2e-6)
    assert alpha.zone is not None
    assert all(alpha.route(i, j) == (f"sw_tx_{pf.hosts[i]}", *pf.route(i, j), f"sw_rx_{pf.hosts[j]}")
               for i, j in itertools.permutations(range(n), 2))


def test_zoned_xml_has_no_all_pair_routes() -> None:
    """64 routers of 16 hosts: zone routes grow with routers, leaf routes with hosts per router."""
    pf = platform_for(1024, 16, CONSTANTS)
    root = ET.fromstring(pf.to_xml().split("\n", 2)[2])
    top = root.find("zone")
    groups = top.findall("zone")
    leaves = [leaf for g in groups for leaf in g.findall("zone")]
    assert len(groups) * len(groups[0].findall("zone")) == 64 == len(leaves)
    assert all(len(leaf.findall("host")) == 16 and len(leaf.findall("router")) == 1 for leaf in leaves)
    assert len(top.findall("zoneRoute")) == len(groups) * (len(groups) - 1)
    routes = sum(len(leaf.findall("route")) for leaf in leaves)
    assert routes == 64 * (16 * 15 + 2 * 16)
    assert len(root.findall(".//link")) == len(pf.links)


def test_check_rejects_broken_zones() -> None:
    pf = dragonfly(3, 2, 2, 1e9, 1e-8, 1e-7)
    top = pf.zone
    pair = next(iter(top.zone_routes))
    good = top.zone_routes.pop(pair)
    with pytest.raises(ValueError, match="no route"):
        pf.check()
    top.zone_routes[pair] = ZoneRoute(
        gw_src=good.gw_dst, gw_dst=good.gw_dst, links=good.links
    )  # source gateway in the wrong group
    with pytest.raises(ValueError, match="gateway"):
        pf.check()
    top.zone_routes[pair] = ZoneRoute(gw_src=good.gw_src, gw_dst=good.gw_dst, links=("no-such-link",))
    with pytest.raises(ValueError, match="unknown links"):
        pf.check()
    top.zone_routes[pair] = good
    pf.check()
    leaf = next(z for z in top.walk() if z.hosts)
    leaf.hosts.pop()
    with pytest.raises(ValueError, match="exactly one leaf"):
        Platform(name=pf.name, hosts=pf.hosts, links=pf.links, routes={}, host_speed=pf.host_speed, zone=top).check()


@needs_simgrid
@pytest.mark.parametrize("p", [16, 64])
def test_zoned_and_explicit_platforms_simulate_identically(p: int) -> None:
    """The two-phase kernels and a collective give bit-identical simulated times on both forms."""
    pf = platform_for(p, 16, CONSTANTS)
    flat = pf.flattened()
    pattern = irregular_pattern(p, 16, 32768, 256, 0)
    for kernel in ("unordered", "balanced:8", "scattered:8"):
        assert simulate_kernel(pattern, kernel, pf).time == simulate_kernel(pattern, kernel, flat).time
    ring = build_schedule("rabenseifner", p, 1 << 16)
    assert simulate(ring, pf, 4).time == simulate(ring, flat, 4).time


@needs_simgrid
def test_thousand_host_platform_loads_and_runs() -> None:
    """1024 hosts: two ranks at opposite ends exchange like an uncontended alpha-beta pair."""
    pf = platform_for(1024, 16, CONSTANTS)
    far = [0, 1023]
    nbytes = 1 << 20
    sim = simulate(build_schedule("ring", 2, nbytes // 4), pf, 4, placement=far)
    latency = max(pf.route_latency(0, 1023), pf.route_latency(1023, 0))
    bandwidth = pf.route_bandwidth(0, 1023)
    assert bandwidth == CONSTANTS.global_bandwidth
    assert sim.time == pytest.approx(2 * (latency + nbytes / 2 / bandwidth), rel=1e-9)
