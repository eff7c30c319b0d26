"""``OppComm-v0``: opportunistic communication of bus-mounted air-quality sensors.

Every bus carries a device that buffers one measurement packet every ``gen_interval_s`` seconds and must
get it to the server within ``delta_s`` seconds.  Once per one-second slot each device chooses

====  =======  ==========================================================================
 0    wait     keep the buffer
 1    4G       send the whole buffer over 4G (paid, always available, 1 s)
 2    RSU      send the whole buffer over Wi-Fi to an RSU in range (free; +0.5 s backhaul)
 3    relay    hand the oldest packets over Wi-Fi to the nearest bus in range (free)
====  =======  ==========================================================================

A Wi-Fi transfer succeeds only if the link exists at both ends of the slot; otherwise the packets stay.
Relaying is not offered once the oldest packet is in the last age bin before the deadline: it could no
longer help and would only pass the packet's late penalty to the neighbour (measured: without this rule
the agents learn to dump nearly-late packets on each other and compliance falls to about 90 %).
Relayed packets keep their generation time.  The environment is multi-agent: one step is one slot for all
devices; the observation holds every device's discrete state and action mask, the action one choice per
device.  The scalar reward is the sum of the per-device rewards, which ``info["rewards"]`` lists.

Per-device reward (reconstructed from the paper's summaries, see the qlearn-offload chapter):
``-1`` per packet sent over 4G, ``+1`` per packet sent to an RSU, ``theta * clip((c_N - c_i) / C_max)`` for a
relay (free capacities of neighbour and self), ``theta * (1 - tau / delta) / delta`` per one-second slot of
waiting with the oldest packet of age ``tau < delta`` (the summaries give ``theta * (1 - tau / delta)``; spread
over the slots of delta, a whole wait is worth at most ``theta / 2``, below one RSU delivery -- undivided,
waiting outweighs every delivery and the agents learn never to send), ``-P`` once for every packet
whose latency exceeds ``delta``, and ``-masked_penalty`` for choosing an unavailable action
(executed as wait).  The reward therefore splits as ``base + theta * flexible``; ``info["reward_base"]``
and ``info["reward_flexible"]`` give both parts so a per-device ``theta`` (the fuzzy chapter) can be
applied outside the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from repro.netsim.mobility import CitySpec, CoverageIndex, generate_fleet, nearest_neighbours, place_rsus

WAIT, CELL, RSU, RELAY = 0, 1, 2, 3
ACTIONS = ("wait", "4G", "RSU", "relay")
ENV_ID = "repro/OppComm-v0"
CAPACITY_BINS = 3
RSU_SEED_OFFSET = 7919
"""The RSUs of mobility seed ``s`` are placed from seed ``s + RSU_SEED_OFFSET`` (see :func:`city_layout`)."""
PHASE_SEED_OFFSET = 104729
"""The devices' packet phases of mobility seed ``s`` are drawn from seed ``s + PHASE_SEED_OFFSET``."""


@dataclass(frozen=True, kw_only=True)
class OppCommConfig:
    """Scenario of the opportunistic-communication simulator.

    Parameters
    ----------
    city
        Road grid, fleet and horizon (buses only are used as devices).
    rsus
        Number of road-side units.
    rsu_centre_share
        Share of RSUs placed in the central square (0 = uniform placement).
    gen_interval_s
        One packet per device every this many seconds.
    delta_s
        Latency threshold (seconds).
    capacity
        Buffer capacity ``C_max`` (packets); packets generated into a full buffer are dropped.
    rsu_range_m, v2v_range_m
        Wi-Fi ranges device-RSU and device-device.
    delay_4g_s, delay_rsu_s
        Delivery delays: 4G transfer; Wi-Fi slot plus RSU backhaul is ``1 + delay_rsu_s``.
    late_penalty
        ``P``, charged once per packet whose latency exceeds ``delta_s``.
    theta
        Weight of the relay and wait terms of the reward.
    masked_penalty
        Charged for an unavailable action.
    age_edges
        Inner edges of the bins of the oldest packet's age as a fraction of delta: with the default, five
        bins ``[0, .25), ..., [.9, 1)`` before the deadline, one for overdue packets and one for an empty
        buffer.  The last bin before the deadline is narrow so that, at the discount used, the late
        penalty is near enough to be seen from it.
    deadline_guard
        Ablation: force 4G once the oldest packet's age reaches ``delta - delay_4g``.
    """

    city: CitySpec = field(default_factory=CitySpec)
    rsus: int = 25
    rsu_centre_share: float = 0.0
    gen_interval_s: int = 30
    delta_s: float = 120.0
    capacity: int = 100
    rsu_range_m: float = 100.0
    v2v_range_m: float = 80.0
    delay_4g_s: float = 1.0
    delay_rsu_s: float = 0.5
    late_penalty: float = 5.0
    theta: float = 0.5
    masked_penalty: float = 0.1
    age_edges: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9, 1.0)
    deadline_guard: bool = False

    @property
    def devices(self) -> int:
        """Number of devices (one per bus)."""
        return self.city.buses

    @property
    def n_states(self) -> int:
        """Size of one device's discrete state space."""
        return (len(self.age_edges) + 2) * CAPACITY_BINS * (CAPACITY_BINS + 1) * 2


