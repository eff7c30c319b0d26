"""Network platforms for the SimGrid executor: pure-python builders and an XML writer.

A :class:`Platform` is a set of hosts, *directed* links (one SimGrid link per
direction, so the two directions never share bandwidth) and an explicit route
(list of links) between every ordered pair of hosts.  It is written as a
SimGrid XML platform with ``routing="Full"`` and explicit asymmetric routes,
which is stable across SimGrid versions (unlike the programmatic NetZone API,
which changed between 3.32 and 4.x).  Nothing here imports SimGrid.

Builders: :func:`fully_connected`, :func:`two_dim_fc` (``R x C`` 2dfc / 2D
HyperX without switches, dimension-ordered 2-hop routes), :func:`kautz`
(``K(d, 2)``, ``d(d+1)`` nodes, unique 1- or 2-hop routes) and
:func:`fat_tree` (two levels, static D-mod-k up-routing).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr


@dataclass(frozen=True)
class Link:
    """A directed link: bandwidth in bytes/s, latency in s, SimGrid sharing policy."""

    name: str
    bandwidth: float
    latency: float
    sharing: str = "SHARED"


@dataclass
class Platform:
    """Hosts, directed links and the route of every ordered host pair.

    Attributes
    ----------
    name:
        Platform name.
    hosts:
        Host names; rank ``i`` of a schedule runs on ``hosts[i]`` by default.
    links:
        Links by name.
    routes:
        ``routes[(i, j)]`` = link names from host ``i`` to host ``j`` (``i != j``).
    host_speed:
        Host speed in flop/s (used only to turn ``gamma`` into compute time).
    """

    name: str
    hosts: list[str]
    links: dict[str, Link] = field(default_factory=dict)
    routes: dict[tuple[int, int], tuple[str, ...]] = field(default_factory=dict)
    host_speed: float = 1e9

    def add_link(self, name: str, bandwidth: float, latency: float, sharing: str = "SHARED") -> str:
        """Add (or reuse, if identical) a link; return its name."""
        link = Link(name, float(bandwidth), float(latency), sharing)
        if self.links.setdefault(name, link) != link:
            raise ValueError(f"link {name!r} defined twice with different parameters")
        return name

    def route_latency(self, i: int, j: int) -> float:
        """Sum of the latencies along the route ``i -> j``."""
        return sum(self.links[n].latency for n in self.routes[(i, j)])

    def route_bandwidth(self, i: int, j: int) -> float:
        """Bottleneck bandwidth of the route ``i -> j``."""
        return min(self.links[n].bandwidth for n in self.routes[(i, j)])

    def hops(self, i: int, j: int) -> int:
        """Number of links on the route ``i -> j``."""
        return len(self.routes[(i, j)])

    def check(self) -> None:
        """Raise ``ValueError`` unless every ordered pair has a route of known links."""
        n = len(self.hosts)
        for i, j in itertools.permutations(range(n), 2):
            route = self.routes.get((i, j))
            if not route:
                raise ValueError(f"no route {self.hosts[i]} -> {self.hosts[j]}")
            missing = [x for x in route if x not in self.links]
            if missing:
                raise ValueError(f"route {i}->{j} uses unknown links {missing}")

    def to_xml(self) -> str:
        """The platform as SimGrid XML (version 4.1, one Full-routing zone)."""
        self.check()
        out = ["<?xml version='1.0'?>",
               '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
               '<platform version="4.1">',
               f'<zone id={quoteattr(self.name)} routing="Full">']
        out += [f'<host id={quoteattr(h)} speed="{self.host_speed!r}f"/>' for h in self.hosts]
        for link in self.links.values():
            out.append(f'<link id={quoteattr(link.name)} bandwidth="{link.bandwidth!r}Bps" '
                       f'latency="{link.latency!r}s" sharing_policy="{link.sharing}"/>')
        for (i, j), route in sorted(self.routes.items()):
            ctn = "".join(f"<link_ctn id={quoteattr(x)}/>" for x in route)
            out.append(f'<route src={quoteattr(self.hosts[i])} dst={quoteattr(self.hosts[j])} '
                       f'symmetrical="NO">{ctn}</route>')
        out += ["</zone>", "</platform>", ""]
        return "\n".join(out)


def _direct(pf: Platform, i: int, j: int, bandwidth: float, latency: float) -> str:
    return pf.add_link(f"{pf.hosts[i]}->{pf.hosts[j]}", bandwidth, latency)


def fully_connected(p: int, bandwidth: float, latency: float) -> Platform:
    """``p`` hosts, a dedicated directed link between every ordered pair."""
    pf = Platform(f"full{p}", [f"h{i}" for i in range(p)])
    for i, j in itertools.permutations(range(p), 2):
        pf.routes[(i, j)] = (_direct(pf, i, j, bandwidth, latency),)
    return pf


def two_dim_fc(rows: int, cols: int, bandwidth: float, latency: float) -> Platform:
    """``R x C`` two-dimensional fully connected network (host ``(r, c)`` = rank ``r*C + c``).

    Direct links to every host of the same row and of the same column (degree
    ``R+C-2``); other pairs are routed row first, then column (2 hops).
    """
    pf = Platform(f"2dfc{rows}x{cols}", [f"n{r}_{c}" for r in range(rows) for c in range(cols)])
    node = lambda r, c: r * cols + c  # noqa: E731
    for (r1, c1), (r2, c2) in itertools.permutations(itertools.product(range(rows), range(cols)), 2):
        src, dst = node(r1, c1), node(r2, c2)
        if r1 == r2 or c1 == c2:
            pf.routes[(src, dst)] = (_direct(pf, src, dst, bandwidth, latency),)
        else:
            mid = node(r1, c2)
            pf.routes[(src, dst)] = (_direct(pf, src, mid, bandwidth, latency),
                                     _direct(pf, mid, dst, bandwidth, latency))
    return pf


def kautz_arcs(d: int) -> tuple[list[str], set[tuple[int, int]]]:
    """Vertices and arcs of the Kautz digraph ``K(d, 2)``.

    Vertices are the words ``ab`` over ``{0..d}`` with ``a != b`` (in
    lexicographic order); arc ``ab -> bx`` for every ``x != b``.
    """
    words = [(a, b) for a in range(d + 1) for b in range(d + 1) if a != b]
    index = {w: i for i, w in enumerate(words)}
    arcs = {(index[(a, b)], index[(b, x)]) for a, b in words for x in range(d + 1) if x != b}
    return [f"k{a}_{b}" for a, b in words], arcs


def kautz(d: int, bandwidth: float, latency: float, forward_latency: float = 0.0) -> Platform:
    """Switchless Kautz network ``K(d, 2)``: ``d(d+1)`` hosts of degree ``d``, diameter 2.

    Adjacent hosts use their arc; every other pair uses its unique 2-hop path
    through an intermediate host, whose forwarding delay ``forward_latency`` is
    modelled as an extra (non-limiting, FATPIPE) link.  Reconstruction from the
    abstract of spec ``kautz-fpga`` plus graph theory.
    """
    names, arcs = kautz_arcs(d)
    n = len(names)
    pf = Platform(f"kautz{d}", names)
    succ = {i: sorted(j for (a, j) in arcs if a == i) for i in range(n)}
    for i, j in itertools.permutations(range(n), 2):
        if (i, j) in arcs:
            pf.routes[(i, j)] = (_direct(pf, i, j, bandwidth, latency),)
            continue
        mids = [w for w in succ[i] if (w, j) in arcs]
        if len(mids) != 1:
            raise AssertionError(f"K({d},2): {len(mids)} two-hop paths {i}->{j}")
        w = mids[0]
        route = [_direct(pf, i, w, bandwidth, latency)]
        if forward_latency > 0:
            route.append(pf.add_link(f"fwd_{names[w]}", 1e15, forward_latency, "FATPIPE"))
        route.append(_direct(pf, w, j, bandwidth, latency))
        pf.routes[(i, j)] = tuple(route)
    return pf


def fat_tree(p: int, hosts_per_leaf: int, spines: int, bandwidth: float, latency: float,
             uplink_bandwidth: float | None = None) -> Platform:
    """Two-level fat tree: leaf switches of ``hosts_per_leaf`` hosts, ``spines`` spine switches.

    Every host has an up and a down link to its leaf; every leaf an up and a
    down link to every spine (bandwidth ``uplink_bandwidth``, default
    ``bandwidth``).  Routes: same leaf ``host-up, host-down`` (2 links); else
    ``host-up, leaf->spine, spine->leaf, host-down`` (4 links) through spine
    ``dst mod spines`` (static D-mod-k).  ``spines < hosts_per_leaf`` tapers it.
    """
    if p % hosts_per_leaf:
        raise ValueError("hosts_per_leaf must divide p")
    up_bw = bandwidth if uplink_bandwidth is None else uplink_bandwidth
    pf = Platform(f"fattree{p}_{hosts_per_leaf}_{spines}", [f"h{i}" for i in range(p)])
    leaf = lambda i: i // hosts_per_leaf  # noqa: E731
    for i, j in itertools.permutations(range(p), 2):
        up = pf.add_link(f"h{i}->L{leaf(i)}", bandwidth, latency)
        down = pf.add_link(f"L{leaf(j)}->h{j}", bandwidth, latency)
        if leaf(i) == leaf(j):
            pf.routes[(i, j)] = (up, down)
        else:
            s = j % spines
            pf.routes[(i, j)] = (up, pf.add_link(f"L{leaf(i)}->S{s}", up_bw, latency),
                                 pf.add_link(f"S{s}->L{leaf(j)}", up_bw, latency), down)
    return pf
