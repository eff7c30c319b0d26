"""ThreeTierV2X-v0: gymnasium contract, analytic latencies, FIFO order, coverage, conservation; DQN beats random."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from repro.netsim.dqn import DQNConfig, GuidedDQN, greedy_actions, load, save, train_dqn
from repro.netsim.heuristics import GreedyLatency, RandomAllowed
from repro.netsim.v2x import ENV_ID, V2C, V2I, V2I_I2C, ThreeTierV2XEnv, V2XConfig, latencies_from_observation

CFG = V2XConfig(vehicle_rate=1.0, task_rate=0.5, horizon_s=20.0)


def _play(env, seed, act):
    obs, info = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, done, _, info = env.step(act(obs, info))
    return env


def test_check_env_and_registered_id():
    env = gym.make(ENV_ID, config=V2XConfig(horizon_s=5.0))
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("path", [V2I, V2C, V2I_I2C])
def test_single_task_in_empty_system_matches_analytic_latency(path):
    c = CFG
    env = ThreeTierV2XEnv(c)
    env.reset(seed=0)
    t, v, size, dist, k, _ = env._current
    rate = c.bandwidth_hz * np.log2(1 + 10 ** (c.snr_ref_db / 10) * (c.ref_m / np.hypot(dist, c.height_m)) ** 3)
    cycles = 500.0 * size
    expected = {
        V2I: size / rate + cycles / 10e9,
        V2C: size / 40e6 + size / 1e9 + 0.01 + cycles / 5e9,
        V2I_I2C: size / rate + size / 100e6 + size / 1e9 + 0.01 + cycles / 5e9,
    }[path]
    env.step(path)
    assert env.records[0].latency == pytest.approx(expected, rel=1e-12)
    assert env.records[0].latency == pytest.approx(env.records[0].transmission_and_processing, rel=1e-12)


def test_estimates_equal_realised_latency_and_observation_recovers_them():
    env = ThreeTierV2XEnv(V2XConfig(vehicle_rate=2.0, task_rate=1.0, horizon_s=5.0))
    obs, info = env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = int(rng.integers(3))
        est = info["latency_estimate"][a]
        np.testing.assert_allclose(latencies_from_observation(env.config, obs), info["latency_estimate"], rtol=1e-4,
                                   atol=1e-5)
        obs, _, done, _, info = env.step(a)
        assert env.records[-1].latency == pytest.approx(est, rel=1e-12)
        if done:
            break


def test_fifo_order_no_negative_queueing_and_conservation():
    env = _play(ThreeTierV2XEnv(V2XConfig(vehicle_rate=2.0, task_rate=1.0, horizon_s=10.0)), 1,
                lambda o, i: V2I)
    recs = env.records
    assert len(recs) == env.tasks > 100, "every generated task is offloaded and completed"
    for k in range(len(env.config.rsu_x)):
        finish = [r.time + r.latency for r in recs if r.rsu == k]
        assert len(finish) > 10 and finish == sorted(finish), "uplink then CPU, both FIFO: arrival order kept"
    assert all(r.latency >= r.transmission_and_processing - 1e-12 for r in recs)
    assert np.mean([r.latency > r.transmission_and_processing + 1e-9 for r in recs]) > 0.5, "queues build up"


def test_vehicles_always_covered():
    env = ThreeTierV2XEnv(CFG)
    obs, info = env.reset(seed=2)
    done = False
    while not done:
        assert info["mask"][V2I] == 1 and env._current[3] <= CFG.rsu_radius_m
        obs, _, done, _, info = env.step(V2C)


def test_greedy_beats_fixed_paths_under_load():
    cfg = V2XConfig(vehicle_rate=2.0, task_rate=1.0, horizon_s=10.0)
    greedy = _play(ThreeTierV2XEnv(cfg), 0, lambda o, i: GreedyLatency().act(o, i, None)).latencies().mean()
    for path in (V2I, V2C, V2I_I2C):
        assert greedy < _play(ThreeTierV2XEnv(cfg), 0, lambda o, i: path).latencies().mean()


def test_guided_exploration_prefers_fast_paths():
    env = ThreeTierV2XEnv(CFG)
    model = GuidedDQN("MlpPolicy", env, guide=functools.partial(latencies_from_observation, CFG), temperature=0.01,
                      seed=0, device="cpu", learning_starts=10)
    model.exploration_rate = 1.0
    obs, info = env.reset(seed=0)
    picks = [int(model.predict(obs)[0]) for _ in range(200)]
    best = int(np.argmin(info["latency_estimate"]))
    assert np.mean(np.array(picks) == best) > 0.8


def test_trained_dqn_beats_random_on_fixed_seed(tmp_path):
    torch.set_num_threads(1)
    cfg = V2XConfig(vehicle_rate=2.0, task_rate=1.0, horizon_s=5.0)
    trained = train_dqn(ThreeTierV2XEnv(cfg), 2500, seed=0, config=DQNConfig(),
                        guide=functools.partial(latencies_from_observation, cfg))
    model = load(save(trained.model, tmp_path / "dqn.zip"))
    rng = np.random.default_rng(0)
    eval_cfg = V2XConfig(vehicle_rate=2.0, task_rate=1.0, horizon_s=10.0)
    learned = _play(ThreeTierV2XEnv(eval_cfg), 7, lambda o, i: int(greedy_actions(model, o)[0])).latencies().mean()
    random = _play(ThreeTierV2XEnv(eval_cfg), 7, lambda o, i: RandomAllowed().act(o, i, rng)).latencies().mean()
    assert learned < random
