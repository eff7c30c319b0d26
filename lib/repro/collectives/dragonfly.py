"""Switched Dragonfly platform and endpoint start-up overhead for the SimGrid executor.

:func:`dragonfly` builds a :class:`~repro.collectives.platforms.Platform` (pure
python, written as SimGrid XML with explicit routes) for a Dragonfly of
``groups`` groups of ``routers`` routers with ``hosts_per_router`` hosts each;
routers of a group are fully connected and every pair of groups is joined by
one global link.  Minimal routing: up to the source router, a local hop to
the router holding the global link (if needed), the global link, a local hop
to the destination router (if needed), down to the host (at most 5 links).
Valiant (non-minimal) routing sends every inter-group message through an
intermediate group, chosen per (source, destination) pair, which spreads the
load of one group pair over many global links (at most 7 links).

:func:`with_endpoint_overhead` adds a per-message start-up latency (software
and NIC overhead, the ``alpha`` of the alpha-beta model) at both ends of every
route, as non-limiting FATPIPE links, so that a simulated message costs
``alpha + sum(link latencies) + bytes / bandwidth`` when uncontended.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from repro.collectives.platforms import Platform
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
    pf = Platform(f"dragonfly{groups}x{a}x{p}" + ("_valiant" if routing == "valiant" else ""),
                  [f"g{g}r{r}h{i}" for g in range(groups) for r in range(a) for i in range(p)])
    where = [(g, r) for g in range(groups) for r in range(a) for _ in range(p)]
    sw = link_latency + switch_latency

    def up(h: int) -> str:
        return pf.add_link(f"{pf.hosts[h]}->R", bandwidth, link_latency)

    def down(h: int) -> str:
        return pf.add_link(f"R->{pf.hosts[h]}", bandwidth, sw)

    def local(g: int, r1: int, r2: int) -> list[str]:
        return [] if r1 == r2 else [pf.add_link(f"g{g}:r{r1}->r{r2}", bandwidth, sw)]

    for i, j in itertools.permutations(range(len(pf.hosts)), 2):
        (g1, r1), (g2, r2) = where[i], where[j]
        route = [up(i)]
        if g1 == g2:
            route += local(g1, r1, r2)
        else:
            hops = [g1, g2] if routing == "minimal" or groups < 3 else [g1, valiant_group(i, j, g1, g2, groups), g2]
            at = r1
            for ga, gb in zip(hops, hops[1:]):
                route += local(ga, at, global_router(ga, gb, groups, a))
                route.append(pf.add_link(f"G{ga}->G{gb}", gbw, sw))
                at = global_router(gb, ga, groups, a)
            route += local(g2, at, r2)
        route.append(down(j))
        pf.routes[(i, j)] = tuple(route)
    return pf


def with_endpoint_overhead(platform: Platform, alpha: float) -> Platform:
    """A copy of ``platform`` whose every route also pays ``alpha`` seconds of start-up.

    Half of ``alpha`` is charged at the sender and half at the receiver, on
    per-host FATPIPE links (no bandwidth limit), so contention is unchanged.
    """
    check_nonneg("alpha", alpha)
    if alpha == 0:
        return platform
    pf = replace(platform, name=f"{platform.name}_a", links=dict(platform.links), routes={})
    for (i, j), route in platform.routes.items():
        tx = pf.add_link(f"sw_tx_{pf.hosts[i]}", 1e15, alpha / 2, "FATPIPE")
        rx = pf.add_link(f"sw_rx_{pf.hosts[j]}", 1e15, alpha / 2, "FATPIPE")
        pf.routes[(i, j)] = (tx, *route, rx)
    return pf
