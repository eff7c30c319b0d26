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
``travel_j_per_m`` per metre, and never spends what it does not have: it keeps in reserve what the trip back
to the depot costs, a move it cannot pay for (there, 10 J of charge, and back to the depot) is refused
and the charger returns to the depot instead (``info["refused"]``), and a charge stops when the charger's energy reaches its
reserve (``info["charge_cut"]``).

Sensors below ``request_j`` (``thresh_share`` of the battery, 0.4 in the authors' ``main.py``) ask for a charge
(:meth:`WRSNChargingEnv.requests`); the charging-time heuristic lifts sensors to ``e_min_j = request_j +
e_min_share * e_max_j`` (``e_min_share`` = 0.1, the ``alpha`` that the authors' ``reward_function`` hands
``get_charging_time``).  Besides the grid actions of :meth:`~WRSNChargingEnv.step`, :meth:`~WRSNChargingEnv.move`
takes the charger to any point for a given dwell (INMA goes to a sensor's own position).

The reward is the lifetime reward of the spec (simulated seconds survived during the step, over
``reward_scale_s``); the authors' three-term charging reward is :mod:`repro.netsim.qcharging`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import networkx as nx
import numpy as np
from gymnasium import spaces
from scipy.spatial import cKDTree

ENV_ID = "repro/WRSNCharging-v0"
MC_LOW_J = 10.0
"""Below this energy the charger is sent to the depot (``E_mc_thresh = 10`` in the authors' ``Parameter.py``)."""


@dataclass(frozen=True, kw_only=True)
class WRSNConfig:
    """Scenario of the WRSN simulator (paper-code constants where known, the rest assumed).

    Parameters
    ----------
    field_m, sensors, targets
        Square field side, number of sensors and of targets.
    sensing_m, comm_m
        Sensing and communication ranges.
    e_max_j
        Sensor battery capacity.
    thresh_share, e_min_share
        A sensor below ``thresh_share * e_max_j`` requests a charge (``request_j``); the charging-time
        heuristic lifts sensors to ``request_j + e_min_share * e_max_j`` (``e_min_j``).
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
    thresh_share: float = 0.4
    e_min_share: float = 0.1
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
    def request_j(self) -> float:
        """Energy below which a sensor requests a charge."""
        return self.thresh_share * self.e_max_j

    @property
    def e_min_j(self) -> float:
        """The level the charging-time heuristic lifts sensors to."""
        return self.request_j + self.e_min_share * self.e_max_j

    @property
    def depot(self) -> np.ndarray:
        """The depot's position (the field's corner)."""
        return np.zeros(2)

    @property
    def locations(self) -> np.ndarray:
        """``(grid * grid + 1, 2)`` charging locations; the last one is the depot at (0, 0)."""
        step = self.field_m / (self.grid + 1)
        ticks = step * np.arange(1, self.grid + 1)
        xy = np.array([(x, y) for x in ticks for y in ticks])
        return np.vstack([xy, self.depot])


def charge_rate(cfg: WRSNConfig, distance: np.ndarray | float) -> np.ndarray:
    """Power (W) a sensor at ``distance`` receives from the dwelling charger."""
    return np.asarray(cfg.alpha / (np.asarray(distance, dtype=float) + cfg.beta) ** 2)


@dataclass(frozen=True, kw_only=True)
class Topology:
    """Sensor, target and base positions of one network."""

    sensors: np.ndarray
    targets: np.ndarray
    base: np.ndarray


@dataclass(frozen=True, kw_only=True)
class Routing:
    """The drain of every sensor under the current routing tree, and the path that reports each target.

    Attributes
    ----------
    rate
        Drain rate (W) of every sensor (0 for a dead one).
    next_hop
        Distance to each sensor's next hop (0 for a sensor that relays nothing).
    covered
        Whether every target is covered by an alive sensor with a path to the base.
    paths
        Per target, the sensors from its reporting sensor to the base's neighbour (empty if uncovered).
    """

    rate: np.ndarray
    next_hop: np.ndarray
    covered: bool
    paths: tuple[tuple[int, ...], ...]


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


def route(cfg: WRSNConfig, topo: Topology, alive: np.ndarray) -> Routing:
    """Drain rates and target paths under the shortest-path routing tree of the alive sensors.

    Each target is reported by the covering alive sensor closest (by path length) to the base; every
    sensor on that path transmits its packets, and every relay also receives them.
    """
    n = len(topo.sensors)
    g = _graph(cfg, topo, alive)
    dist, tree_paths = nx.single_source_dijkstra(g, n, weight="weight")
    load = np.zeros(n)
    own = np.zeros(n)
    next_hop = np.zeros(n)
    ok = True
    paths: list[tuple[int, ...]] = []
    near = np.linalg.norm(topo.targets[:, None] - topo.sensors[None], axis=2)
    for t in range(len(topo.targets)):
        cands = [i for i in np.flatnonzero((near[t] <= cfg.sensing_m) & alive) if i in dist]
        if not cands:
            ok = False
            paths.append(())
            continue
        src = min(cands, key=lambda i: dist[i])
        own[src] += 1
        path = tree_paths[src]  # base ... src
        paths.append(tuple(int(i) for i in path[::-1][:-1]))
        for hop_from, hop_to in zip(path[::-1][:-1], path[::-1][1:]):
            load[hop_from] += 1
            d = np.linalg.norm(topo.sensors[hop_from] - (topo.base if hop_to == n else topo.sensors[hop_to]))
            next_hop[hop_from] = d
    d0 = np.sqrt(cfg.eps_fs / cfg.eps_mp)
    amp = np.where(next_hop < d0, cfg.eps_fs * next_hop**2, cfg.eps_mp * next_hop**4)
    per_s = cfg.packet_prob * cfg.packet_bits
    rate = cfg.drain_scale * per_s * (load * (cfg.e_elec_tx + amp) + (load - own) * cfg.e_elec_rx)
    return Routing(rate=np.where(alive, rate, 0.0), next_hop=next_hop, covered=ok, paths=tuple(paths))


def routing(cfg: WRSNConfig, topo: Topology, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Drain rates, next-hop distances and coverage of :func:`route` (without the paths)."""
    r = route(cfg, topo, alive)
    return r.rate, r.next_hop, r.covered


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
        if route(cfg, topo, np.ones(cfg.sensors, dtype=bool)).covered:
            return topo
    raise ValueError(f"no covered and connected topology in {tries} draws; raise comm_m or sensors")


def charging_times(cfg: WRSNConfig, energy: np.ndarray, rate: np.ndarray, gain: np.ndarray,
                   travel_s: np.ndarray) -> np.ndarray:
    """The charging-time heuristic at several locations at once: per location, the dwell leaving fewest sensors below ``e_min_j``.

    Candidates are the times at which a sensor below ``e_min_j`` that gains energy at the location climbs
    to it, and at which a sensor above it that loses energy there falls to it (energies projected past the
    travel; the authors' ``get_charging_time``).  Ties go to the earliest candidate; no candidate gives 0.

    Parameters
    ----------
    cfg
        The scenario.
    energy, rate
        Every sensor's energy and drain rate (0 for a dead sensor).
    gain
        ``(locations, sensors)``: the power each sensor receives at each location.
    travel_s
        ``(locations,)``: travel time to each location.
    """
    e_min = cfg.e_min_j
    e0 = np.maximum(energy[None, :] - rate[None, :] * travel_s[:, None], 0.0)
    alive = rate > 0
    net = np.where(alive[None, :], gain - rate[None, :], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        times = np.where(((e0 < e_min) & (net > 0)) | ((e0 > e_min) & (net < 0)), (e_min - e0) / net, np.nan)
    out = np.zeros(len(gain))
    for k in range(len(gain)):
        cands = np.unique(np.clip(times[k][np.isfinite(times[k]) & (times[k] > 0)], 0.0, cfg.max_charge_s))
        if len(cands) == 0:
            continue
        level = np.minimum(e0[k][None, :] + net[k][None, :] * cands[:, None], cfg.e_max_j)
        below = ((level < e_min - 1e-9) & alive[None, :]).sum(axis=1)
        out[k] = cands[int(np.argmin(below))]
    return out


class WRSNChargingEnv(gym.Env):
    """The mobile-charger environment (see the module docstring).

    Parameters
    ----------
    config
        The scenario; the topology and initial energies are drawn from the seed given to :meth:`reset`.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, config: WRSNConfig | None = None) -> None:
        self.config = config or WRSNConfig()
        c = self.config
        self.observation_space = spaces.Box(0.0, 1.0, shape=(3 + 2 * c.sensors,), dtype=np.float32)
        self.action_space = spaces.Discrete(c.grid * c.grid + 1)
        self.locations = c.locations

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
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
        self.mc = c.depot.copy()
        self.mc_energy = c.mc_capacity_j
        self.mc_spent = 0.0
        self._reroute()
        self.lifetime: float | None = None
        return self._observe(), self._info()

    def _reroute(self) -> None:
        self.routes = route(self.config, self.topo, self.alive)
        self.rate, self.covered = self.routes.rate, self.routes.covered

    def _observe(self) -> np.ndarray:
        c = self.config
        top = max(self.rate.max(), 1e-12)
        obs = [self.mc[0] / c.field_m, self.mc[1] / c.field_m, self.mc_energy / c.mc_capacity_j,
               *(self.energy / c.e_max_j), *(self.rate / top)]
        return np.clip(np.array(obs, dtype=np.float32), 0.0, 1.0)

    def _info(self) -> dict[str, Any]:
        return {"time": self.t, "alive": int(self.alive.sum()), "covered": self.covered, "lifetime": self.lifetime,
                "spent": self.spent.copy(), "charged": self.charged.copy(), "mc_spent": self.mc_spent,
                "mc_energy": self.mc_energy}

    def travel_cost(self, start: np.ndarray, end: np.ndarray) -> float:
        """Joules the charger spends driving from ``start`` to ``end``."""
        return self.config.travel_j_per_m * float(np.linalg.norm(np.asarray(end) - np.asarray(start)))

    def reserve(self) -> float:
        """What the charger must keep to drive back to the depot from where it is."""
        return self.travel_cost(self.mc, self.config.depot)

    def requests(self) -> np.ndarray:
        """Alive sensors whose energy is below ``request_j`` (they ask the charger for a charge)."""
        return np.flatnonzero(self.alive & (self.energy < self.config.request_j))

    def _advance(self, duration: float, gain: np.ndarray) -> tuple[bool, bool]:
        """Integrate energies for ``duration`` seconds with charging power ``gain``.

        The charger pays ``received / efficiency`` and stops charging (the rest of the interval passes
        without charge) when its energy would fall below its reserve.

        Returns
        -------
        tuple
            Whether coverage holds at the end, and whether the charge was cut for lack of energy.
        """
        c = self.config
        left = duration
        cut = False
        reserve = self.reserve()
        while left > 1e-12:
            gain_alive = np.where(self.alive, gain, 0.0)
            full = self.alive & (self.energy >= c.e_max_j - 1e-12) & (gain_alive >= self.rate)
            net = np.where(full, 0.0, gain_alive - self.rate)
            with np.errstate(divide="ignore", invalid="ignore"):
                to_death = np.where(self.alive & (net < 0), self.energy / -net, np.inf)
                to_full = np.where(self.alive & ~full & (net > 0), (c.e_max_j - self.energy) / net, np.inf)
            draw = float(np.where(full, self.rate, gain_alive).sum()) / c.efficiency  # the charger's power
            budget = max(self.mc_energy - reserve, 0.0)
            to_empty = budget / draw if draw > 0 else np.inf
            dt = min(left, to_death.min(), to_full.min(), to_empty)
            received = np.where(full, self.rate, gain_alive) * dt
            self.energy = np.where(self.alive, np.clip(self.energy + net * dt, 0.0, c.e_max_j), self.energy)
            self.spent += self.rate * dt
            self.charged += received
            self.mc_spent += received.sum() / c.efficiency
            self.mc_energy = max(self.mc_energy - received.sum() / c.efficiency, reserve) if draw > 0 else self.mc_energy
            self.t += dt
            left -= dt
            if draw > 0 and dt >= to_empty - 1e-12:
                gain = np.zeros_like(gain)  # the charger has spent what it may: no more charge this step
                cut = True
            dead = self.alive & (to_death <= dt + 1e-12)
            if dead.any():
                self.energy[dead] = 0.0
                self.alive &= ~dead
                self._reroute()
                if not self.covered:
                    self.lifetime = self.t
                    return False, cut
        return True, cut

    def charging_time(self, location: np.ndarray, travel_s: float) -> float:
        """The charging-time heuristic (:func:`charging_times`) at one location."""
        gain = charge_rate(self.config, np.linalg.norm(self.topo.sensors - location, axis=1))
        return float(charging_times(self.config, self.energy, self.rate, gain[None, :], np.array([travel_s]))[0])

    def affordable(self, target: np.ndarray) -> bool:
        """Whether the charger can drive to ``target``, charge there with at least :data:`MC_LOW_J` and drive home.

        The depot is always affordable (the charger keeps the way home in reserve).
        """
        target = np.asarray(target, dtype=float)
        if np.allclose(target, self.config.depot):
            return True
        trip = self.travel_cost(self.mc, target) + self.travel_cost(target, self.config.depot)
        return self.mc_energy - trip >= MC_LOW_J

    def move(self, target: np.ndarray, dwell_s: float | None = None
             ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Drive to ``target`` and charge there for ``dwell_s`` seconds (``None``: the charging-time heuristic).

        A move the charger cannot pay for (there, :data:`MC_LOW_J` of charge, and back to the depot: the
        authors' "below 10 J, go home") is refused: it drives to the depot and recharges instead.  The dwell
        is at least ``min_dwell_s`` and at most ``max_charge_s``; at the depot it is ``depot_dwell_s``.

        Returns
        -------
        tuple
            Observation, reward, terminated, truncated and info, as :meth:`step`.
        """
        c = self.config
        if self.lifetime is not None:
            raise RuntimeError("episode is over; call reset()")
        target = np.asarray(target, dtype=float)
        refused = not self.affordable(target)
        if refused:
            target = c.depot
        depot = bool(np.allclose(target, c.depot))
        travel = float(np.linalg.norm(target - self.mc)) / c.mc_speed
        if depot:
            dwell = c.depot_dwell_s
        else:
            dwell = self.charging_time(target, travel) if dwell_s is None else float(dwell_s)
            dwell = min(max(dwell, c.min_dwell_s), c.max_charge_s)
        t0 = self.t
        cost = self.travel_cost(self.mc, target)
        self.mc_energy -= cost
        self.mc_spent += cost
        alive, _ = self._advance(travel, np.zeros(c.sensors))
        self.mc = target.copy()
        cut = False
        if alive:
            if depot:
                self.mc_energy = min(c.mc_capacity_j, self.mc_energy + c.depot_w * dwell)
                gain = np.zeros(c.sensors)
            else:
                gain = charge_rate(c, np.linalg.norm(self.topo.sensors - target, axis=1))
            alive, cut = self._advance(dwell, gain)
        truncated = bool(alive and self.t >= c.max_time_s)
        self.t = float(self.t)
        reward = (self.t - t0) / c.reward_scale_s
        info = {**self._info(), "dwell": dwell, "refused": refused, "charge_cut": cut}
        return self._observe(), float(reward), bool(not alive), truncated, info

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Travel to location ``action`` and dwell (heuristic time, or recharge at the depot); see :meth:`move`."""
        return self.move(self.locations[int(action)])


def nearest_request(env: WRSNChargingEnv) -> int:
    """Greedy baseline: the location nearest to the alive sensor with the least remaining lifetime."""
    with np.errstate(divide="ignore", invalid="ignore"):
        remaining = np.where(env.alive & (env.rate > 0), env.energy / env.rate, np.inf)
    worst = int(np.argmin(remaining))
    return int(np.argmin(np.linalg.norm(env.locations[:-1] - env.topo.sensors[worst], axis=1)))


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="repro.netsim.wrsn:WRSNChargingEnv")