@dataclass(frozen=True, kw_only=True)
class EpisodeStats:
    """What one episode delivered, counted per packet.

    Attributes
    ----------
    generated, dropped, buffered
        Packets generated, dropped at a full buffer, still buffered at the end.
    sent_4g, sent_rsu
        Packets delivered over 4G and through RSUs.
    on_time
        Packets delivered within delta.
    late
        Packets whose latency exceeded delta (delivered late, or buffered past delta), each counted once.
    latencies
        Latency of every delivered packet (seconds).
    """

    generated: int
    dropped: int
    buffered: int
    sent_4g: int
    sent_rsu: int
    on_time: int
    late: int
    latencies: np.ndarray

    @property
    def delivered(self) -> int:
        """Packets that reached the server."""
        return self.sent_4g + self.sent_rsu

    @property
    def cost_4g_percent(self) -> float:
        """Packets sent over 4G, as a percentage of the packets an all-4G policy sends (all generated)."""
        return 100.0 * self.sent_4g / max(self.generated, 1)

    @property
    def compliance_percent(self) -> float:
        """Share of decided packets (on time, late, or dropped) that met delta, in percent.

        Packets still buffered and younger than delta at the end are undecided and left out.
        """
        return 100.0 * self.on_time / max(self.on_time + self.late + self.dropped, 1)


@dataclass(frozen=True, kw_only=True)
class CityLayout:
    """The trajectories and RSUs of one mobility seed.

    Attributes
    ----------
    positions
        ``(steps, devices, 2)`` bus positions, one row per second.
    rsu_xy
        ``(rsus, 2)`` RSU positions.
    """

    positions: np.ndarray
    rsu_xy: np.ndarray


def city_layout(config: OppCommConfig, mob_seed: int) -> CityLayout:
    """The buses' trajectories and the RSU placement that mobility seed ``mob_seed`` gives ``config``'s city."""
    positions = generate_fleet(config.city, mob_seed).positions[:, : config.devices]
    rsu_xy = place_rsus(config.city, config.rsus, mob_seed + RSU_SEED_OFFSET, config.rsu_centre_share)
    return CityLayout(positions=positions, rsu_xy=rsu_xy)


