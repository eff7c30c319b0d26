"""Tick-by-tick simulation of a spiking network on a chip of crossbar cores, monolithic or partitioned.

Timing: every layer updates at every tick from the spikes its inputs emitted
at the previous tick (spikes are delivered to the next tick's axon buffers, as
on the chip), so all cores of a tick are independent.

* :func:`reference_run` -- the monolithic reference: whole-layer matrix
  products in torch with the ideal integer weights.
* :func:`chip_run` -- the chip: neuron groups (:class:`repro.neuro.core.NeuronGroup`)
  stepped in ``workers`` processes (the core phase) while the coordinator
  gathers the spikes and counts packets, hops and link loads on the mesh (the
  network-on-chip phase), as Simeuro splits core and NoC phases between GPU
  and CPU.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from repro.neuro.convert import SpikingNetwork
from repro.neuro.core import DeviceModel, NeuronGroup, program
from repro.neuro.mapping import Tile, TrafficCounter, place, tile_network


@dataclass(frozen=True, kw_only=True)
class ChipConfig:
    """Architecture of the simulated chip.

    Attributes
    ----------
    axons, neurons
        Crossbar size (rows x columns).
    mesh
        ``(width, height)`` of the 2D mesh.
    placement
        ``sequential`` or ``random``.
    device
        RRAM and ADC constraints.
    """

    axons: int
    neurons: int
    mesh: tuple[int, int]
    placement: str = "sequential"
    device: DeviceModel = field(default_factory=DeviceModel)


@dataclass(kw_only=True)
class Chip:
    """A network mapped onto a chip: tiles, their mesh coordinates and the programmed neuron groups."""

    config: ChipConfig
    network: SpikingNetwork
    tiles: list[Tile]
    coords: np.ndarray
    groups: list[NeuronGroup]
    home: dict[tuple[int, int], int]

    def destinations(self, layer: int) -> list[tuple[np.ndarray, int, int]]:
        """For the input population of weight layer ``layer``: ``(core ids, lo, hi)`` per input block."""
        out = []
        for ib in sorted({t.in_block for t in self.tiles if t.layer == layer}):
            cores = np.array([i for i, t in enumerate(self.tiles) if t.layer == layer and t.in_block == ib])
            t0 = self.tiles[cores[0]]
            out.append((cores, t0.in_lo, t0.in_hi))
        return out


def build_chip(network: SpikingNetwork, config: ChipConfig, seed: int) -> Chip:
    """Tile, place and program ``network`` (device variation drawn from ``seed``)."""
    tiles = tile_network(network.sizes, config.axons, config.neurons)
    coords = place(len(tiles), config.mesh, config.placement, seed)
    rng = np.random.default_rng(seed)
    groups, home = [], {}
    for i, t in enumerate(tiles):
        if t.in_block == 0:
            home[(t.layer, t.out_block)] = i
    for (layer, ob), _ in sorted(home.items()):
        members = [t for t in tiles if t.layer == layer and t.out_block == ob]
        w = network.weights[layer]
        groups.append(NeuronGroup(
            layer=layer, out_lo=members[0].out_lo, out_hi=members[0].out_hi, in_slices=[(t.in_lo, t.in_hi) for t in members],
            crossbars=[program(w[t.in_lo:t.in_hi, t.out_lo:t.out_hi], config.device, rng) for t in members],
            bias=network.biases[layer][members[0].out_lo:members[0].out_hi]))
    return Chip(config=config, network=network, tiles=tiles, coords=coords, groups=groups, home=home)


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """Spikes and statistics of a run.

    Attributes
    ----------
    spikes
        Per population after the inputs, ``(ticks, batch, neurons)`` 0/1 arrays.
    synaptic_events
        Synapse activations (active axons x crossbar columns).
    spike_packets, partial_packets
        Packets carrying spikes to destination cores, and partial currents to home cores.
    expected_spike_packets
        Spikes times destination cores, counted from the spike trains alone.
    hops, link_traversals, max_link_load
        Total hops, packets summed over every link they cross, the busiest link's packets.
    core_seconds, wall_seconds
        Wall time spent in the core phase (workers included) and in the whole tick loop.
    tick_core_seconds, tick_wall_seconds
        The same for every tick (on a shared machine the fastest tick is the least disturbed).
    traffic
        The packets between every pair of cores (to re-evaluate another placement of the same cores).
    """

    spikes: list[np.ndarray]
    synaptic_events: int = 0
    spike_packets: int = 0
    partial_packets: int = 0
    expected_spike_packets: int = 0
    hops: int = 0
    link_traversals: int = 0
    max_link_load: int = 0
    core_seconds: float = 0.0
    wall_seconds: float = 0.0
    tick_core_seconds: tuple[float, ...] = ()
    tick_wall_seconds: tuple[float, ...] = ()
    traffic: TrafficCounter | None = None

    def predictions(self) -> np.ndarray:
        """Class with the most output spikes per image (ties to the lowest index)."""
        return self.spikes[-1].sum(axis=0).argmax(axis=1)


def reference_run(network: SpikingNetwork, inputs: np.ndarray) -> RunResult:
    """The monolithic reference: whole-layer products in torch (float64), no architectural constraints."""
    ticks, batch, _ = inputs.shape
    ws = [torch.from_numpy(w) for w in network.weights]
    bs = [torch.from_numpy(b) for b in network.biases]
    v = [torch.zeros(batch, w.shape[1], dtype=torch.float64) for w in ws]
    prev = [torch.zeros(batch, w.shape[0], dtype=torch.float64) for w in ws]
    out = [np.zeros((ticks, batch, w.shape[1])) for w in ws]
    for t in range(ticks):
        new = []
        for layer, (w, b) in enumerate(zip(ws, bs)):
            v[layer] += prev[layer] @ w + b
            s = (v[layer] >= network.threshold).to(torch.float64)
            v[layer] -= s * network.threshold
            new.append(s)
            out[layer][t] = s.numpy()
        prev = [torch.from_numpy(inputs[t])] + new[:-1]
    return RunResult(spikes=out)


def _step_groups(groups: list[NeuronGroup], state: list[np.ndarray], prev: list[np.ndarray], device: DeviceModel,
                 threshold: float) -> tuple[list[np.ndarray], int]:
    spikes, events = [], 0
    for g, v in zip(groups, state):
        s, e = g.step(v, prev[g.layer], device, threshold)
        spikes.append(s)
        events += e
    return spikes, events


def _worker(conn, groups: list[NeuronGroup], device: DeviceModel, threshold: float, batch: int) -> None:
    torch.set_num_threads(1)
    state = [np.zeros((batch, g.out_hi - g.out_lo)) for g in groups]
    conn.send("ready")
    while True:
        prev = conn.recv()
        if prev is None:
            break
        conn.send(_step_groups(groups, state, prev, device, threshold))
    conn.close()


def chip_run(chip: Chip, inputs: np.ndarray, workers: int = 1) -> RunResult:
    """Simulate ``chip`` on ``inputs`` (``(ticks, batch, features)``), the neuron groups split over ``workers``.

    Groups are dealt to workers round-robin; with ``workers=1`` they run in
    this process.  The result does not depend on ``workers``.
    """
    ticks, batch, _ = inputs.shape
    net, n_layers = chip.network, len(chip.network.weights)
    shares = [chip.groups[w::workers] for w in range(workers)]
    owners = [[i for i in range(len(chip.groups)) if i % workers == w] for w in range(workers)]
    device, theta = chip.config.device, net.threshold
    conns, procs = [], []
    if workers > 1:
        ctx = multiprocessing.get_context("spawn")
        for share in shares:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, share, device, theta, batch), daemon=True)
            p.start()
            conns.append(parent)
            procs.append(p)
        for c in conns:  # the tick loop's clock starts once every worker has started
            if c.recv() != "ready":
                raise RuntimeError("a simulation worker failed to start")
    local_state = [np.zeros((batch, g.out_hi - g.out_lo)) for g in chip.groups]
    traffic = TrafficCounter(coords=chip.coords)
    dests = [chip.destinations(layer) for layer in range(n_layers)]
    group_tiles = [[i for i, t in enumerate(chip.tiles) if t.layer == g.layer and t.out_lo == g.out_lo]
                   for g in chip.groups]  # home tile first (tiles are listed by in_block)
    source_core = [np.zeros(w.shape[1], dtype=np.int64) for w in net.weights]
    for (layer, _), core in chip.home.items():
        home = chip.tiles[core]
        source_core[layer][home.out_lo:home.out_hi] = core
    out = [np.zeros((ticks, batch, w.shape[1])) for w in net.weights]
    prev = [inputs[0] * 0.0] + [np.zeros((batch, w.shape[1])) for w in net.weights[:-1]]
    events = partial = expected = 0
    core_seconds = 0.0
    tick_core: list[float] = []
    tick_wall: list[float] = []
    start = time.perf_counter()
    try:
        for t in range(ticks):
            t0 = time.perf_counter()
            if workers > 1:
                for c in conns:
                    c.send(prev)
                replies = [c.recv() for c in conns]
            else:
                replies = [_step_groups(chip.groups, local_state, prev, device, theta)]
            tick_core.append(time.perf_counter() - t0)
            core_seconds += tick_core[-1]
            for owned, (spikes, ev) in zip(owners, replies):
                events += ev
                for gi, s in zip(owned, spikes):
                    g = chip.groups[gi]
                    out[g.layer][t][:, g.out_lo:g.out_hi] = s
                    # partial currents: every non-home tile with an active axon sends one packet per image
                    members = group_tiles[gi]
                    for ti, (lo, hi) in zip(members[1:], g.in_slices[1:]):
                        active = int((prev[g.layer][:, lo:hi].sum(axis=1) > 0).sum())
                        partial += active
                        traffic.add(ti, np.array([members[0]]), active)
            # NoC phase: spikes of layer l feed the tiles of layer l + 1
            for layer in range(n_layers - 1):
                s = out[layer][t]
                for cores, lo, hi in dests[layer + 1]:
                    counts = s[:, lo:hi].sum(axis=0)
                    expected += int(counts.sum()) * len(cores)
                    per_source = np.bincount(source_core[layer][lo:hi], weights=counts, minlength=len(chip.tiles))
                    for src in np.flatnonzero(per_source):
                        traffic.add(int(src), cores, int(per_source[src]))
            prev = [inputs[t]] + [out[layer][t] for layer in range(n_layers - 1)]
            tick_wall.append(time.perf_counter() - t0)
        wall = time.perf_counter() - start  # before the workers are shut down
    finally:
        for c in conns:
            try:
                c.send(None)
            except OSError:  # the worker is already gone; its error surfaced above
                pass
        for p in procs:
            p.join(timeout=10)
    loads = traffic.link_loads()
    spike_packets = traffic.packets - partial
    return RunResult(
        spikes=out,
        synaptic_events=events,
        spike_packets=spike_packets,
        partial_packets=partial,
        expected_spike_packets=expected,
        hops=traffic.hops,
        link_traversals=sum(loads.values()),
        max_link_load=max(loads.values(), default=0),
        core_seconds=core_seconds,
        wall_seconds=wall,
        tick_core_seconds=tuple(tick_core),
        tick_wall_seconds=tuple(tick_wall),
        traffic=traffic,
    )
