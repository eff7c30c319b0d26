"""The fuzzy theta controller: range, monotonicity, partitions; pinned, it reduces to plain Q-learning."""

from __future__ import annotations

import numpy as np
import pytest

from repro.netsim.fuzzy import ConstantTheta, FuzzyTheta, memberships, shaped_reward
from repro.netsim.heuristics import RandomAllowed
from repro.netsim.oppcomm import OppCommEnv
from repro.netsim.oppcomm_agents import Scenario, train_q_agents
from repro.netsim.qlearning import QLearningConfig


@pytest.fixture(scope="module")
def controller():
    return FuzzyTheta(grid=21)


def test_theta_in_unit_interval_and_monotone_in_age(controller):
    ages = np.linspace(0, 1, 41)
    for density in np.linspace(0, 6, 13):
        theta = controller(ages, np.full_like(ages, density))
        assert ((theta >= 0) & (theta <= 1)).all()
        assert (np.diff(theta) <= 1e-12).all(), f"theta rises with age at density {density}"


def test_theta_rises_with_density_and_spans_the_range(controller):
    d = np.linspace(0, 4, 17)
    assert (np.diff(controller(np.full_like(d, 0.5), d)) >= -1e-12).all()
    assert controller(np.array([0.0]), np.array([4.0]))[0] > 0.9
    assert controller(np.array([1.0]), np.array([0.0]))[0] < 0.1


def test_memberships_partition_unity():
    x = np.linspace(0, 1, 101)
    np.testing.assert_allclose(memberships(x).sum(axis=1), 1.0)


SCENARIO = Scenario(buses=12, rsus=6, grid=16, routes=3, horizon_s=300.0, gen_interval_s=10, delta_s=60.0,
                    rsu_centre_share=0.5)


def test_pinned_controller_gives_the_environment_rewards():
    env = OppCommEnv(SCENARIO.config(theta=0.5))
    reward = shaped_reward(ConstantTheta(theta=0.5))
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(100):
        obs, _, _, _, after = env.step(RandomAllowed().act(obs, info, rng))
        np.testing.assert_array_equal(reward(info, after), after["rewards"])
        info = after


def test_pinned_controller_reduces_to_plain_q_learning():
    cfg = QLearningConfig(shared=True)
    plain, plain_curve = train_q_agents(SCENARIO, 2, seed=3, qconfig=cfg, theta=0.5)
    pinned, pinned_curve = train_q_agents(SCENARIO, 2, seed=3, qconfig=cfg, theta=0.9,
                                          reward_fn=shaped_reward(ConstantTheta(theta=0.5)))
    np.testing.assert_array_equal(plain.table, pinned.table)
    assert plain_curve == pinned_curve
    fuzzy, _ = train_q_agents(SCENARIO, 2, seed=3, qconfig=cfg, reward_fn=shaped_reward(FuzzyTheta(grid=11)))
    assert not np.array_equal(fuzzy.table, plain.table), "an adaptive theta changes what is learned"