def _capacity_bin(free: np.ndarray, capacity: int) -> np.ndarray:
    return np.minimum((CAPACITY_BINS * free) // (capacity + 1), CAPACITY_BINS - 1).astype(int)


class OppCommEnv(gym.Env):
    """The multi-agent opportunistic-communication environment (see the module docstring).

    Parameters
    ----------
    config
        The scenario.  The mobility and RSU placement are drawn from the seed given to :meth:`reset`.
    """

    metadata = {"render_modes": []}

    def __init__(self, config: OppCommConfig | None = None) -> None:
        self.config = config or OppCommConfig()
        c = self.config
        n = c.devices
        self.observation_space = spaces.Dict({
            "state": spaces.MultiDiscrete(np.full(n, c.n_states)),
            "mask": spaces.MultiBinary((n, len(ACTIONS))),
        })
        self.action_space = spaces.MultiDiscrete(np.full(n, len(ACTIONS)))
        self._fleet_seed: int | None = None

    # ----- episode state -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode; ``seed`` chooses the mobility, RSU placement and packet phases."""
        super().reset(seed=seed)
        c = self.config
        mob_seed = int(self.np_random.integers(2**31)) if seed is None else int(seed)
        if mob_seed != self._fleet_seed:
            self._prepare_mobility(mob_seed)
        rng = np.random.default_rng(mob_seed + PHASE_SEED_OFFSET)
        self.phase = rng.integers(0, c.gen_interval_s, size=c.devices)
        self.t = 0
        self.buffers: list[list[int]] = [[] for _ in range(c.devices)]
        self.generated = self.dropped = self.sent_4g = self.sent_rsu = self.late = self.on_time = 0
        self.latencies: list[float] = []
        self._generate()
        return self._observe(), self._info(np.zeros(c.devices), np.zeros(c.devices), np.zeros(c.devices, int))

    def _prepare_mobility(self, mob_seed: int) -> None:
        """Trajectories, RSUs and every slot's link geometry, computed once per mobility seed."""
        c = self.config
        layout = city_layout(c, mob_seed)
        self.fleet, self.rsu_xy = layout.positions, layout.rsu_xy
        coverage = CoverageIndex(self.rsu_xy, c.rsu_range_m)
        flat = self.fleet.reshape(-1, 2)
        shape = self.fleet.shape[:2]
        self._rsu_cover = coverage.covered(flat).reshape(shape)
        self._rsu_counts = coverage.count_in_range(flat).reshape(shape)
        neighbour, counts = zip(*(nearest_neighbours(p, c.v2v_range_m) for p in self.fleet))
        self._neighbours, self._nb_counts = np.array(neighbour), np.array(counts)
        self._fleet_seed = mob_seed

    def _generate(self) -> None:
        c = self.config
        if self.t >= len(self.fleet) - 1:  # the last slot is never acted on: nothing is generated in it
            return
        for d in np.flatnonzero((self.t - self.phase) % c.gen_interval_s == 0):
            self.generated += 1
            if len(self.buffers[d]) >= c.capacity:
                self.dropped += 1
            else:
                self.buffers[d].append(self.t)

    def _observe(self) -> dict[str, np.ndarray]:
        c = self.config
        self._rsu_here = self._rsu_cover[self.t]
        self._rsu_count = self._rsu_counts[self.t]
        self._neighbour, self._nb_count = self._neighbours[self.t], self._nb_counts[self.t]
        sizes = np.array([len(b) for b in self.buffers])
        free = c.capacity - sizes
        age = np.array([self.t - b[0] if b else 0 for b in self.buffers], dtype=float)
        age_bin = np.where(sizes > 0, 1 + np.searchsorted(c.age_edges, age / c.delta_s, side="right"), 0)
        has_nb = self._neighbour >= 0
        nb_free = np.where(has_nb, free[np.maximum(self._neighbour, 0)], 0)
        nb_bin = np.where(has_nb, 1 + _capacity_bin(nb_free, c.capacity), 0)
        state = ((age_bin * CAPACITY_BINS + _capacity_bin(free, c.capacity)) * (CAPACITY_BINS + 1) + nb_bin) * 2
        state = state + self._rsu_here.astype(int)
        mask = np.ones((c.devices, len(ACTIONS)), dtype=np.int8)
        mask[:, RSU] = self._rsu_here
        mask[:, RELAY] = has_nb & (age < c.age_edges[-2] * c.delta_s)
        self._free, self._nb_free, self._age = free, nb_free, age
        self._mask = mask
        return {"state": state.astype(np.int64), "mask": mask}

    def _info(self, base: np.ndarray, flexible: np.ndarray, executed: np.ndarray) -> dict:
        c = self.config
        return {
            "rewards": base + c.theta * flexible,
            "reward_base": base,
            "reward_flexible": flexible,
            "executed": executed,
            # inputs of the fuzzy reward controller, per device
            "age_ratio": np.minimum(self._age / c.delta_s, 1.0),
            "opportunity": (self._rsu_count + self._nb_count).astype(float),
            "free_ratio": self._free / c.capacity,
            # what the heuristic baselines read
            "age_s": self._age.copy(),
            "free": self._free.copy(),
            "neighbour_free": self._nb_free.copy(),
        }

    # ----- one slot ------------------------------------------------------------------------------
    def _deliver(self, packets: list[int], arrival: float) -> int:
        """Log packets reaching the server at ``arrival``; return how many become late only now."""
        newly_late = 0
        for g in packets:
            lat = arrival - g
            self.latencies.append(lat)
            if lat <= self.config.delta_s:
                self.on_time += 1
            elif self.t - g <= self.config.delta_s:  # not yet charged while buffered
                newly_late += 1
        return newly_late

    def step(self, action):
        """Apply one action per device for the current slot and advance one second."""
        c = self.config
        act = np.asarray(action, dtype=int).reshape(c.devices).copy()
        base = np.zeros(c.devices)
        flexible = np.zeros(c.devices)
        unavailable = self._mask[np.arange(c.devices), act] == 0
        act[unavailable] = WAIT
        base[unavailable] -= c.masked_penalty
        if c.deadline_guard:
            act[(self._age >= c.delta_s - c.delay_4g_s) & (self._free < c.capacity)] = CELL
        t_end = min(self.t + 1, len(self.fleet) - 1)
        end, rsu_end = self.fleet[t_end], self._rsu_cover[t_end]
        free0, nb_free0 = self._free.copy(), self._nb_free.copy()
        relay_ok = np.linalg.norm(end - end[np.maximum(self._neighbour, 0)], axis=1) <= c.v2v_range_m
        relay_gain = np.clip((nb_free0 - free0) / c.capacity, -1.0, 1.0)
        waiting = (act == WAIT) & (self._free < c.capacity) & (self._age < c.delta_s)
        flexible[waiting] = (1.0 - self._age[waiting] / c.delta_s) / c.delta_s  # per 1-s slot
        incoming: dict[int, list[int]] = {}  # relayed packets join after the slot: one hop per slot
        for d in np.flatnonzero((act != WAIT) & (self._free < c.capacity)):
            buf = self.buffers[d]
            a = act[d]
            if not buf:
                continue
            if a == CELL:
                late = self._deliver(buf, self.t + c.delay_4g_s)
                base[d] += -len(buf) - c.late_penalty * late
                self.sent_4g += len(buf)
                self.late += late
                self.buffers[d] = []
            elif a == RSU:
                if rsu_end[d]:
                    late = self._deliver(buf, self.t + 1 + c.delay_rsu_s)
                    base[d] += len(buf) - c.late_penalty * late
                    self.sent_rsu += len(buf)
                    self.late += late
                    self.buffers[d] = []
            elif a == RELAY:
                nb = self._neighbour[d]
                if relay_ok[d]:
                    room = free0[nb] - len(incoming.get(nb, []))
                    moved, self.buffers[d] = buf[:room], buf[room:]
                    incoming.setdefault(nb, []).extend(moved)
                flexible[d] += relay_gain[d]
        for nb, moved in incoming.items():
            self.buffers[nb] = sorted(self.buffers[nb] + moved)
        self.t += 1
        # packets whose age crosses delta while buffered are charged once, now
        oldest = np.array([b[0] if b else self.t for b in self.buffers])
        for d in np.flatnonzero(self.t - oldest > c.delta_s):
            overdue = sum(1 for g in self.buffers[d] if self.t - g > c.delta_s >= self.t - 1 - g)
            if overdue:
                base[d] -= c.late_penalty * overdue
                self.late += overdue
        self._generate()
        obs = self._observe()
        info = self._info(base, flexible, act)
        truncated = self.t >= len(self.fleet) - 1
        return obs, float(np.sum(info["rewards"])), False, truncated, info

    def stats(self) -> EpisodeStats:
        """Packet counts of the episode so far."""
        return EpisodeStats(
            generated=self.generated, dropped=self.dropped, buffered=sum(len(b) for b in self.buffers),
            sent_4g=self.sent_4g, sent_rsu=self.sent_rsu, late=self.late,
            on_time=self.on_time, latencies=np.asarray(self.latencies, dtype=float),
        )


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="repro.netsim.oppcomm:OppCommEnv")
