"""Tiling of a layered network onto crossbar cores, placement on a 2D mesh, and XY-routed packet counts.

A layer with ``fan_in`` inputs and ``fan_out`` neurons is cut into tiles of at
most ``axons x neurons`` synapses: tile ``(layer, in_block, out_block)``.  The
tiles of one ``(layer, out_block)`` form a *group*: they share the group's
neurons, whose membranes live in the group's *home* tile (``in_block = 0``);
the other tiles send it their partial currents every tick.  A spike of a
neuron is sent as one packet to every core whose axons it feeds (one unicast
per destination core).  Packets follow XY routing on the mesh: along x first,
then along y, so a packet takes ``|dx| + |dy|`` hops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Tile:
    """One crossbar core: rows ``in_lo:in_hi`` of layer ``layer``'s inputs, columns ``out_lo:out_hi``."""

    layer: int
    in_block: int
    out_block: int
    in_lo: int
    in_hi: int
    out_lo: int
    out_hi: int


def tile_network(sizes: list[int], axons: int, neurons: int) -> list[Tile]:
    """Tiles of every layer of a network with population sizes ``sizes`` (inputs first), in layer order."""
    tiles = []
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        for ob in range(math.ceil(fan_out / neurons)):
            for ib in range(math.ceil(fan_in / axons)):
                tiles.append(
                    Tile(
                        layer=layer,
                        in_block=ib,
                        out_block=ob,
                        in_lo=ib * axons,
                        in_hi=min((ib + 1) * axons, fan_in),
                        out_lo=ob * neurons,
                        out_hi=min((ob + 1) * neurons, fan_out),
                    )
                )
    return tiles


def place(n_cores: int, mesh: tuple[int, int], order: str = "sequential", seed: int = 0) -> np.ndarray:
    """``(n_cores, 2)`` mesh coordinates: row-major in tile order (``sequential``) or a random permutation (``random``).

    Raises
    ------
    ValueError
        If the mesh has fewer positions than cores.
    """
    width, height = mesh
    if n_cores > width * height:
        raise ValueError(f"{n_cores} cores do not fit on a {width}x{height} mesh")
    slots = np.arange(width * height)
    if order == "random":
        slots = np.random.default_rng(seed).permutation(slots)
    elif order != "sequential":
        raise ValueError(f"placement must be 'sequential' or 'random', got {order!r}")
    chosen = slots[:n_cores]
    return np.stack([chosen % width, chosen // width], axis=1)


Link = tuple[tuple[int, int], tuple[int, int]]
"""A directed link of the mesh: from one router's coordinates to a neighbour's."""


def xy_route(src: tuple[int, int], dst: tuple[int, int]) -> list[Link]:
    """The directed links of the XY route from ``src`` to ``dst`` (x first, then y)."""
    (x, y), (x1, y1) = src, dst
    links = []
    while x != x1:
        nx_ = x + (1 if x1 > x else -1)
        links.append(((x, y), (nx_, y)))
        x = nx_
    while y != y1:
        ny = y + (1 if y1 > y else -1)
        links.append(((x, y), (x, ny)))
        y = ny
    return links


@dataclass(kw_only=True)
class TrafficCounter:
    """Packets between core pairs, accumulated over ticks, then turned into hop and link statistics."""

    coords: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.coords)
        self.pairs = np.zeros((n, n), dtype=np.int64)

    def add(self, src: int, dst: np.ndarray, packets: np.ndarray | int) -> None:
        """Add ``packets`` packets from core ``src`` to each core in ``dst``."""
        np.add.at(self.pairs, (np.full(np.shape(dst), src), np.asarray(dst)), packets)

    def relocated(self, coords: np.ndarray) -> TrafficCounter:
        """The same packets between the same cores, with the cores placed at ``coords`` instead."""
        if coords.shape != self.coords.shape:
            raise ValueError(f"need {self.coords.shape} coordinates, got {coords.shape}")
        moved = TrafficCounter(coords=coords)
        moved.pairs = self.pairs.copy()
        return moved

    @property
    def packets(self) -> int:
        """Packets sent."""
        return int(self.pairs.sum())

    def hop_matrix(self) -> np.ndarray:
        """Manhattan distance between every pair of cores."""
        return np.asarray(np.abs(self.coords[:, None, :] - self.coords[None, :, :]).sum(-1))

    @property
    def hops(self) -> int:
        """Sum of the hop counts of all packets."""
        return int((self.pairs * self.hop_matrix()).sum())

    @property
    def longest_route(self) -> int:
        """Hops of the longest route any packet took (0 without packets)."""
        used = self.pairs > 0
        return int(self.hop_matrix()[used].max()) if used.any() else 0

    def link_loads(self) -> dict[Link, int]:
        """Packets that crossed each directed link (XY routing)."""
        loads: dict[Link, int] = {}
        for s, d in zip(*np.nonzero(self.pairs)):
            for link in xy_route((int(self.coords[s][0]), int(self.coords[s][1])),
                                 (int(self.coords[d][0]), int(self.coords[d][1]))):
                loads[link] = loads.get(link, 0) + int(self.pairs[s, d])
        return loads


@dataclass(frozen=True, kw_only=True)
class NocTiming:
    """Assumed timing of the mesh network-on-chip, for the first-order delay model of :func:`noc_delay`.

    Attributes
    ----------
    router_cycles, link_cycles
        Cycles a packet spends in each router it crosses and on each link.
    packet_cycles
        Cycles a link is busy with one packet (its flits, one after another).
    clock_mhz
        The network's clock.
    """

    router_cycles: float
    link_cycles: float
    packet_cycles: float
    clock_mhz: float


@dataclass(frozen=True, kw_only=True)
class NocDelay:
    """The first-order network-on-chip delay of a run (see :func:`noc_delay`).

    Attributes
    ----------
    route_cycles
        Zero-load latency of the longest route used: ``hops x (router + link cycles)``.
    serialisation_cycles
        The busiest link's packets per tick and input, sent one after another.
    cycles_per_tick
        Their sum: the time the network needs to deliver one tick's spikes.
    microseconds_per_input
        ``cycles_per_tick x ticks`` at the clock: the network's share of one inference.
    """

    route_cycles: float
    serialisation_cycles: float
    cycles_per_tick: float
    microseconds_per_input: float


def noc_delay(traffic: TrafficCounter, busiest_link: int, ticks: int, inputs: int, timing: NocTiming) -> NocDelay:
    """A first-order delay of the network-on-chip phase from the run's hop and link-load counters.

    Per tick and input, the network needs at least the latency of its longest route at zero load,
    ``hops x (router + link cycles)``, plus the time the busiest link takes to pass its packets one after
    another (its load averaged over the ticks and inputs of the run, rounded up, times ``packet_cycles``).
    Queueing behind other links and bursts within a tick are not modelled: a lower bound, not a cycle-level
    simulation.

    Parameters
    ----------
    traffic
        The run's packets between cores (for the longest route).
    busiest_link
        Packets the busiest directed link carried over the run.
    ticks, inputs
        Ticks and inputs (images) of the run.
    timing
        The assumed cycles and clock.
    """
    route = traffic.longest_route * (timing.router_cycles + timing.link_cycles)
    serial = math.ceil(busiest_link / max(ticks * inputs, 1)) * timing.packet_cycles
    per_tick = route + serial
    return NocDelay(route_cycles=float(route), serialisation_cycles=float(serial), cycles_per_tick=float(per_tick),
                    microseconds_per_input=float(per_tick * ticks / timing.clock_mhz))
