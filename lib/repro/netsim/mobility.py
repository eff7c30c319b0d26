"""Synthetic vehicular mobility: a Manhattan road grid with buses and taxis, RSUs, and coverage queries.

One generator serves every vehicular chapter.  A :class:`City` is a square grid of intersections
(``networkx.grid_2d_graph``) with blocks of ``block_m`` metres.  Buses ping-pong along fixed shortest
paths between far-apart intersections and stop for ``stop_s`` seconds every ``stop_spacing_m`` metres;
taxis follow random waypoints over the graph.  Positions are sampled every ``dt`` seconds into a
``(steps, vehicles, 2)`` array.  Road-side units (RSUs) sit on intersections, either uniformly or
concentrated in the centre.  :class:`CoverageIndex` answers "which RSU covers this point" and
"who is my nearest neighbour" with ``scipy.spatial.cKDTree``.

The 1-D road of the three-tier V2X chapter (Poisson arrivals at one end, constant speeds) is
:func:`poisson_road_traffic`.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.spatial import cKDTree


@dataclass(frozen=True, kw_only=True)
class CitySpec:
    """The shape of a synthetic city and its fleet.

    Parameters
    ----------
    grid
        Intersections per side (``grid x grid``).
    block_m
        Length of one block (metres).
    buses, taxis
        Fleet sizes.
    routes
        Number of distinct bus routes (buses are spread over them round-robin).
    speed_min, speed_max
        Vehicle speeds are drawn uniformly in this range (m/s).
    stop_s, stop_spacing_m
        Buses stop for ``stop_s`` seconds every ``stop_spacing_m`` metres.
    horizon_s, dt
        Trajectories cover ``[0, horizon_s)`` sampled every ``dt`` seconds.
    """

    grid: int = 31
    block_m: float = 100.0
    buses: int = 60
    taxis: int = 0
    routes: int = 12
    speed_min: float = 6.0
    speed_max: float = 10.0
    stop_s: float = 20.0
    stop_spacing_m: float = 400.0
    horizon_s: float = 3600.0
    dt: float = 1.0

    @property
    def side_m(self) -> float:
        """Side length of the city (metres)."""
        return (self.grid - 1) * self.block_m

    @property
    def steps(self) -> int:
        """Number of trajectory samples."""
        return int(round(self.horizon_s / self.dt))


@dataclass(frozen=True, kw_only=True)
class Fleet:
    """Sampled trajectories of a fleet.

    Attributes
    ----------
    positions
        ``(steps, vehicles, 2)`` array of x, y in metres.
    is_bus
        ``(vehicles,)`` boolean, True for buses (the first ``buses`` vehicles).
    route_of
        ``(vehicles,)`` route index of each bus, -1 for taxis.
    dt
        Sampling period (seconds).
    """

    positions: np.ndarray
    is_bus: np.ndarray
    route_of: np.ndarray
    dt: float

    @property
    def vehicles(self) -> int:
        """Number of vehicles."""
        return self.positions.shape[1]

    @property
    def steps(self) -> int:
        """Number of samples."""
        return self.positions.shape[0]


def road_grid(spec: CitySpec) -> nx.Graph:
    """The city's road graph: a grid whose nodes carry ``pos`` (metres) and edges ``length``."""
    g = nx.grid_2d_graph(spec.grid, spec.grid)
    for node in g.nodes:
        g.nodes[node]["pos"] = (node[0] * spec.block_m, node[1] * spec.block_m)
    nx.set_edge_attributes(g, spec.block_m, "length")
    return g


def _polyline(g: nx.Graph, path: list) -> tuple[np.ndarray, np.ndarray]:
    """Points of a node path and their cumulative distance along it."""
    pts = np.array([g.nodes[n]["pos"] for n in path], dtype=float)
    seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
    return pts, np.concatenate([[0.0], np.cumsum(seg)])


