"""``WRSNCharging-v0``: a mobile charger keeping a wireless rechargeable sensor network alive.

Sensors monitor targets and send packets to a base station along a shortest-path routing tree; each
drains energy at a constant rate between topology changes (first-order radio model).  A mobile charger
(MC) picks, at every decision, one of ``G x G`` grid charging locations or the depot.  It travels there at
constant speed and dwells for a charging time chosen by a heuristic; while it dwells every sensor gains
``alpha / (d + beta)^2`` watts.  Time advances event by event: between decisions energies are linear in
time until a sensor dies (routes are rebuilt) or fills up (it then absorbs only what it spends), so the
integration is exact.  The episode ends when some target is no longer covered by an alive sensor with an
alive path to the base (``info["lifetime"]``), or at ``max_time_s`` (truncation).

Energy bookkeeping per sensor: ``energy = initial + charged - spent`` holds at every step
(``info["spent"]``, ``info["charged"]``); the MC pays ``charged / efficiency`` for what it delivers and
``travel_j_per_m`` per metre.

The reward is the lifetime reward of the spec (simulated seconds survived during the step, over
``reward_scale_s``); the three-term charging reward of the authors' code is not implemented here.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import networkx as nx
import numpy as np
from gymnasium import spaces
from scipy.spatial import cKDTree

ENV_ID = "repro/WRSNCharging-v0"


@dataclass(frozen=True, kw_only=True)
class WRSNConfig:
    """Scenario of the WRSN simulator (paper-code constants where known, the rest assumed).

    Parameters
    ----------
    field_m, sensors, targets
        Square field side, number of sensors and of targets.
    sensing_m, comm_m
        Sensing and communication ranges.
    e_max_j, e_thresh_j
        Sensor battery capacity and the threshold of the charging-time heuristic.
    packet_bits, e_elec_tx, e_elec_rx, eps_fs, eps_mp, packet_prob
        First-order radio model and the per-second packet probability of a sensing node.
    drain_scale
        ``kappa``: multiplies every drain rate so that lifetimes are hours, not years.
    grid
        Charging locations per side (``grid x grid`` plus the depot).
    alpha, beta
        Charging law ``alpha / (d + beta)^2`` (W).
    mc_speed, mc_capacity_j, travel_j_per_m, depot_w, efficiency
        Mobile charger: speed, battery, travel cost, recharge power at the depot, charging efficiency.
    max_charge_s, min_dwell_s, depot_dwell_s
        Longest and shortest dwell at a location (a location where no sensor needs charge still costs
        ``min_dwell_s``); dwell at the depot.
    max_time_s, reward_scale_s
        Truncation time and the unit of the reward.
    """

    field_m: float = 500.0
    sensors: int = 30
    targets: int = 8
    sensing_m: float = 40.0
    comm_m: float = 120.0
    e_max_j: float = 10.8
    e_thresh_j: float = 0.4
    packet_bits: float = 400.0
    e_elec_tx: float = 5e-8
    e_elec_rx: float = 1e-7
    eps_fs: float = 1e-11
    eps_mp: float = 1.3e-15
    packet_prob: float = 0.3
    drain_scale: float = 5.0
    grid: int = 5
    alpha: float = 36.0
    beta: float = 30.0
    mc_speed: float = 5.0
    mc_capacity_j: float = 108_000.0
    travel_j_per_m: float = 1.0
    depot_w: float = 100.0
    efficiency: float = 0.5
    max_charge_s: float = 3600.0
    min_dwell_s: float = 60.0
    depot_dwell_s: float = 600.0
    max_time_s: float = 20_000.0
    reward_scale_s: float = 1000.0

    @property
    def locations(self) -> np.ndarray:
        """``(grid * grid + 1, 2)`` charging locations; the last one is the depot at (0, 0)."""
        step = self.field_m / (self.grid + 1)
        ticks = step * np.arange(1, self.grid + 1)
        xy = np.array([(x, y) for x in ticks for y in ticks])
        return np.vstack([xy, [0.0, 0.0]])


def charge_rate(cfg: WRSNConfig, distance: np.ndarray) -> np.ndarray:
    """Power (W) a sensor at ``distance`` receives from the dwelling charger."""
    return cfg.alpha / (np.asarray(distance, dtype=float) + cfg.beta) ** 2


@dataclass(frozen=True, kw_only=True)
class Topology:
    """Sensor, target and base positions of one network."""

    sensors: np.ndarray
    targets: np.ndarray
    base: np.ndarray


def _graph(cfg: WRSNConfig, topo: Topology, alive: np.ndarray) -> nx.Graph:
    """Alive sensors (0..N-1) and the base (node N), linked when within ``comm_m``."""
    pts = np.vstack([topo.sensors, topo.base])
    nodes = [*np.flatnonzero(alive), len(topo.sensors)]
    tree = cKDTree(pts[nodes])
    g = nx.Graph()
    g.add_nodes_from(nodes)
    for a, b in tree.query_pairs(cfg.comm_m):
        u, v = nodes[a], nodes[b]
        g.add_edge(u, v, weight=float(np.linalg.norm(pts[u] - pts[v])))
    return g


def routing(cfg: WRSNConfig, topo: Topology, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Drain rates under the current routing tree.

    Each target is reported by the covering alive sensor closest (by path length) to the base; every
    sensor on that path transmits its packets, and every relay also receives them.

    Returns
    -------
    tuple
        Drain rate (W) of every sensor, its next-hop distance, and whether every target is covered by an
        alive sensor with a path to the base.
    """
    n = len(topo.sensors)
    g = _graph(cfg, topo, alive)
    dist, paths = nx.single_source_dijkstra(g, n, weight="weight")
    load = np.zeros(n)
    own = np.zeros(n)
    next_hop = np.zeros(n)
    ok = True
    near = np.linalg.norm(topo.targets[:, None] - topo.sensors[None], axis=2)
    for t in range(len(topo.targets)):
        cands = [i for i in np.flatnonzero((near[t] <= cfg.sensing_m) & alive) if i in dist]
        if not cands:
            ok = False
            continue
        src = min(cands, key=lambda i: dist[i])
        own[src] += 1
        path = paths[src]  # base ... src
        for hop_from, hop_to in zip(path[::-1][:-1], path[::-1][1:]):
            load[hop_from] += 1
            d = np.linalg.norm(topo.sensors[hop_from] - (topo.base if hop_to == n else topo.sensors[hop_to]))
            next_hop[hop_from] = d
    d0 = np.sqrt(cfg.eps_fs / cfg.eps_mp)
    amp = np.where(next_hop < d0, cfg.eps_fs * next_hop**2, cfg.eps_mp * next_hop**4)
    per_s = cfg.packet_prob * cfg.packet_bits
    rate = cfg.drain_scale * per_s * (load * (cfg.e_elec_tx + amp) + (load - own) * cfg.e_elec_rx)
    return np.where(alive, rate, 0.0), next_hop, ok


