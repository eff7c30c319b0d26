"""Vehicular and sensor networks: environment steps per second, and agent training time per 10,000 steps.

Rows: seconds per 1,000 steps of each simulator (``OppComm-v0`` with 60 buses, ``ThreeTierV2X-v0`` at the
heaviest cpu load), with the rate in steps per second; seconds to train tabular Q-learning (OppComm, one
step = one slot for every bus) and stable-baselines3 DQN (V2X, one step = one task, uniform and guided
exploration) for 10,000 environment steps; ``WRSNCharging-v0`` (the cpu network: 60 sensors, 7 x 7 grid)
under the nearest-request rule and under the authors' Q-charging, whose decisions score every location with
the three-term reward.  Timings live here, never in the tests.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from timing import timed

from repro.netsim.dqn import DQNConfig, train_dqn
from repro.netsim.heuristics import GreedyLatency, RandomAllowed
from repro.netsim.oppcomm import ACTIONS, OppCommEnv
from repro.netsim.oppcomm_agents import Scenario
from repro.netsim.qcharging import QCharging
from repro.netsim.qlearning import QLearningConfig, TabularQ
from repro.netsim.v2x import ThreeTierV2XEnv, V2XConfig, latencies_from_observation
from repro.netsim.wrsn import WRSNChargingEnv, WRSNConfig, nearest_request

OPP = Scenario(buses=60, rsus=25, horizon_s=1200.0)
V2X = V2XConfig(vehicle_rate=2.0, task_rate=1.0, horizon_s=10.0)
WRSN = WRSNConfig(sensors=60, targets=12, grid=7, drain_scale=40.0, max_time_s=40000.0)


def _wrsn_decisions(choose, n: int) -> int:
    """Play ``n`` decisions of ``choose(env)`` on WRSNCharging-v0 (new networks as episodes end)."""
    env = WRSNChargingEnv(WRSN)
    env.reset(seed=0)
    for k in range(n):
        _, _, term, trunc, _ = env.step(choose(env))
        if term or trunc:
            env.reset(seed=k + 1)
    return n


def _steps(env, act, n: int) -> None:
    obs, info = env.reset(seed=0)
    for _ in range(n):
        obs, _, term, trunc, info = env.step(act(obs, info))
        if term or trunc:
            obs, info = env.reset(seed=0)


def run() -> list[tuple[str, float, str]]:
    """Rows ``(name, seconds, rate or ratio)``."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    rows = []
    opp = OppCommEnv(OPP.config())
    opp.reset(seed=0)  # mobility and link geometry are computed once per city, outside the timing
    opp_s = timed(lambda: _steps(opp, lambda o, i: RandomAllowed().act(o, i, rng), 1000))
    rows.append(("netsim: OppComm-v0, 1,000 slots x 60 buses (random)", opp_s, f"{1000 / opp_s:,.0f} steps/s"))
    v2x = ThreeTierV2XEnv(V2X)
    s = timed(lambda: _steps(v2x, lambda o, i: GreedyLatency().act(o, i, rng), 1000))
    rows.append(("netsim: ThreeTierV2X-v0, 1,000 tasks (greedy)", s, f"{1000 / s:,.0f} steps/s"))

    def q_learning() -> None:
        agent = TabularQ(OPP.buses, opp.config.n_states, len(ACTIONS), QLearningConfig())
        obs, info = opp.reset(seed=0)
        for _ in range(10_000):
            act = agent.act(obs["state"], obs["mask"], 0.1, rng)
            nxt, _, term, trunc, info = opp.step(act)
            agent.update(obs["state"], info["executed"], info["rewards"], nxt["state"], nxt["mask"])
            obs = nxt
            if term or trunc:
                obs, info = opp.reset(seed=0)

    q = timed(q_learning, repeat=1)
    rows.append(("netsim: tabular Q-learning, 10,000 OppComm steps", q, f"{q / (10 * opp_s):.2f}x the environment alone"))
    near = timed(lambda: _wrsn_decisions(nearest_request, 200), repeat=1)
    rows.append(("netsim: WRSNCharging-v0, 200 decisions (nearest request)", near, f"{200 / near:,.0f} decisions/s"))
    agent = QCharging(len(WRSN.locations))
    q = timed(lambda: _wrsn_decisions(agent.decide, 200), repeat=1)
    rows.append(("netsim: WRSNCharging-v0, 200 decisions (Q-charging)", q, f"{q / near:.2f}x nearest request"))
    for label, guide in (("uniform", None), ("guided", functools.partial(latencies_from_observation, V2X))):
        d = timed(lambda g=guide: train_dqn(ThreeTierV2XEnv(V2X), 10_000, 0, DQNConfig(), g), repeat=1)
        rows.append((f"netsim: SB3 DQN ({label} exploration), 10,000 V2X steps", d, f"{10_000 / d:,.0f} steps/s"))
    return rows


if __name__ == "__main__":
    for name, sec, ratio in run():
        print(f"{name:<58} {sec:8.3f}  {ratio}")
