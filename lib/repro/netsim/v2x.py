"""``ThreeTierV2X-v0``: per-task offloading over a road with RSUs, a gNB and the cloud.

Vehicles enter a straight road as a Poisson stream and generate computation tasks as Poisson
processes.  For every task (one environment step) the agent picks a path:

====  ===============  ===========================================================================
 0    V2I (edge)       upload to the serving RSU, compute on the RSU's MEC server
 1    V2C (cloud)      upload over the shared cellular uplink to the gNB, then gNB -> cloud, compute
 2    V2I + I2C        upload to the RSU, forward over its backhaul to the gNB, then cloud, compute
====  ===============  ===========================================================================

Every link and server is a FIFO :class:`repro.netsim.queues.FifoResource`, so a task's finish time is
fixed when it is enqueued and the reward ``-latency / deadline`` (``-miss_penalty`` when the deadline is
missed) is known at once.  The cloud computes every task in parallel (no queue).

The observation (all scaled to about [0, 1]) is ``[D, C, distance to serving RSU, RSU-uplink backlog,
RSU-CPU backlog, V2C backlog, I2C backlog, gNB-cloud backlog, vehicles in the RSU's coverage, vehicles
on the road]``; backlogs are in units of the deadline.  :func:`path_latencies` turns the same numbers
into each path's exact latency, which the greedy baseline reads from ``info["latency_estimate"]`` and
the guided exploration of :mod:`repro.netsim.dqn` recomputes from the observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from repro.netsim.mobility import CoverageIndex, RoadTraffic, poisson_road_traffic
from repro.netsim.queues import FifoResource

V2I, V2C, V2I_I2C = 0, 1, 2
PATHS = ("V2I edge", "V2C cloud", "V2I+I2C cloud")
ENV_ID = "repro/ThreeTierV2X-v0"
OBS_DIM = 10
OBS_HIGH = 1e6  # backlogs of a saturated queue grow without bound; observations are clipped here


@dataclass(frozen=True, kw_only=True)
class V2XConfig:
    """Scenario of the three-tier V2X simulator (every constant assumed; see the v2x-dqn chapter).

    Parameters
    ----------
    road_m
        Road length.
    rsu_x, rsu_radius_m
        RSU positions along the road and their coverage radius.
    vehicle_rate, task_rate
        Vehicle arrivals per second; tasks per second per vehicle.
    speed_min, speed_max
        Vehicle speeds (m/s).
    size_min_mbit, size_max_mbit, cycles_per_bit
        Task size ``D`` ~ U[min, max] Mbit and CPU demand ``C = cycles_per_bit * D``.
    deadline_s, miss_penalty
        Deadline and the (negative) reward of a task that misses it.
    bandwidth_hz, snr_ref_db, ref_m, height_m, pathloss_exp
        V2I rate ``B log2(1 + SNR)`` with ``SNR = SNR_ref (ref / d)^exp`` and ``d`` the distance to the
        RSU antenna at height ``height_m``.
    v2c_bps, i2c_bps, gnb_cloud_bps, gnb_cloud_delay_s
        Shared cellular uplink, per-RSU backhaul, gNB-cloud link and its propagation delay.
    rsu_hz, cloud_core_hz
        RSU MEC server speed and the speed of one cloud core.
    horizon_s
        Simulated seconds per episode.
    """

    road_m: float = 2000.0
    rsu_x: tuple[float, ...] = (250.0, 750.0, 1250.0, 1750.0)
    rsu_radius_m: float = 250.0
    vehicle_rate: float = 1.0
    task_rate: float = 0.5
    speed_min: float = 15.0
    speed_max: float = 25.0
    size_min_mbit: float = 0.5
    size_max_mbit: float = 1.5
    cycles_per_bit: float = 500.0
    deadline_s: float = 1.0
    miss_penalty: float = 2.0
    bandwidth_hz: float = 10e6
    snr_ref_db: float = 30.0
    ref_m: float = 50.0
    height_m: float = 50.0
    pathloss_exp: float = 3.0
    v2c_bps: float = 40e6
    i2c_bps: float = 100e6
    gnb_cloud_bps: float = 1e9
    gnb_cloud_delay_s: float = 0.01
    rsu_hz: float = 10e9
    cloud_core_hz: float = 5e9
    horizon_s: float = 60.0

    def v2i_rate(self, distance_m: float | np.ndarray) -> float | np.ndarray:
        """V2I uplink rate (bit/s) at horizontal distance ``distance_m`` from the RSU."""
        d = np.hypot(distance_m, self.height_m)
        snr = 10 ** (self.snr_ref_db / 10) * (self.ref_m / d) ** self.pathloss_exp
        return self.bandwidth_hz * np.log2(1.0 + snr)


@dataclass(frozen=True, kw_only=True)
class TaskRecord:
    """One offloaded task: when it was generated, its serving RSU, the path chosen and its latency.

    ``transmission_and_processing`` is the latency the task would have in an empty system.
    """

    time: float
    vehicle: int
    rsu: int
    path: int
    size_bit: float
    latency: float
    transmission_and_processing: float


def path_latencies(cfg: V2XConfig, size_bit: float, distance_m: float, backlog_up: float, backlog_cpu: float,
                   backlog_v2c: float, backlog_i2c: float, backlog_cloud: float) -> np.ndarray:
    """Exact latency (s) of each path for a task arriving now, from the backlogs (s) of its resources.

    In a FIFO tandem, a hop starts when both the task has arrived from the previous hop and the resource
    has finished its backlog, so each hop's finish is ``max(previous finish, backlog) + service``.
    """
    cycles = cfg.cycles_per_bit * size_bit
    up = backlog_up + size_bit / cfg.v2i_rate(distance_m)
    edge = max(up, backlog_cpu) + cycles / cfg.rsu_hz
    cloud_proc = cycles / cfg.cloud_core_hz
    via_cell = backlog_v2c + size_bit / cfg.v2c_bps
    to_cloud = size_bit / cfg.gnb_cloud_bps
    cell = max(via_cell, backlog_cloud) + to_cloud + cfg.gnb_cloud_delay_s + cloud_proc
    backhaul = max(up, backlog_i2c) + size_bit / cfg.i2c_bps
    relay = max(backhaul, backlog_cloud) + to_cloud + cfg.gnb_cloud_delay_s + cloud_proc
    return np.array([edge, cell, relay])


def latencies_from_observation(cfg: V2XConfig, obs: np.ndarray) -> np.ndarray:
    """:func:`path_latencies` recomputed from an observation vector (inverse of the scaling)."""
    d = cfg.deadline_s
    return path_latencies(cfg, obs[0] * cfg.size_max_mbit * 1e6, obs[2] * cfg.rsu_radius_m, *(obs[3:8] * d))


class ThreeTierV2XEnv(gym.Env):
    """The per-task offloading environment (see the module docstring).

    Parameters
    ----------
    config
        The scenario; traffic and tasks are drawn from the seed given to :meth:`reset`.
    """

    metadata = {"render_modes": []}

    def __init__(self, config: V2XConfig | None = None) -> None:
        self.config = config or V2XConfig()
        self.observation_space = spaces.Box(0.0, OBS_HIGH, shape=(OBS_DIM,), dtype=np.float32)
        self.action_space = spaces.Discrete(len(PATHS))
        c = self.config
        self.coverage = CoverageIndex(np.column_stack([c.rsu_x, np.zeros(len(c.rsu_x))]), c.rsu_radius_m)
        n = len(c.rsu_x)
        self.rsu_up = [FifoResource(name=f"rsu{k}-up") for k in range(n)]
        self.rsu_cpu = [FifoResource(name=f"rsu{k}-cpu", rate=c.rsu_hz) for k in range(n)]
        self.i2c = [FifoResource(name=f"rsu{k}-i2c", rate=c.i2c_bps) for k in range(n)]
        self.v2c = FifoResource(name="v2c", rate=c.v2c_bps)
        self.gnb_cloud = FifoResource(name="gnb-cloud", rate=c.gnb_cloud_bps, fixed_delay=c.gnb_cloud_delay_s)

    def _draw_tasks(self, rng: np.random.Generator) -> None:
        c = self.config
        self.traffic: RoadTraffic = poisson_road_traffic(c.vehicle_rate, c.road_m, c.horizon_s, c.speed_min,
                                                         c.speed_max, rng)
        start = np.maximum(self.traffic.entry, 0.0)
        stop = np.minimum(self.traffic.entry + c.road_m / self.traffic.speed, c.horizon_s)
        span = np.maximum(stop - start, 0.0)
        counts = rng.poisson(c.task_rate * span)
        vehicle = np.repeat(np.arange(len(span)), counts)
        times = start[vehicle] + rng.random(len(vehicle)) * span[vehicle]
        order = np.argsort(times, kind="stable")
        self.task_time, self.task_vehicle = times[order], vehicle[order]
        self.task_size = rng.uniform(c.size_min_mbit, c.size_max_mbit, len(order)) * 1e6

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Draw the traffic and tasks of an episode and return the first task's observation."""
        super().reset(seed=seed)
        self._draw_tasks(self.np_random)
        for res in [*self.rsu_up, *self.rsu_cpu, *self.i2c, self.v2c, self.gnb_cloud]:
            res.reset()
        self.i = 0
        self.records: list[TaskRecord] = []
        return self._observe(), self._info()

    @property
    def tasks(self) -> int:
        """Number of tasks in the episode."""
        return len(self.task_time)

    def _observe(self) -> np.ndarray:
        c = self.config
        if self.i >= self.tasks:
            self._current = None
            return np.zeros(OBS_DIM, dtype=np.float32)
        t, v, size = self.task_time[self.i], self.task_vehicle[self.i], self.task_size[self.i]
        x = self.traffic.position(v, t)
        dists, nearest = self.coverage.nearest(np.array([[x, 0.0]]))
        dist, k = float(dists[0]), int(nearest[0])
        xs = (t - self.traffic.entry) * self.traffic.speed
        on_road = (xs >= 0) & (xs < c.road_m)
        in_cov = int(np.sum(on_road & (np.abs(xs - c.rsu_x[k]) <= c.rsu_radius_m)))
        backlogs = np.array([self.rsu_up[k].backlog(t), self.rsu_cpu[k].backlog(t), self.v2c.backlog(t),
                             self.i2c[k].backlog(t), self.gnb_cloud.backlog(t)])
        self._current = (t, v, size, dist, k, backlogs)
        d = c.deadline_s
        obs = [size / (c.size_max_mbit * 1e6), size * c.cycles_per_bit / (c.size_max_mbit * 1e6 * 500.0),
               dist / c.rsu_radius_m, *(backlogs / d), in_cov / 100.0, on_road.sum() / 100.0]
        return np.clip(np.array(obs, dtype=np.float32), 0.0, OBS_HIGH)

    def _info(self) -> dict:
        if self._current is None:
            return {"latency_estimate": np.zeros(len(PATHS)), "mask": np.ones(len(PATHS), dtype=np.int8)}
        _, _, size, dist, _, b = self._current
        est = path_latencies(self.config, size, dist, *b)
        covered = dist <= self.config.rsu_radius_m
        return {"latency_estimate": est, "mask": np.array([covered, 1, covered], dtype=np.int8)}

    def step(self, action):
        """Send the current task along path ``action``; advance to the next task."""
        c = self.config
        if self._current is None:
            raise RuntimeError("episode is over; call reset()")
        a = int(action)
        t, v, size, dist, k, _ = self._current
        cycles = c.cycles_per_bit * size
        cloud = cycles / c.cloud_core_hz
        to_cloud = size / c.gnb_cloud_bps
        if a == V2I:
            up = self.rsu_up[k].enqueue(t, size / c.v2i_rate(dist))
            finish = self.rsu_cpu[k].enqueue(up.finish, cycles / c.rsu_hz).finish
            pure = size / c.v2i_rate(dist) + cycles / c.rsu_hz
        elif a == V2C:
            hop = self.v2c.enqueue(t, size / c.v2c_bps)
            finish = self.gnb_cloud.enqueue(hop.finish, to_cloud).finish + cloud
            pure = size / c.v2c_bps + to_cloud + c.gnb_cloud_delay_s + cloud
        elif a == V2I_I2C:
            up = self.rsu_up[k].enqueue(t, size / c.v2i_rate(dist))
            back = self.i2c[k].enqueue(up.finish, size / c.i2c_bps)
            finish = self.gnb_cloud.enqueue(back.finish, to_cloud).finish + cloud
            pure = size / c.v2i_rate(dist) + size / c.i2c_bps + to_cloud + c.gnb_cloud_delay_s + cloud
        else:
            raise ValueError(f"action must be 0, 1 or 2, got {action!r}")
        latency = finish - t
        self.records.append(
            TaskRecord(time=float(t), vehicle=int(v), rsu=int(k), path=a, size_bit=float(size), latency=float(latency),
                       transmission_and_processing=float(pure)),
        )
        reward = -c.miss_penalty if latency > c.deadline_s else -latency / c.deadline_s
        self.i += 1
        obs = self._observe()
        return obs, float(reward), self._current is None, False, self._info()

    def latencies(self) -> np.ndarray:
        """Latency of every task offloaded so far."""
        return np.array([r.latency for r in self.records])


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="repro.netsim.v2x:ThreeTierV2XEnv")