def generate_topology(cfg: WRSNConfig, rng: np.random.Generator, tries: int = 200) -> Topology:
    """Targets uniform; one sensor near each target, the rest uniform; redrawn until covered and connected."""
    base = np.array([cfg.field_m / 2, cfg.field_m / 2])
    for _ in range(tries):
        targets = rng.uniform(0, cfg.field_m, (cfg.targets, 2))
        ang = rng.uniform(0, 2 * np.pi, cfg.targets)
        rad = cfg.sensing_m * 0.8 * np.sqrt(rng.random(cfg.targets))
        near = np.clip(targets + np.column_stack([rad * np.cos(ang), rad * np.sin(ang)]), 0, cfg.field_m)
        rest = rng.uniform(0, cfg.field_m, (cfg.sensors - cfg.targets, 2))
        topo = Topology(sensors=np.vstack([near, rest]), targets=targets, base=base)
        if routing(cfg, topo, np.ones(cfg.sensors, dtype=bool))[2]:
            return topo
    raise ValueError(f"no covered and connected topology in {tries} draws; raise comm_m or sensors")


class WRSNChargingEnv(gym.Env):
    """The mobile-charger environment (see the module docstring).

    Parameters
    ----------
    config
        The scenario; the topology and initial energies are drawn from the seed given to :meth:`reset`.
    """

    metadata = {"render_modes": []}

    def __init__(self, config: WRSNConfig | None = None) -> None:
        self.config = config or WRSNConfig()
        c = self.config
        self.observation_space = spaces.Box(0.0, 1.0, shape=(3 + 2 * c.sensors,), dtype=np.float32)
        self.action_space = spaces.Discrete(c.grid * c.grid + 1)
        self.locations = c.locations

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Draw a network and start with the charger at the depot."""
        super().reset(seed=seed)
        c = self.config
        self.topo = generate_topology(c, self.np_random)
        self.energy = self.np_random.uniform(0.5, 1.0, c.sensors) * c.e_max_j
        self.initial = self.energy.copy()
        self.spent = np.zeros(c.sensors)
        self.charged = np.zeros(c.sensors)
        self.alive = np.ones(c.sensors, dtype=bool)
        self.t = 0.0
        self.mc = np.zeros(2)
        self.mc_energy = c.mc_capacity_j
        self.mc_spent = 0.0
        self.rate, _, self.covered = routing(c, self.topo, self.alive)
        self.lifetime: float | None = None
        return self._observe(), self._info()

    def _observe(self) -> np.ndarray:
        c = self.config
        top = max(self.rate.max(), 1e-12)
        obs = [self.mc[0] / c.field_m, self.mc[1] / c.field_m, self.mc_energy / c.mc_capacity_j,
               *(self.energy / c.e_max_j), *(self.rate / top)]
        return np.clip(np.array(obs, dtype=np.float32), 0.0, 1.0)

    def _info(self) -> dict:
        return {"time": self.t, "alive": int(self.alive.sum()), "covered": self.covered, "lifetime": self.lifetime,
                "spent": self.spent.copy(), "charged": self.charged.copy(), "mc_spent": self.mc_spent}

    def _advance(self, duration: float, gain: np.ndarray) -> bool:
        """Integrate energies for ``duration`` seconds with charging power ``gain``; False if coverage is lost."""
        c = self.config
        left = duration
        while left > 1e-12:
            gain_alive = np.where(self.alive, gain, 0.0)
            full = self.alive & (self.energy >= c.e_max_j - 1e-12) & (gain_alive >= self.rate)
            net = np.where(full, 0.0, gain_alive - self.rate)
            with np.errstate(divide="ignore", invalid="ignore"):
                to_death = np.where(self.alive & (net < 0), self.energy / -net, np.inf)
                to_full = np.where(self.alive & ~full & (net > 0), (c.e_max_j - self.energy) / net, np.inf)
            dt = min(left, to_death.min(), to_full.min())
            received = np.where(full, self.rate, gain_alive) * dt
            self.energy = np.where(self.alive, np.clip(self.energy + net * dt, 0.0, c.e_max_j), self.energy)
            self.spent += self.rate * dt
            self.charged += received
            self.mc_spent += received.sum() / c.efficiency
            self.mc_energy -= received.sum() / c.efficiency
            self.t += dt
            left -= dt
            dead = self.alive & (to_death <= dt + 1e-12)
            if dead.any():
                self.energy[dead] = 0.0
                self.alive &= ~dead
                self.rate, _, self.covered = routing(c, self.topo, self.alive)
                if not self.covered:
                    self.lifetime = self.t
                    return False
        return True

    def charging_time(self, location: np.ndarray, travel_s: float) -> float:
        """The charging-time heuristic: the candidate dwell that leaves the fewest sensors below ``E_min``.

        Candidates are the times at which a sensor below ``E_min`` that gains energy here climbs to
        ``E_min``, and at which a sensor above it that loses energy here falls to it (energies projected past
        the travel; ``E_min = E_thresh + 0.3 E_max``).
        """
        c = self.config
        e_min = c.e_thresh_j + 0.3 * c.e_max_j
        p = charge_rate(c, np.linalg.norm(self.topo.sensors - location, axis=1))
        e0 = np.maximum(self.energy - self.rate * travel_s, 0.0)
        net = np.where(self.alive, p - self.rate, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            times = np.where(((e0 < e_min) & (net > 0)) | ((e0 > e_min) & (net < 0)), (e_min - e0) / net, np.nan)
        cands = np.unique(np.clip(times[np.isfinite(times) & (times > 0)], 0.0, c.max_charge_s))
        if len(cands) == 0:
            return 0.0
        below = [(np.minimum(e0 + net * t, c.e_max_j) < e_min - 1e-9)[self.alive].sum() for t in cands]
        return float(cands[int(np.argmin(below))])

    def step(self, action):
        """Travel to location ``action``, dwell (heuristic time, or recharge at the depot), integrate."""
        c = self.config
        if self.lifetime is not None:
            raise RuntimeError("episode is over; call reset()")
        a = int(action)
        if self.mc_energy < 10.0:
            a = len(self.locations) - 1  # forced back to the depot
        target = self.locations[a]
        depot = a == len(self.locations) - 1
        dist = float(np.linalg.norm(target - self.mc))
        travel = dist / c.mc_speed
        dwell = c.depot_dwell_s if depot else self.charging_time(target, travel)
        t0 = self.t
        self.mc_energy -= c.travel_j_per_m * dist
        self.mc_spent += c.travel_j_per_m * dist
        alive = self._advance(travel, np.zeros(c.sensors))
        self.mc = target.copy()
        if alive:
            gain = np.zeros(c.sensors) if depot else charge_rate(c, np.linalg.norm(self.topo.sensors - target, axis=1))
            if depot:
                self.mc_energy = min(c.mc_capacity_j, self.mc_energy + c.depot_w * dwell)
            alive = self._advance(max(dwell, c.min_dwell_s), gain)
        truncated = bool(alive and self.t >= c.max_time_s)
        self.t = float(self.t)
        reward = (self.t - t0) / c.reward_scale_s
        return self._observe(), float(reward), bool(not alive), truncated, {**self._info(), "dwell": dwell}


def nearest_request(env: WRSNChargingEnv) -> int:
    """Greedy baseline: the location nearest to the alive sensor with the least remaining lifetime."""
    with np.errstate(divide="ignore", invalid="ignore"):
        remaining = np.where(env.alive & (env.rate > 0), env.energy / env.rate, np.inf)
    worst = int(np.argmin(remaining))
    return int(np.argmin(np.linalg.norm(env.locations[:-1] - env.topo.sensors[worst], axis=1)))


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="repro.netsim.wrsn:WRSNChargingEnv")
