"""Tabular Q-learning: the update rule by hand, masks, checkpoints, determinism, and beating random."""

from __future__ import annotations

import numpy as np
import pytest

from repro.netsim.heuristics import RandomAllowed
from repro.netsim.mobility import CitySpec
from repro.netsim.oppcomm import ACTIONS, OppCommConfig, OppCommEnv
from repro.netsim.oppcomm_agents import Scenario, evaluate, greedy_q, train_q_agents
from repro.netsim.qlearning import QLearningConfig, TabularQ, play_episode


def test_update_by_hand():
    q = TabularQ(2, 3, 2, QLearningConfig(alpha=0.5, gamma=0.9, shared=False))
    q.table[0, 1] = [1.0, 4.0]
    q.table[1, 2] = [2.0, -1.0]
    mask = np.array([[1, 0], [1, 1]])
    q.update(np.array([0, 0]), np.array([1, 0]), np.array([1.0, -1.0]), np.array([1, 2]), mask)
    # agent 0: only action 0 allowed next -> target 1 + 0.9 * 1 = 1.9; Q = 0 + 0.5 * 1.9
    assert q.table[0, 0, 1] == pytest.approx(0.95)
    # agent 1: max(2, -1) = 2 -> target -1 + 1.8 = 0.8; Q = 0.4
    assert q.table[1, 0, 0] == pytest.approx(0.4)


def test_shared_table_accumulates_every_agent():
    q = TabularQ(3, 2, 2, QLearningConfig(alpha=0.5, gamma=0.0, shared=True))
    q.update(np.zeros(3, int), np.zeros(3, int), np.ones(3), np.zeros(3, int), np.ones((3, 2)))
    assert q.table.shape == (1, 2, 2) and q.table[0, 0, 0] == pytest.approx(1.5)


def test_act_respects_masks():
    q = TabularQ(50, 1, 4)
    q.table[:] = [0.0, 0.0, 5.0, 0.0]
    masks = np.tile([1, 1, 0, 1], (50, 1))
    rng = np.random.default_rng(0)
    for eps in (0.0, 1.0):
        assert (q.act(np.zeros(50, int), masks, eps, rng) != 2).all()


def test_checkpoint_round_trip(tmp_path):
    q = TabularQ(2, 3, 4, QLearningConfig(shared=False))
    q.table[:] = np.random.default_rng(0).normal(size=q.table.shape)
    back = TabularQ.load(q.save(tmp_path / "q.npy"), QLearningConfig(shared=False))
    np.testing.assert_array_equal(back.table, q.table)
    with pytest.raises(ValueError):
        TabularQ.load(tmp_path / "q.npy", QLearningConfig(shared=True))


SCENARIO = Scenario(buses=16, rsus=8, grid=16, routes=4, horizon_s=600.0, gen_interval_s=20, delta_s=90.0)


@pytest.fixture(scope="module")
def trained():
    return train_q_agents(SCENARIO, 10, seed=0, qconfig=QLearningConfig(shared=True))


def test_tables_finite_and_greedy_deterministic(trained):
    agent, curve = trained
    assert np.isfinite(agent.table).all() and len(curve) == 10
    a = evaluate(SCENARIO, 7, greedy_q(agent))
    b = evaluate(SCENARIO, 7, greedy_q(agent))
    assert a == b


def test_trained_agent_beats_random_on_fixed_seed(trained):
    agent, _ = trained
    env = OppCommEnv(SCENARIO.config())
    rng = np.random.default_rng(0)
    learned = play_episode(env, 0, lambda o, i: agent.greedy(o["state"], o["mask"]))
    random = play_episode(env, 0, lambda o, i: RandomAllowed().act(o, i, rng))
    assert learned > random


def test_state_space_covers_observations():
    cfg = OppCommConfig(city=CitySpec(grid=11, buses=8, routes=2, horizon_s=120.0), rsus=4)
    env = OppCommEnv(cfg)
    obs, _ = env.reset(seed=0)
    assert (obs["state"] < cfg.n_states).all() and len(ACTIONS) == 4


def test_terminal_transition_does_not_bootstrap():
    q = TabularQ(1, 2, 2, QLearningConfig(alpha=1.0, gamma=0.9, shared=False))
    q.table[0, 1] = [5.0, 7.0]
    q.update(np.array([0]), np.array([0]), np.array([2.0]), np.array([1]), np.zeros((1, 2)))
    assert q.table[0, 0, 0] == pytest.approx(2.0)