def _along(pts: np.ndarray, cum: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """Coordinates at distances ``dist`` along a polyline."""
    return np.stack([np.interp(dist, cum, pts[:, 0]), np.interp(dist, cum, pts[:, 1])], axis=-1)


def bus_routes(g: nx.Graph, spec: CitySpec, rng: np.random.Generator) -> list[list]:
    """``spec.routes`` shortest paths between far-apart intersections (Manhattan distance >= 60% of max).

    Ties between equally short grid paths are broken by a random jitter of the edge weights, so routes
    are not all L-shaped.
    """
    nodes = list(g.nodes)
    far = 0.6 * 2 * (spec.grid - 1)
    weights = {e: 1.0 + 0.2 * rng.random() for e in g.edges}
    nx.set_edge_attributes(g, weights, "jitter")
    routes: list[list[tuple[int, int]]] = []
    while len(routes) < spec.routes:
        a, b = (nodes[i] for i in rng.choice(len(nodes), size=2, replace=False))
        if abs(a[0] - b[0]) + abs(a[1] - b[1]) >= far:
            routes.append(nx.shortest_path(g, a, b, weight="jitter"))
    return routes


def _bus_distance(t: np.ndarray, speed: float, spacing: float, stop_s: float, offset: float) -> np.ndarray:
    """Distance travelled by a bus at times ``t``: cruise ``spacing`` metres, then dwell ``stop_s``."""
    leg = spacing / speed + stop_s
    tt = t + offset
    return np.floor(tt / leg) * spacing + np.minimum(np.mod(tt, leg), spacing / speed) * speed


def generate_fleet(spec: CitySpec, seed: int) -> Fleet:
    """Trajectories of ``spec.buses`` buses and ``spec.taxis`` taxis, seeded.

    Parameters
    ----------
    spec
        The city and fleet.
    seed
        Seed of routes, speeds, departures and taxi waypoints.

    Returns
    -------
    Fleet
        The sampled positions.
    """
    rng = np.random.default_rng(seed)
    g = road_grid(spec)
    t = np.arange(spec.steps) * spec.dt
    routes = [_polyline(g, r) for r in bus_routes(g, spec, rng)]
    n = spec.buses + spec.taxis
    pos = np.empty((spec.steps, n, 2), dtype=np.float32)
    route_of = np.full(n, -1, dtype=int)
    for v in range(spec.buses):
        k = v % spec.routes
        pts, cum = routes[k]
        length = cum[-1]
        speed = rng.uniform(spec.speed_min, spec.speed_max)
        offset = rng.uniform(0.0, 2 * length / speed)  # staggered departures
        d = np.mod(_bus_distance(t, speed, spec.stop_spacing_m, spec.stop_s, offset), 2 * length)
        pos[:, v] = _along(pts, cum, np.where(d <= length, d, 2 * length - d))
        route_of[v] = k
    nodes = list(g.nodes)
    for v in range(spec.buses, n):
        speed = rng.uniform(spec.speed_min, spec.speed_max)
        need = speed * spec.horizon_s + spec.block_m
        path = [nodes[rng.integers(len(nodes))]]
        total = 0.0
        while total < need:  # random waypoints, joined by shortest paths
            dest = nodes[rng.integers(len(nodes))]
            if dest == path[-1]:
                continue
            leg = nx.shortest_path(g, path[-1], dest)
            path += leg[1:]
            total += (len(leg) - 1) * spec.block_m
        pts, cum = _polyline(g, path)
        pos[:, v] = _along(pts, cum, speed * t)
    return Fleet(positions=pos, is_bus=np.arange(n) < spec.buses, route_of=route_of, dt=spec.dt)


def _intersections(spec: CitySpec) -> np.ndarray:
    return np.array([(i, j) for i in range(spec.grid) for j in range(spec.grid)], dtype=float) * spec.block_m


def _central(spec: CitySpec, xy: np.ndarray, centre_side_m: float) -> np.ndarray:
    return np.asarray(np.all(np.abs(xy - spec.side_m / 2) <= centre_side_m / 2, axis=1))


def rsu_room(spec: CitySpec, count: int, centre_share: float, centre_side_m: float = 1000.0) -> bool:
    """Whether :func:`place_rsus` can place ``count`` RSUs on distinct intersections with ``centre_share`` central."""
    xy = _intersections(spec)
    if centre_share == 0.0:
        return count <= len(xy)
    central = int(_central(spec, xy, centre_side_m).sum())
    n_centre = int(round(centre_share * count))
    return n_centre <= central and count - n_centre <= len(xy) - central


def place_rsus(spec: CitySpec, count: int, seed: int, centre_share: float = 0.0,
               centre_side_m: float = 1000.0) -> np.ndarray:
    """RSU positions on distinct intersections.

    Parameters
    ----------
    spec
        The city.
    count
        Number of RSUs.
    seed
        Seed of the placement.
    centre_share
        Fraction of the RSUs placed inside the central square of side ``centre_side_m``
        (0 gives a uniform placement; the heterogeneous variant of the fuzzy chapter uses 2/3).
    centre_side_m
        Side of the central square (metres).

    Returns
    -------
    numpy.ndarray
        ``(count, 2)`` positions in metres.
    """
    if not 0.0 <= centre_share <= 1.0:
        raise ValueError(f"centre_share must lie in [0, 1], got {centre_share}")
    rng = np.random.default_rng(seed)
    xy = _intersections(spec)
    if centre_share == 0.0:
        return xy[rng.choice(len(xy), size=count, replace=False)]
    central = _central(spec, xy, centre_side_m)
    n_centre = int(round(centre_share * count))
    inner = rng.choice(np.flatnonzero(central), size=n_centre, replace=False)
    outer = rng.choice(np.flatnonzero(~central), size=count - n_centre, replace=False)
    return xy[np.concatenate([inner, outer]).astype(int)]


class CoverageIndex:
    """KD-tree queries for fixed stations (RSUs) over moving points.

    Parameters
    ----------
    stations
        ``(S, 2)`` station positions.
    radius
        Coverage radius (metres).
    """

    def __init__(self, stations: np.ndarray, radius: float) -> None:
        self.stations = np.asarray(stations, dtype=float)
        self.radius = float(radius)
        self.tree = cKDTree(self.stations)

    def nearest(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distance to and index of the nearest station for every point."""
        dist, idx = self.tree.query(np.asarray(points, dtype=float), k=1)
        return dist, idx

    def covered(self, points: np.ndarray) -> np.ndarray:
        """Whether each point is within ``radius`` of some station."""
        return self.nearest(points)[0] <= self.radius

    def count_in_range(self, points: np.ndarray) -> np.ndarray:
        """Number of stations within ``radius`` of each point."""
        return self.tree.query_ball_point(np.asarray(points, dtype=float), r=self.radius, return_length=True)


def nearest_neighbours(points: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Each point's nearest other point within ``radius``.

    Returns
    -------
    tuple of numpy.ndarray
        ``(index, count)``: the neighbour's index (-1 when none is in range) and how many other points
        are in range.
    """
    pts = np.asarray(points, dtype=float)
    tree = cKDTree(pts)
    dist, idx = tree.query(pts, k=2, distance_upper_bound=radius)
    nb = np.where(np.isfinite(dist[:, 1]), idx[:, 1], -1)
    counts = tree.query_ball_point(pts, r=radius, return_length=True) - 1
    return nb.astype(int), counts


@dataclass(frozen=True, kw_only=True)
class RoadTraffic:
    """Vehicles on a straight road: entry time at x = 0 and constant speed.

    Attributes
    ----------
    entry
        ``(V,)`` time each vehicle is at x = 0 (negative for vehicles already on the road at t = 0).
    speed
        ``(V,)`` speeds (m/s).
    length_m
        Road length; a vehicle leaves at ``entry + length_m / speed``.
    """

    entry: np.ndarray
    speed: np.ndarray
    length_m: float

    def position(self, vehicle: int, t: float) -> float:
        """Position along the road of ``vehicle`` at time ``t``."""
        return float((t - self.entry[vehicle]) * self.speed[vehicle])

    def on_road(self, t: float) -> np.ndarray:
        """Boolean mask of the vehicles on the road at time ``t``."""
        x = (t - self.entry) * self.speed
        return (x >= 0) & (x < self.length_m)


def poisson_road_traffic(rate: float, length_m: float, horizon_s: float, speed_min: float, speed_max: float,
                         rng: np.random.Generator) -> RoadTraffic:
    """Poisson arrivals at rate ``rate`` (veh/s) over ``[0, horizon_s)``, with the road already in steady state.

    Vehicles already on the road at t = 0 are drawn as the arrivals of the preceding
    ``length_m / speed_min`` seconds, so the road is as full at t = 0 as it is later (no warm-up).
    """
    lead = length_m / speed_min
    n = rng.poisson(rate * (horizon_s + lead))
    entry = np.sort(rng.uniform(-lead, horizon_s, size=n))
    speed = rng.uniform(speed_min, speed_max, size=n)
    return RoadTraffic(entry=entry, speed=speed, length_m=float(length_m))
