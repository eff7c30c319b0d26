"""WRSNCharging-v0: gymnasium contract, energy conservation, charging law, termination and no-charging lifetime."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from repro.netsim.chapters.wrsn_drl import inma_like, lifetime, no_charging, train_q_charging
from repro.netsim.qlearning import QLearningConfig
from repro.netsim.wrsn import ENV_ID, WRSNChargingEnv, WRSNConfig, charge_rate, nearest_request, routing

CFG = WRSNConfig()


def test_check_env_and_registered_id():
    check_env(gym.make(ENV_ID, config=CFG).unwrapped, skip_render_check=True)


def test_charge_rate_law():
    d = np.linspace(0, 500, 101)
    p = charge_rate(CFG, d)
    assert p[0] == pytest.approx(36 / 30**2) and (np.diff(p) < 0).all()


@pytest.mark.parametrize("policy", ["nearest", "random"])
def test_energy_is_conserved_and_bounded(policy):
    env = WRSNChargingEnv(CFG)
    env.reset(seed=2)
    rng = np.random.default_rng(0)
    travel = 0.0
    for _ in range(60):
        a = nearest_request(env) if policy == "nearest" else int(rng.integers(len(env.locations)))
        before = env.mc.copy()
        _, _, term, trunc, info = env.step(a)
        travel += np.linalg.norm(env.mc - before) * CFG.travel_j_per_m
        np.testing.assert_allclose(env.initial + info["charged"], info["spent"] + env.energy, atol=1e-9)
        assert (env.energy >= 0).all() and (env.energy <= CFG.e_max_j + 1e-12).all()
        # what the sensors received is exactly what the charger paid for it, times the efficiency
        assert info["charged"].sum() == pytest.approx((info["mc_spent"] - travel) * CFG.efficiency, rel=1e-9)
        if term or trunc:
            break
    assert env.charged.sum() > 0


def _covered_by_bfs(cfg, topo, alive) -> bool:
    n = len(topo.sensors)
    pts = np.vstack([topo.sensors, topo.base])
    ok_nodes = list(np.flatnonzero(alive)) + [n]
    seen, queue = {n}, deque([n])
    while queue:
        u = queue.popleft()
        for v in ok_nodes:
            if v not in seen and np.linalg.norm(pts[u] - pts[v]) <= cfg.comm_m:
                seen.add(v)
                queue.append(v)
    reach = np.array([i in seen for i in range(n)])
    d = np.linalg.norm(topo.targets[:, None] - topo.sensors[None], axis=2)
    return bool((((d <= cfg.sensing_m) & reach[None]).any(axis=1)).all())


def test_termination_exactly_when_coverage_or_connectivity_is_lost():
    env = WRSNChargingEnv(CFG)
    env.reset(seed=0)
    done = False
    while not done:
        _, _, term, trunc, info = env.step(len(env.locations) - 1)
        assert _covered_by_bfs(CFG, env.topo, env.alive) == (not term)
        done = term or trunc
    assert term and info["lifetime"] == pytest.approx(env.t)


def test_parked_charger_gives_the_analytic_no_charging_lifetime():
    env = WRSNChargingEnv(CFG)
    env.reset(seed=0)
    energy, alive, t = env.initial.copy(), np.ones(CFG.sensors, dtype=bool), 0.0
    while True:  # deaths one by one: each is linear drain at the current routing's rates
        rate, _, ok = routing(CFG, env.topo, alive)
        if not ok:
            break
        with np.errstate(divide="ignore"):
            to_death = np.where(alive & (rate > 0), energy / rate, np.inf)
        k = int(np.argmin(to_death))
        dt = to_death[k]
        energy = np.where(alive, energy - rate * dt, energy)
        t += dt
        alive[k] = False
    done = False
    while not done:
        _, _, term, trunc, info = env.step(len(env.locations) - 1)
        done = term or trunc
    assert term and info["lifetime"] == pytest.approx(t, rel=1e-9)


def test_charging_extends_lifetime():
    lifetimes = {}
    for name in ("depot", "nearest"):
        env = WRSNChargingEnv(CFG)
        env.reset(seed=0)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(len(env.locations) - 1 if name == "depot" else nearest_request(env))
            done = term or trunc
        lifetimes[name] = env.t
    assert lifetimes["nearest"] > 1.5 * lifetimes["depot"]


def test_heuristics_pick_grid_locations_and_q_charging_learns():
    env = WRSNChargingEnv(CFG)
    env.reset(seed=3)
    for rule in (inma_like, nearest_request):
        assert 0 <= rule(env) < len(env.locations) - 1
    assert no_charging(env) == len(env.locations) - 1
    agent, returns = train_q_charging(CFG, 10, seed=0, qconfig=QLearningConfig(gamma=0.9, epsilon=0.3))
    assert np.isfinite(agent.table).all() and len(returns) == 10
    hungry = WRSNConfig(drain_scale=40.0)
    assert lifetime(hungry, 3, lambda e, o: nearest_request(e)) > 1.5 * lifetime(hungry, 3, lambda e, o: no_charging(e))
