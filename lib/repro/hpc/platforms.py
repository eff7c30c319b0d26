"""Network platforms for the SimGrid executor: pure-python builders and an XML writer.

A :class:`Platform` is a set of hosts, *directed* links (one SimGrid link per
direction, so the two directions never share bandwidth) and a route (list of
links) between every ordered pair of hosts, given in one of two forms:

* **explicit**: ``routes[(i, j)]`` for every pair, written as one SimGrid zone
  with ``routing="Full"`` (``p (p - 1)`` routes: a few hundred hosts at most);
* **zoned**: a tree of :class:`Zone` objects, written as nested SimGrid zones
  (each ``routing="Full"``) whose leaves hold hosts, routers and the routes
  between them, and whose inner zones hold ``zoneRoute`` entries between
  their children through gateway routers.  SimGrid composes a host-to-host
  route itself (its hierarchical routing: source to the gateway, the zone
  route, gateway to destination), so the file grows with the number of
  zones, not with the square of the hosts.  :meth:`Platform.route` resolves a
  route the same way in python, and :meth:`Platform.flattened` gives the
  explicit form of a zoned platform (the two simulate identically).

XML (version 4.1) is stable across SimGrid versions, unlike the programmatic
NetZone API, which changed between 3.32 and 4.x.  Nothing here imports SimGrid.

Builders: :func:`fully_connected`, :func:`two_dim_fc` (``R x C`` 2dfc / 2D
HyperX without switches, dimension-ordered 2-hop routes), :func:`kautz`
(``K(d, 2)``, ``d(d+1)`` nodes, unique 1- or 2-hop routes) and
:func:`fat_tree` (two levels, static D-mod-k up-routing), :func:`gpu_cluster`
(NVLink inside a node, PCIe switches and InfiniBand adapters between nodes)
and :func:`distributed_loop` (a circulant of switches with chords ``+-2^j``,
optionally with parallel chord links).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from xml.sax.saxutils import quoteattr


@dataclass(frozen=True, kw_only=True)
class Link:
    """A directed link: bandwidth in bytes/s, latency in s, SimGrid sharing policy."""

    name: str
    bandwidth: float
    latency: float
    sharing: str = "SHARED"


@dataclass(frozen=True, kw_only=True)
class ZoneRoute:
    """The route between two child zones of a :class:`Zone`.

    Attributes
    ----------
    gw_src, gw_dst:
        Gateway routers inside the source and destination child zones (at any depth).
    links:
        Links from ``gw_src`` to ``gw_dst``.
    """

    gw_src: str
    gw_dst: str
    links: tuple[str, ...]


@dataclass(kw_only=True)
class Zone:
    """A SimGrid netzone with ``Full`` routing: a leaf (hosts, routers, routes) or an inner zone (children, zone routes).

    Attributes
    ----------
    name:
        Zone id; distinct from every host, router and other zone name.
    hosts:
        Indices (into :attr:`Platform.hosts`) of the hosts of a leaf.
    routers:
        Router names of a leaf (gateways of the zone routes above it).
    routes:
        Leaf routes ``routes[(a, b)]`` between the host and router names of the leaf.
    children:
        Child zones of an inner zone.
    zone_routes:
        ``zone_routes[(child_a, child_b)]`` for every ordered pair of child names.
    """

    name: str
    hosts: list[int] = field(default_factory=list)
    routers: list[str] = field(default_factory=list)
    routes: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    children: list[Zone] = field(default_factory=list)
    zone_routes: dict[tuple[str, str], ZoneRoute] = field(default_factory=dict)

    def walk(self) -> Iterator[Zone]:
        """Every zone of the subtree rooted here, parents first."""
        yield self
        for child in self.children:
            yield from child.walk()


class ZoneRoutes(MutableMapping[tuple[int, int], tuple[str, ...]]):
    """The ``routes`` view of a zoned platform: host-pair routes resolved on demand (see :meth:`Platform.route`).

    Read-only: a zoned platform's routes come from its zones.
    """

    def __init__(self, platform: Platform) -> None:
        self._platform = platform

    def __getitem__(self, pair: tuple[int, int]) -> tuple[str, ...]:
        i, j = pair
        if i == j:
            raise KeyError(pair)
        return self._platform.route(i, j)

    def __setitem__(self, pair: tuple[int, int], route: tuple[str, ...]) -> None:
        raise TypeError(f"the routes of the zoned platform {self._platform.name!r} come from its zones; "
                        f"cannot set the route of {pair}")

    def __delitem__(self, pair: tuple[int, int]) -> None:
        raise TypeError(f"the routes of the zoned platform {self._platform.name!r} come from its zones; "
                        f"cannot delete the route of {pair}")

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return itertools.permutations(range(len(self._platform.hosts)), 2)

    def __len__(self) -> int:
        n = len(self._platform.hosts)
        return n * (n - 1)


@dataclass(kw_only=True)
class Platform:
    """Hosts, directed links and the route of every ordered host pair (explicit or zoned).

    Attributes
    ----------
    name:
        Platform name.
    hosts:
        Host names; rank ``i`` of a schedule runs on ``hosts[i]`` by default.
    links:
        Links by name.
    routes:
        ``routes[(i, j)]`` = link names from host ``i`` to host ``j`` (``i != j``); for a
        zoned platform a read-only view resolved from :attr:`zone`.
    host_speed:
        Host speed in flop/s (used only to turn ``gamma`` into compute time).
    zone:
        Root of the zone tree (zoned form), or ``None`` (explicit form).
    """

    name: str
    hosts: list[str]
    links: dict[str, Link] = field(default_factory=dict)
    routes: MutableMapping[tuple[int, int], tuple[str, ...]] = field(default_factory=dict)
    host_speed: float = 1e9
    zone: Zone | None = None

    def __post_init__(self) -> None:
        self._paths: dict[str, tuple[Zone, ...]] | None = None
        if self.zone is not None:
            self.routes = ZoneRoutes(self)

    def add_link(self, name: str, bandwidth: float, latency: float, sharing: str = "SHARED") -> str:
        """Add (or reuse, if identical) a link; return its name."""
        link = Link(name=name, bandwidth=float(bandwidth), latency=float(latency), sharing=sharing)
        if self.links.setdefault(name, link) != link:
            raise ValueError(f"link {name!r} defined twice with different parameters")
        return name

    def route(self, i: int, j: int) -> tuple[str, ...]:
        """Links from host ``i`` to host ``j``.

        A zoned platform resolves it as SimGrid does: in the zone that is the
        lowest common ancestor of both hosts, the leaf route if they share a
        leaf; otherwise the route to the source gateway of the zone route
        between the two children, its links, and the route from its
        destination gateway (each resolved recursively).
        """
        if self.zone is None:
            return self.routes[(i, j)]
        return self._resolve(self.hosts[i], self.hosts[j])

    def _zone_paths(self) -> dict[str, tuple[Zone, ...]]:
        """Zones from the root down to the leaf holding each host and router."""
        if self._paths is None:
            paths: dict[str, tuple[Zone, ...]] = {}

            def visit(zone: Zone, above: tuple[Zone, ...]) -> None:
                here = (*above, zone)
                for name in [self.hosts[h] for h in zone.hosts] + zone.routers:
                    if name in paths:
                        raise ValueError(f"netpoint {name!r} is in two zones")
                    paths[name] = here
                for child in zone.children:
                    visit(child, here)

            visit(self.root_zone(), ())
            self._paths = paths
        return self._paths

    def _resolve(self, src: str, dst: str) -> tuple[str, ...]:
        paths = self._zone_paths()
        ps, pd = paths[src], paths[dst]
        k = 0
        while k < min(len(ps), len(pd)) and ps[k] is pd[k]:
            k += 1
        if k == len(ps) == len(pd):
            return ps[-1].routes[(src, dst)]
        zr = ps[k - 1].zone_routes[(ps[k].name, pd[k].name)]
        head = () if src == zr.gw_src else self._resolve(src, zr.gw_src)
        tail = () if dst == zr.gw_dst else self._resolve(zr.gw_dst, dst)
        return (*head, *zr.links, *tail)

    def route_latency(self, i: int, j: int) -> float:
        """Sum of the latencies along the route ``i -> j``."""
        return sum(self.links[n].latency for n in self.route(i, j))

    def route_bandwidth(self, i: int, j: int) -> float:
        """Bottleneck bandwidth of the route ``i -> j``."""
        return min(self.links[n].bandwidth for n in self.route(i, j))

    def hops(self, i: int, j: int) -> int:
        """Number of links on the route ``i -> j``."""
        return len(self.route(i, j))

    def flattened(self) -> Platform:
        """The explicit form: the same hosts and links, every host-pair route resolved."""
        routes = {pair: self.route(*pair) for pair in itertools.permutations(range(len(self.hosts)), 2)}
        return Platform(name=self.name, hosts=list(self.hosts), links=dict(self.links), routes=routes,
                        host_speed=self.host_speed)

    def check(self) -> None:
        """Raise ``ValueError`` unless every ordered host pair has a route of known links.

        A zoned platform is checked zone by zone (which implies every pair
        resolves): every host in exactly one leaf, every leaf route between
        all its netpoints, every inner zone with a route between all its
        children through gateways inside them, no unknown link.
        """
        if self.zone is not None:
            self._check_zones()
            return
        n = len(self.hosts)
        for i, j in itertools.permutations(range(n), 2):
            route = self.routes.get((i, j))
            if not route:
                raise ValueError(f"no route {self.hosts[i]} -> {self.hosts[j]}")
            missing = [x for x in route if x not in self.links]
            if missing:
                raise ValueError(f"route {i}->{j} uses unknown links {missing}")

    def root_zone(self) -> Zone:
        """The root of the zone tree.

        Raises
        ------
        ValueError
            If the platform is explicit (has no zones).
        """
        if self.zone is None:
            raise ValueError(f"platform {self.name!r} has explicit routes, not zones")
        return self.zone

    def _check_zones(self) -> None:
        paths = self._zone_paths()
        root = self.root_zone()
        if not set(self.hosts) <= set(paths) or len({h for z in root.walk() for h in z.hosts}) != len(self.hosts):
            raise ValueError("every host must be in exactly one leaf zone")
        names = [z.name for z in root.walk()]
        if len(set(names)) != len(names) or set(names) & set(paths):
            raise ValueError("zone names must be distinct from each other and from hosts and routers")
        depth = {id(root): 0}
        for zone in root.walk():
            depth.update({id(c): depth[id(zone)] + 1 for c in zone.children})
            used = [*zone.routes.values(), *(zr.links for zr in zone.zone_routes.values())]
            missing = sorted({x for route in used for x in route} - set(self.links))
            if missing:
                raise ValueError(f"zone {zone.name!r} uses unknown links {missing[:5]}")
            if zone.children and (zone.hosts or zone.routers or zone.routes):
                raise ValueError(f"zone {zone.name!r} has both children and hosts, routers or routes")
            points = [self.hosts[h] for h in zone.hosts] + zone.routers
            gaps = [pr for pr in itertools.permutations(points, 2) if pr not in zone.routes]
            gaps += [pr for pr in itertools.permutations([c.name for c in zone.children], 2)
                     if pr not in zone.zone_routes]
            if gaps:
                raise ValueError(f"zone {zone.name!r} has no route {gaps[0][0]} -> {gaps[0][1]}")
            below = depth[id(zone)] + 1
            for (a, b), zr in zone.zone_routes.items():
                for gw, child in ((zr.gw_src, a), (zr.gw_dst, b)):
                    where = paths.get(gw, ())
                    if len(where) <= below or gw not in where[-1].routers or where[below].name != child:
                        raise ValueError(f"gateway {gw!r} of zone route {a} -> {b} is not a router inside {child!r}")

    def to_xml(self) -> str:
        """The platform as SimGrid XML (version 4.1): one Full zone, or the zone tree."""
        self.check()
        out = ["<?xml version='1.0'?>",
               '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
               '<platform version="4.1">']
        if self.zone is None:
            out.append(f'<zone id={quoteattr(self.name)} routing="Full">')
            out += [f'<host id={quoteattr(h)} speed="{self.host_speed!r}f"/>' for h in self.hosts]
            out += [self._link_xml(link) for link in self.links.values()]
            for (i, j), route in sorted(self.routes.items()):
                out.append(_route_xml("route", self.hosts[i], self.hosts[j], route))
            out.append("</zone>")
        else:
            self._zone_xml(self.zone, set(), out)
        out += ["</platform>", ""]
        return "\n".join(out)

    @staticmethod
    def _link_xml(link: Link) -> str:
        return (f'<link id={quoteattr(link.name)} bandwidth="{link.bandwidth!r}Bps" '
                f'latency="{link.latency!r}s" sharing_policy="{link.sharing}"/>')

    def _zone_xml(self, zone: Zone, declared: set[str], out: list[str]) -> None:
        """Append ``zone`` as XML, children first; a link is declared in the first zone written that uses it.

        SimGrid's parser takes a zone that starts with a link for a leaf, so an
        inner zone lists its children before its own links and zone routes.
        """
        out.append(f'<zone id={quoteattr(zone.name)} routing="Full">')
        for child in zone.children:
            self._zone_xml(child, declared, out)
        used = [*zone.routes.values(), *(zr.links for zr in zone.zone_routes.values())]
        fresh = list(dict.fromkeys(x for route in used for x in route if x not in declared))
        declared.update(fresh)
        out += [f'<host id={quoteattr(self.hosts[h])} speed="{self.host_speed!r}f"/>' for h in zone.hosts]
        out += [f"<router id={quoteattr(r)}/>" for r in zone.routers]
        out += [self._link_xml(self.links[x]) for x in fresh]
        out += [_route_xml("route", a, b, route) for (a, b), route in zone.routes.items()]
        out += [_route_xml("zoneRoute", a, b, zr.links, zr.gw_src, zr.gw_dst) for (a, b), zr in zone.zone_routes.items()]
        out.append("</zone>")


def _route_xml(tag: str, src: str, dst: str, links: tuple[str, ...], gw_src: str | None = None,
               gw_dst: str | None = None) -> str:
    gws = "" if gw_src is None or gw_dst is None else f" gw_src={quoteattr(gw_src)} gw_dst={quoteattr(gw_dst)}"
    ctn = "".join(f"<link_ctn id={quoteattr(x)}/>" for x in links)
    return f'<{tag} src={quoteattr(src)} dst={quoteattr(dst)}{gws} symmetrical="NO">{ctn}</{tag}>'


def wrap_host_routes(platform: Platform, name: str, before: Callable[[int], tuple[str, ...]],
                     after: Callable[[int], tuple[str, ...]], links: Mapping[str, Link]) -> Platform:
    """A copy of ``platform`` whose route ``i -> j`` is ``before(i) + route + after(j)``.

    ``links`` are added to the copy.  A zoned platform keeps its zones: the
    leaf routes that start at a host get ``before``, those that end at one
    get ``after`` (hosts are never gateways, so every host-pair route gains
    exactly one of each).
    """
    all_links = {**platform.links, **links}
    hosts = list(platform.hosts)
    if platform.zone is None:
        routes = {(i, j): (*before(i), *route, *after(j)) for (i, j), route in platform.routes.items()}
        return replace(platform, name=name, links=all_links, routes=routes)
    index = {h: i for i, h in enumerate(hosts)}

    def wrapped(zone: Zone) -> Zone:
        routes = {(a, b): (*(before(index[a]) if a in index else ()), *route, *(after(index[b]) if b in index else ()))
                  for (a, b), route in zone.routes.items()}
        return replace(zone, routes=routes, children=[wrapped(c) for c in zone.children])

    return Platform(name=name, hosts=hosts, links=all_links, routes={}, host_speed=platform.host_speed,
                    zone=wrapped(platform.zone))


def _direct(pf: Platform, i: int, j: int, bandwidth: float, latency: float) -> str:
    return pf.add_link(f"{pf.hosts[i]}->{pf.hosts[j]}", bandwidth, latency)


def fully_connected(p: int, bandwidth: float, latency: float) -> Platform:
    """``p`` hosts, a dedicated directed link between every ordered pair."""
    pf = Platform(name=f"full{p}", hosts=[f"h{i}" for i in range(p)])
    for i, j in itertools.permutations(range(p), 2):
        pf.routes[(i, j)] = (_direct(pf, i, j, bandwidth, latency),)
    return pf


def two_dim_fc(rows: int, cols: int, bandwidth: float, latency: float) -> Platform:
    """``R x C`` two-dimensional fully connected network (host ``(r, c)`` = rank ``r*C + c``).

    Direct links to every host of the same row and of the same column (degree
    ``R+C-2``); other pairs are routed row first, then column (2 hops).
    """
    pf = Platform(name=f"2dfc{rows}x{cols}", hosts=[f"n{r}_{c}" for r in range(rows) for c in range(cols)])

    def node(r: int, c: int) -> int:
        return r * cols + c

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
    pf = Platform(name=f"kautz{d}", hosts=names)
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
             uplink_bandwidth: float | None = None, switch_latency: float = 0.0) -> Platform:
    """Two-level fat tree: leaf switches of ``hosts_per_leaf`` hosts, ``spines`` spine switches.

    Every host has an up and a down link to its leaf; every leaf an up and a
    down link to every spine (bandwidth ``uplink_bandwidth``, default
    ``bandwidth``).  Routes: same leaf ``host-up, host-down`` (2 links); else
    ``host-up, leaf->spine, spine->leaf, host-down`` (4 links) through spine
    ``dst mod spines`` (static D-mod-k).  ``spines < hosts_per_leaf`` tapers it.
    Every switch crossed adds ``switch_latency`` once, to the link leaving
    towards it (host->leaf, leaf->spine, spine->leaf); the last link to a
    host pays ``latency`` only, so a route of ``h`` links pays ``h - 1``
    switch latencies.
    """
    if p % hosts_per_leaf:
        raise ValueError("hosts_per_leaf must divide p")
    up_bw = bandwidth if uplink_bandwidth is None else uplink_bandwidth
    pf = Platform(name=f"fattree{p}_{hosts_per_leaf}_{spines}", hosts=[f"h{i}" for i in range(p)])

    def leaf(i: int) -> int:
        return i // hosts_per_leaf

    for i, j in itertools.permutations(range(p), 2):
        up = pf.add_link(f"h{i}->L{leaf(i)}", bandwidth, latency + switch_latency)
        down = pf.add_link(f"L{leaf(j)}->h{j}", bandwidth, latency)
        if leaf(i) == leaf(j):
            pf.routes[(i, j)] = (up, down)
        else:
            s = j % spines
            pf.routes[(i, j)] = (up, pf.add_link(f"L{leaf(i)}->S{s}", up_bw, latency + switch_latency),
                                 pf.add_link(f"S{s}->L{leaf(j)}", up_bw, latency + switch_latency), down)
    return pf


@dataclass(frozen=True, kw_only=True)
class GpuClusterSettings:
    """Link constants of a :func:`gpu_cluster` (bytes/s and seconds), one record instead of nine keywords.

    The defaults are the TSUBAME3-like constants of the authors' platform
    generator as summarised in spec ``multileader-allreduce`` (NVLink 50 GB/s,
    PCIe switch 16 GB/s, 100 Gb/s InfiniBand, 100 ns per switch, 2 PLX switches
    with one adapter each per node); the link latencies are our assumption.

    Attributes
    ----------
    nvlink_bandwidth, nvlink_latency
        Each directed GPU-to-GPU link inside a node.
    pcie_bandwidth, pcie_latency
        Each GPU's link to its PCIe switch (one per direction).
    nic_bandwidth, nic_latency
        Each PCIe switch's InfiniBand adapter (one link per direction), shared by the GPUs behind it.
    nics_per_node
        PCIe switches (with one adapter each) per node; must divide the GPUs per node.
    switch_latency, switch_hops
        The non-blocking fabric between nodes: ``switch_hops`` switches of ``switch_latency`` each.
    """

    nvlink_bandwidth: float = 50e9
    nvlink_latency: float = 1e-6
    pcie_bandwidth: float = 16e9
    pcie_latency: float = 5e-7
    nic_bandwidth: float = 12.5e9
    nic_latency: float = 5e-7
    nics_per_node: int = 2
    switch_latency: float = 1e-7
    switch_hops: int = 3

    @property
    def inter_node_latency(self) -> float:
        """Latency of a route between two nodes: PCIe and adapter links at both ends plus the fabric."""
        return 2 * self.pcie_latency + 2 * self.nic_latency + self.switch_hops * self.switch_latency

    @property
    def inter_node_beta(self) -> float:
        """Seconds per byte of an inter-node flow alone on its path (the slower of the PCIe and adapter links)."""
        return 1.0 / min(self.nic_bandwidth, self.pcie_bandwidth)


def gpu_cluster(nodes: int, gpus_per_node: int, settings: GpuClusterSettings | None = None) -> Platform:
    """GPU cluster: NVLink inside a node, PCIe switches and InfiniBand between nodes.

    Host ``g{m}_{l}`` is GPU ``l`` of node ``m`` (rank ``m*k + l``).  Inside a
    node every ordered GPU pair has its own NVLink link.  Between nodes a
    message goes GPU -> PCIe switch (a per-GPU link of ``pcie_bandwidth``),
    the switch's NIC uplink (``nic_bandwidth``, shared by the
    ``k / nics_per_node`` GPUs behind that switch), a non-blocking
    (full-bisection) InfiniBand fabric of ``switch_hops`` switches of
    ``switch_latency`` each (modelled as one latency-only FATPIPE link), and
    the mirror path down to the destination GPU.  GPU ``l`` sits behind PCIe
    switch ``l // (k / nics_per_node)``.

    Parameters
    ----------
    nodes, gpus_per_node
        Nodes and GPUs (ranks) per node.
    settings
        The link constants (:class:`GpuClusterSettings`; its defaults when ``None``).

    Raises
    ------
    ValueError
        For fewer than one node or GPU, or ``nics_per_node`` not dividing ``gpus_per_node``.
    """
    s = GpuClusterSettings() if settings is None else settings
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"nodes and gpus_per_node must be >= 1, got {nodes}, {gpus_per_node}")
    if s.nics_per_node < 1 or gpus_per_node % s.nics_per_node:
        raise ValueError(f"nics_per_node={s.nics_per_node} must divide gpus_per_node={gpus_per_node}")
    k, per_nic = gpus_per_node, gpus_per_node // s.nics_per_node
    pf = Platform(name=f"gpu{nodes}x{k}", hosts=[f"g{m}_{g}" for m in range(nodes) for g in range(k)])
    fabric = pf.add_link("ib_fabric", 1e15, s.switch_hops * s.switch_latency, "FATPIPE")
    for i, j in itertools.permutations(range(nodes * k), 2):
        (mi, li), (mj, lj) = divmod(i, k), divmod(j, k)
        if mi == mj:
            pf.routes[(i, j)] = (pf.add_link(f"nvl{mi}_{li}->{lj}", s.nvlink_bandwidth, s.nvlink_latency),)
            continue
        si, sj = li // per_nic, lj // per_nic
        pf.routes[(i, j)] = (
            pf.add_link(f"pcie{mi}_{li}_up", s.pcie_bandwidth, s.pcie_latency),
            pf.add_link(f"nic{mi}_{si}_up", s.nic_bandwidth, s.nic_latency),
            fabric,
            pf.add_link(f"nic{mj}_{sj}_down", s.nic_bandwidth, s.nic_latency),
            pf.add_link(f"pcie{mj}_{lj}_down", s.pcie_bandwidth, s.pcie_latency),
        )
    return pf


def loop_offsets(switches: int) -> list[int]:
    """Chord offsets ``2^j < switches`` of the distributed loop network on ``switches`` switches."""
    if switches < 1:
        raise ValueError(f"switches must be >= 1, got {switches}")
    return [1 << j for j in range(max(switches - 1, 0).bit_length()) if (1 << j) < switches]


def loop_path(src: int, dst: int, switches: int) -> list[int]:
    """Signed chord offsets taking switch ``src`` to ``dst`` in the power-of-two circulant.

    One hop when ``dst - src`` is ``+-2^j`` modulo ``switches`` (every
    halving-doubling partner is); otherwise the shortest signed binary
    decomposition (non-adjacent form), ties broken towards fewer hops then
    positive offsets.
    """
    d = (dst - src) % switches
    if d == 0:
        return []
    offs = loop_offsets(switches)
    for o in offs:
        if d == o:
            return [o]
        if d == switches - o:
            return [-o]
    # The non-adjacent form of the shorter signed distance: fewest signed powers of two.
    x = d if d <= switches - d else d - switches
    hops, v, bit = [], x, 1
    while v:
        if v & 1:
            digit = 2 - (v % 4)
            v -= digit
            hops.append(digit * bit)
        v >>= 1
        bit <<= 1
    if sum(hops) % switches != d:
        raise AssertionError(f"loop path {src}->{dst} on {switches} switches: {hops}")
    return hops


def distributed_loop(switches: int, hosts_per_switch: int, bandwidth: float, latency: float, *,
                     chord_copies: int | None = None, switch_latency: float = 1e-7) -> Platform:
    """Distributed loop network (DLN) variant: a circulant of switches with chords ``+-2^j``.

    Switch ``s`` links to ``s +- 2^j (mod S)`` for every ``2^j < S``; host
    ``a`` of switch ``s`` is rank ``s*p + a`` (``p = hosts_per_switch``) and
    has an up and a down link to its switch.  With this block mapping the
    partner ``r xor 2^i`` of a halving-doubling step is on the same switch
    (``2^i < p``) or exactly one chord away, so every step has a fixed path
    length (2 or 3 links).

    ``chord_copies`` parallel links form each directed chord (default ``1``,
    one shared link).  With ``chord_copies = p`` host ``a`` always uses copy
    ``a`` (our reconstruction of the paper's contention-mitigation technique,
    whose details are not in its abstract): the ``p`` flows that leave a
    switch in the same step then never share a link.  Paths that need several
    chords (not used by halving-doubling) take the non-adjacent-form route.
    Every switch traversed adds ``switch_latency`` to its outgoing link.
    """
    S, p = switches, hosts_per_switch
    if S < 1 or p < 1:
        raise ValueError(f"switches and hosts_per_switch must be >= 1, got {S}, {p}")
    copies = 1 if chord_copies is None else chord_copies
    if copies < 1:
        raise ValueError(f"chord_copies must be >= 1, got {chord_copies}")
    pf = Platform(name=f"dln{S}x{p}c{copies}", hosts=[f"h{s}_{a}" for s in range(S) for a in range(p)])
    lat = latency + switch_latency
    paths = {(s, t): loop_path(s, t, S) for s in range(S) for t in range(S)}
    for i, j in itertools.permutations(range(S * p), 2):
        (si, ai), (sj, aj) = divmod(i, p), divmod(j, p)
        route = [pf.add_link(f"h{si}_{ai}->s{si}", bandwidth, lat)]
        cur = si
        for off in paths[(si, sj)]:
            nxt = (cur + off) % S
            route.append(pf.add_link(f"s{cur}->s{nxt}#{ai % copies}", bandwidth, lat))
            cur = nxt
        route.append(pf.add_link(f"s{sj}->h{sj}_{aj}", bandwidth, latency))
        pf.routes[(i, j)] = tuple(route)
    return pf
