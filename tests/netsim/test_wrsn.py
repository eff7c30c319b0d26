"""WRSNCharging-v0: gymnasium contract, energy conservation, charging law, termination and no-charging lifetime."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from repro.netsim.chapters.wrsn_drl import lifetime, q_charging_lifetime
from repro.netsim.qcharging import ALPHA, GAMMA, SELF_VALUE, Move, QCharging, charging_reward, inma, location_index
from repro.netsim.wrsn import (
    ENV_ID,
    MC_LOW_J,
    WRSNChargingEnv,
    WRSNConfig,
    charge_rate,
    charging_times,
    nearest_request,
    route,
    routing,
)

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


def test_nearest_request_picks_a_grid_location_and_charging_beats_parking():
    env = WRSNChargingEnv(CFG)
    env.reset(seed=3)
    assert 0 <= nearest_request(env) < len(env.locations) - 1
    hungry = WRSNConfig(drain_scale=40.0)
    park = lifetime(hungry, 3, lambda e, o: len(e.locations) - 1)
    assert lifetime(hungry, 3, lambda e, o: nearest_request(e)) > 1.5 * park


@pytest.mark.parametrize("policy", ["nearest", "random", "far"])
def test_the_charger_never_spends_energy_it_does_not_have(policy):
    """Issue 26 item 8: with a 500 J charger the old environment ended 24 steps at -188 J."""
    cfg = WRSNConfig(mc_capacity_j=500)
    env = WRSNChargingEnv(cfg)
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    far = len(env.locations) - 2  # the grid corner opposite the depot
    for _ in range(24):
        a = {"nearest": nearest_request(env), "random": int(rng.integers(len(env.locations))), "far": far}[policy]
        _, _, term, trunc, info = env.step(a)
        assert env.mc_energy >= 0.0
        if term or trunc:
            break


def test_unaffordable_moves_are_refused_and_charges_stop_at_the_reserve():
    cfg = WRSNConfig(mc_capacity_j=1250.0)  # the trip to the far corner and back costs about 1180 J
    env = WRSNChargingEnv(cfg)
    env.reset(seed=0)
    corner = env.locations[len(env.locations) - 2]  # the grid corner opposite the depot
    seen = {"cut": False, "refused": False}
    for _ in range(12):
        affordable = env.affordable(corner)
        _, _, term, trunc, info = env.move(corner, dwell_s=cfg.max_charge_s)
        assert info["refused"] == (not affordable)
        assert env.mc_energy >= env.travel_cost(env.mc, cfg.depot) - 1e-9  # the way home is always paid for
        if info["refused"]:
            assert np.allclose(env.mc, cfg.depot)
        seen["cut"] |= info["charge_cut"]
        seen["refused"] |= info["refused"]
        if term or trunc:
            break
    assert seen == {"cut": True, "refused": True}
    np.testing.assert_allclose(env.initial + env.charged, env.spent + env.energy, atol=1e-9)


def _old_charging_time(env: WRSNChargingEnv, location: np.ndarray, travel_s: float) -> float:
    """The scalar heuristic the environment had before it was vectorised over locations."""
    c = env.config
    e_min = c.e_min_j
    p = charge_rate(c, np.linalg.norm(env.topo.sensors - location, axis=1))
    e0 = np.maximum(env.energy - env.rate * travel_s, 0.0)
    net = np.where(env.alive, p - env.rate, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        times = np.where(((e0 < e_min) & (net > 0)) | ((e0 > e_min) & (net < 0)), (e_min - e0) / net, np.nan)
    cands = np.unique(np.clip(times[np.isfinite(times) & (times > 0)], 0.0, c.max_charge_s))
    if len(cands) == 0:
        return 0.0
    below = [(np.minimum(e0 + net * t, c.e_max_j) < e_min - 1e-9)[env.alive].sum() for t in cands]
    return float(cands[int(np.argmin(below))])


def test_vectorised_charging_times_equal_the_scalar_heuristic():
    env = WRSNChargingEnv(WRSNConfig(drain_scale=40.0))
    env.reset(seed=4)
    for _ in range(6):
        env.step(nearest_request(env))
    locs = env.locations
    travel = np.linalg.norm(locs - env.mc, axis=1) / env.config.mc_speed
    gain = charge_rate(env.config, np.linalg.norm(locs[:, None] - env.topo.sensors[None], axis=2))
    got = charging_times(env.config, env.energy, env.rate, gain, travel)
    want = [_old_charging_time(env, loc, t) for loc, t in zip(locs, travel)]
    np.testing.assert_allclose(got, want)
    assert (got > 0).any()


def test_route_paths_end_next_to_the_base_and_carry_every_target():
    env = WRSNChargingEnv(CFG)
    env.reset(seed=1)
    r = route(CFG, env.topo, env.alive)
    assert r.covered and len(r.paths) == CFG.targets
    for t, path in enumerate(r.paths):
        assert np.linalg.norm(env.topo.sensors[path[0]] - env.topo.targets[t]) <= CFG.sensing_m
        assert np.linalg.norm(env.topo.sensors[path[-1]] - env.topo.base) <= CFG.comm_m
        assert all(r.rate[i] > 0 for i in path)


def _hungry_env(seed: int = 0) -> WRSNChargingEnv:
    env = WRSNChargingEnv(WRSNConfig(drain_scale=40.0))
    env.reset(seed=seed)
    env.energy[:] = env.config.e_max_j  # everyone full but sensor 0 (a target's sensor) and sensor 9
    env.energy[[0, 9]] = 0.1 * env.config.e_max_j
    return env


def test_q_charging_row_update_is_the_authors_rule():
    q = QCharging(4)
    q.table[:] = np.arange(16.0).reshape(4, 4)
    reward = np.array([1.0, 0.5, 0.0, 2.0])
    old = q.table.copy()
    q.update(1, reward)
    best = old.max(axis=1)
    best[1] = SELF_VALUE  # staying is bootstrapped at -2 (q_max_function)
    np.testing.assert_allclose(q.table[1], (1 - ALPHA) * old[1] + ALPHA * (reward + GAMMA * best))
    np.testing.assert_allclose(np.delete(q.table, 1, axis=0), np.delete(old, 1, axis=0))  # only row s moves
    assert (ALPHA, GAMMA) == (0.6, 0.5)


def test_q_charging_reward_reads_the_requesting_sensors():
    env = _hungry_env()
    requests = env.requests()
    assert set(requests) == {0, 9}
    rw = charging_reward(env, requests)
    for term in (rw.first, rw.third):
        assert term.sum() == pytest.approx(1.0) and (term >= 0).all()
    closest = int(np.argmin(np.linalg.norm(env.locations - env.topo.sensors[0], axis=1)
                            + np.linalg.norm(env.locations - env.topo.sensors[9], axis=1)))
    # the first term grows with the power reaching the requests: it peaks near them, not at the depot
    assert rw.first.argmax() != len(env.locations) - 1
    assert rw.first[closest] > np.median(rw.first)
    assert rw.total.shape == (len(env.locations),)


def test_q_charging_stays_without_requests_and_goes_home_when_low():
    env = WRSNChargingEnv(WRSNConfig(drain_scale=40.0))
    env.reset(seed=0)
    env.energy[:] = env.config.e_max_j
    agent = QCharging(len(env.locations))
    assert agent.decide(env) == location_index(env) and not agent.table.any()  # no request: stay, learn nothing
    env = _hungry_env()
    env.mc_energy = MC_LOW_J / 2
    assert agent.decide(env) == len(env.locations) - 1
    assert agent.table.any()


def test_inma_serves_the_request_with_least_travel_plus_time_to_full():
    env = _hungry_env()
    c = env.config
    move = inma(env)
    assert isinstance(move, Move)
    scores = {}
    for i in (0, 9):
        travel = np.linalg.norm(env.topo.sensors[i] - env.mc) / c.mc_speed
        scores[i] = travel + (c.e_max_j - env.energy[i]) / (c.alpha / c.beta**2 - env.rate[i])
    k = min(scores, key=scores.get)
    np.testing.assert_allclose(move.target, env.topo.sensors[k])
    assert move.dwell_s == pytest.approx(env.energy[k] / env.rate[k])


def test_the_authors_baselines_keep_a_hungry_network_alive_longer_than_parking():
    hungry = WRSNConfig(drain_scale=40.0)
    park = lifetime(hungry, 3, lambda e, o: len(e.locations) - 1)
    assert q_charging_lifetime(hungry, 3) > park
    assert lifetime(hungry, 3, lambda e, o: inma(e)) > park
