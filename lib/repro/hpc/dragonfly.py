"""Switched Dragonfly platform and endpoint start-up overhead for the SimGrid executor.

:func:`dragonfly` builds a :class:`~repro.hpc.platforms.Platform` (pure
python) for a Dragonfly of
``groups`` groups of ``routers`` routers with ``hosts_per_router`` hosts each;
routers of a group are fully connected and every pair of groups is joined by
one global link.  Minimal routing: up to the source router, a local hop to
the router holding the global link (if needed), the global link, a local hop
to the destination router (if needed), down to the host (at most 5 links).
Valiant (non-minimal) routing sends every inter-group message through an
intermediate group, chosen per (source, destination) pair, which spreads the
load of one group pair over many global links (at most 7 links).

Minimal routing is written as SimGrid zones (a leaf zone per router holding
its hosts, a zone per group whose zone routes are the local links, a top
zone whose zone routes are the global links), so SimGrid composes the routes
and thousands of hosts fit; Valiant's intermediate group depends on both
hosts, so it is written with explicit all-pair routes (a few hundred hosts).

:func:`with_endpoint_overhead` adds a per-message start-up latency (software
and NIC overhead, the ``alpha`` of the alpha-beta model) at both ends of every
route, as non-limiting FATPIPE links, so that a simulated message costs
``alpha + sum(link latencies) + bytes / bandwidth`` when uncontended.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from repro.hpc.platforms import Link, Platform, Zone, ZoneRoute, wrap_host_routes
from repro.validation import check_nonneg, check_positive, check_positive_int


def global_router(group: int, other: int, groups: int, routers: int) -> int:
    """Router of ``group`` that holds the global link to ``other`` (offsets spread round-robin)."""
    k = (other - group) % groups
    return (k - 1) % routers


ROUTINGS = ("minimal", "valiant")


def valiant_group(i: int, j: int, g1: int, g2: int, groups: int) -> int:
    """The intermediate group of the message from host ``i`` (group ``g1``) to host ``j`` (group ``g2``).

    A fixed spread over the ``groups - 2`` other groups (so routes are
    explicit and reproducible), varying with both end points.
    """
    others = [g for g in range(groups) if g not in (g1, g2)]
    return others[(i * 7919 + j) % len(others)]


def dragonfly(groups: int, routers: int, hosts_per_router: int, bandwidth: float, link_latency: float,
              switch_latency: float, global_bandwidth: float | None = None, routing: str = "minimal") -> Platform:
    """A Dragonfly with one global link between every pair of groups.

    Parameters
    ----------
    groups, routers, hosts_per_router:
        ``g`` groups of ``a`` routers with ``p`` hosts each (``g*a*p`` hosts;
        host ``((G*a)+R)*p + i``).  Every router holds ``ceil((g-1)/a)`` global links.
    bandwidth:
        Bytes/s of host and local links (and global links unless ``global_bandwidth``).
    link_latency:
        Wire latency of every link (s).
    switch_latency:
        Latency of one router traversal (s), charged on every link that leaves a router.
    global_bandwidth:
        Bytes/s of the global links.
    routing:
        ``"minimal"`` or ``"valiant"`` (through an intermediate group, see
        :func:`valiant_group`; minimal when there are fewer than three groups).

    Returns
    -------
    Platform
        Hosts named ``g{G}r{R}h{i}``.
    """
    check_positive_int("groups", groups)
    check_positive_int("routers", routers)
    check_positive_int("hosts_per_router", hosts_per_router)
    check_positive("bandwidth", bandwidth)
    check_nonneg("link_latency", link_latency)
    check_nonneg("switch_latency", switch_latency)
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
    gbw = bandwidth if global_bandwidth is None else global_bandwidth
    a, p = routers, hosts_per_router
    pf = Platform(name=f"dragonfly{groups}x{a}x{p}" + ("_valiant" if routing == "valiant" else ""),
                  hosts=[f"g{g}r{r}h{i}" for g in range(groups) for r in range(a) for i in range(p)])
    where = [(g, r) for g in range(groups) for r in range(a) for _ in range(p)]
    sw = link_latency + switch_latency

    def up(h: int) -> str:
        return pf.add_link(f"{pf.hosts[h]}->R", bandwidth, link_latency)

    def down(h: int) -> str:
        return pf.add_link(f"R->{pf.hosts[h]}", bandwidth, sw)

    def local(g: int, r1: int, r2: int) -> list[str]:
        return [] if r1 == r2 else [pf.add_link(f"g{g}:r{r1}->r{r2}", bandwidth, sw)]

    def wire(g1: int, g2: int) -> str:
        return pf.add_link(f"G{g1}->G{g2}", gbw, sw)

    if routing == "minimal" or groups < 3:
        return _minimal_zones(pf, groups, a, p, up, down, local, wire)
    for i, j in itertools.permutations(range(len(pf.hosts)), 2):
        (g1, r1), (g2, r2) = where[i], where[j]
        route = [up(i)]
        if g1 == g2:
            route += local(g1, r1, r2)
        else:
            at = r1
            hops = [g1, valiant_group(i, j, g1, g2, groups), g2]
            for ga, gb in zip(hops, hops[1:]):
                route += local(ga, at, global_router(ga, gb, groups, a))
                route.append(wire(ga, gb))
                at = global_router(gb, ga, groups, a)
            route += local(g2, at, r2)
        route.append(down(j))
        pf.routes[(i, j)] = tuple(route)
    return pf


def _minimal_zones(pf: Platform, groups: int, routers: int, per_router: int, up: Callable[[int], str],
                   down: Callable[[int], str], local: Callable[[int, int, int], list[str]],
                   wire: Callable[[int, int], str]) -> Platform:
    """Minimal routing as zones: router leaves in group zones in one top zone (see the module docstring)."""
    router = [[f"g{g}r{r}" for r in range(routers)] for g in range(groups)]

    def leaf(g: int, r: int) -> Zone:
        first = (g * routers + r) * per_router
        hosts = list(range(first, first + per_router))
        routes: dict[tuple[str, str], tuple[str, ...]] = {(pf.hosts[h], router[g][r]): (up(h),) for h in hosts}
        routes |= {(router[g][r], pf.hosts[h]): (down(h),) for h in hosts}
        routes |= {(pf.hosts[i], pf.hosts[j]): (up(i), down(j)) for i, j in itertools.permutations(hosts, 2)}
        return Zone(name=f"zone_g{g}r{r}", hosts=hosts, routers=[router[g][r]], routes=routes)

    def group(g: int) -> Zone:
        pairs = itertools.permutations(range(routers), 2)
        return Zone(name=f"zone_g{g}", children=[leaf(g, r) for r in range(routers)],
                    zone_routes={(f"zone_g{g}r{r1}", f"zone_g{g}r{r2}"):
                                 ZoneRoute(gw_src=router[g][r1], gw_dst=router[g][r2], links=tuple(local(g, r1, r2)))
                                 for r1, r2 in pairs})

    top = Zone(name=f"zone_{pf.name}", children=[group(g) for g in range(groups)],
               zone_routes={(f"zone_g{g1}", f"zone_g{g2}"):
                            ZoneRoute(gw_src=router[g1][global_router(g1, g2, groups, routers)],
                                      gw_dst=router[g2][global_router(g2, g1, groups, routers)], links=(wire(g1, g2),))
                            for g1, g2 in itertools.permutations(range(groups), 2)})
    return Platform(name=pf.name, hosts=pf.hosts, links=pf.links, routes={}, host_speed=pf.host_speed, zone=top)


def with_endpoint_overhead(platform: Platform, alpha: float) -> Platform:
    """A copy of ``platform`` whose every route also pays ``alpha`` seconds of start-up.

    Half of ``alpha`` is charged at the sender and half at the receiver, on
    per-host FATPIPE links (no bandwidth limit), so contention is unchanged.
    A zoned platform stays zoned.
    """
    check_nonneg("alpha", alpha)
    if alpha == 0:
        return platform
    tx = {i: Link(name=f"sw_tx_{h}", bandwidth=1e15, latency=alpha / 2, sharing="FATPIPE")
          for i, h in enumerate(platform.hosts)}
    rx = {i: Link(name=f"sw_rx_{h}", bandwidth=1e15, latency=alpha / 2, sharing="FATPIPE")
          for i, h in enumerate(platform.hosts)}
    return wrap_host_routes(platform, f"{platform.name}_a", lambda i: (tx[i].name,), lambda j: (rx[j].name,),
                            {link.name: link for link in [*tx.values(), *rx.values()]})
