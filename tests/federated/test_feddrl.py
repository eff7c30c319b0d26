"""FedDRL: the spec's invariants for the state, the action mapping, the DDPG pieces and the strategy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.feddrl import (
    PRE_LOSS,
    ConstantActionWeights,
    DDPGAgent,
    DDPGSettings,
    DDPGWeights,
    ReplayBuffer,
    action_to_weights,
    balance_reward,
    data_loss,
    feddrl_state,
    make_loss_reporting_client_app,
    soft_update,
)
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec, build_model, client_data
from repro.federated.weighting import FlowerPolicyFedAvg, SampleSizeWeights
from repro.models import set_weights

SKEW = TaskSpec(dataset="digits", num_clients=6, scheme="cluster_skew", alpha=0.5, cluster_sizes=(3, 2, 1),
                samples_per_client=40, hidden=(16,))
DIRICHLET = TaskSpec(dataset="digits", num_clients=6, alpha=0.3, hidden=(16,))
LOCAL = LocalSGD(batch_size=8, lr=0.05).config(3)


def _run(strategy, spec, app=None, rounds=3):
    return run_federated(strategy, app or make_client_app(spec), spec.num_clients, initial_arrays(spec, 0), rounds,
                         central_evaluator(spec), range(rounds + 1))


def test_action_to_weights_is_a_softmax_and_a_constant_action_gives_equal_weights():
    a = np.array([0.3, -1.2, 2.0, 0.0])
    w = action_to_weights(a)
    assert (w > 0).all()
    np.testing.assert_allclose(w / w.sum(), torch.softmax(torch.tensor(a), 0).numpy(), rtol=1e-12)
    assert set(action_to_weights(np.full(5, 0.7))) == {1.0}
    with pytest.raises(ValueError, match="action"):
        action_to_weights(np.array([np.nan, 1.0]))


def test_constant_action_and_sample_size_policies_make_the_strategy_bitwise_fedavg(same_weights):
    # equally sized clients: a constant action (equal weights) is FedAvg bit for bit
    avg = snapshot(_run(SeededFedAvg(6, LOCAL, seed=0), SKEW).final_arrays)
    drl = FlowerPolicyFedAvg(6, LOCAL, ConstantActionWeights(np.full(6, -0.4)), seed=0)
    assert same_weights(avg, snapshot(_run(drl, SKEW).final_arrays))
    assert all(v == pytest.approx(1 / 6) for w in drl.weights_used.values() for v in w.values())
    # unequal clients: sample-count weights are FedAvg bit for bit
    avg = snapshot(_run(SeededFedAvg(4, LOCAL, seed=2), DIRICHLET).final_arrays)
    by_size = _run(FlowerPolicyFedAvg(4, LOCAL, SampleSizeWeights(), seed=2), DIRICHLET)
    assert same_weights(avg, snapshot(by_size.final_arrays))


def test_state_is_3k_long_and_ordered_by_partition_id_whatever_the_reply_order():
    stats = [{"partition-id": p, PRE_LOSS: 10.0 + p, "train-loss": 20.0 + p, "num-examples": n}
             for p, n in ((2, 30), (0, 10), (1, 60))]
    s = feddrl_state(stats)
    assert s.shape == (9,)
    np.testing.assert_allclose(s, [10, 11, 12, 20, 21, 22, 0.1, 0.6, 0.3], rtol=1e-6)
    np.testing.assert_array_equal(s, feddrl_state(stats[::-1]))
    with pytest.raises(ValueError, match="pre-loss"):
        feddrl_state([{"partition-id": 0, "train-loss": 1.0, "num-examples": 3}])


def test_soft_update_tau_one_copies_and_tau_zero_keeps():
    torch.manual_seed(0)
    src, dst = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = [p.detach().clone() for p in dst.parameters()]
    soft_update(dst, src, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(before, dst.parameters()))
    soft_update(dst, src, 0.5)
    for a, b, c in zip(before, src.parameters(), dst.parameters()):
        torch.testing.assert_close(c, 0.5 * a + 0.5 * b)
    soft_update(dst, src, 1.0)
    assert all(torch.equal(a, b) for a, b in zip(src.parameters(), dst.parameters()))
    with pytest.raises(ValueError, match="tau"):
        soft_update(dst, src, 1.5)


def test_replay_buffer_is_fifo_with_fixed_capacity():
    buf = ReplayBuffer(3)
    for i in range(5):
        buf.push(np.array([i]), np.array([i]), float(i), np.array([i + 1]))
    assert len(buf) == 3
    assert [r for _, _, r, _ in buf.items()] == [2.0, 3.0, 4.0]
    s, a, r, s2 = buf.sample(8, np.random.default_rng(0))
    assert s.shape == (8, 1) and set(r[:, 0].tolist()) <= {2.0, 3.0, 4.0}
    torch.testing.assert_close(s2, s + 1)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0)


def test_ddpg_learns_a_one_step_bandit():
    """Reward -(a - target)^2 with a constant state: the actor must move to the target."""
    target = np.array([0.8, -0.5], dtype=np.float32)
    settings = DDPGSettings(hidden=32, gamma=0.0, tau=0.05, lr_actor=3e-3, lr_critic=3e-3, sigma=0.3, batch_size=32)
    agent = DDPGAgent(2, 2, settings=settings, seed=0)
    s = np.ones(2, dtype=np.float32)
    for _ in range(400):
        a = agent.act(s)
        agent.buffer.push(s, a, -float(((a - target) ** 2).sum()), s)
        agent.update()
    assert np.abs(agent.act(s, explore=False) - target).max() < 0.2


def test_ddpg_policy_weights_are_a_distribution_and_it_needs_every_client():
    pol = DDPGWeights(3, beta=1.0, updates=2, seed=0, settings=DDPGSettings(batch_size=2))
    for rnd in range(1, 6):
        stats = [{"partition-id": p, PRE_LOSS: 1.0 + 0.1 * p * rnd, "train-loss": 0.5, "num-examples": 10}
                 for p in (2, 0, 1)]
        w = pol.weights(rnd, stats)
        assert (w >= 0).all() and w.sum() == pytest.approx(1.0)
    assert pol.rewards[0] == pytest.approx(balance_reward(np.array([1.0, 1.2, 1.4]), 1.0))
    assert len(pol.rewards) == 4 and len(pol.agent.buffer) == 4
    with pytest.raises(ValueError, match="every client"):
        pol.weights(7, stats[:2])


def test_loss_reporting_client_trains_like_the_shared_client_and_reports_the_global_loss(same_weights):
    avg = _run(SeededFedAvg(6, LOCAL, seed=1), SKEW)
    rep = _run(SeededFedAvg(6, LOCAL, seed=1), SKEW, make_loss_reporting_client_app(SKEW))
    assert same_weights(snapshot(avg.final_arrays), snapshot(rep.final_arrays))
    pol = DDPGWeights(6, seed=0)
    strat = FlowerPolicyFedAvg(6, LOCAL, pol, seed=0)
    _run(strat, SKEW, make_loss_reporting_client_app(SKEW), rounds=1)
    model = build_model(SKEW, seed=0)
    set_weights(model, snapshot(initial_arrays(SKEW, 0)))
    expected = [data_loss(model, *client_data(SKEW, p)) for p in range(6)]
    np.testing.assert_allclose(pol._last[0][:6], expected, rtol=1e-6)


def test_the_agent_takes_its_hyper_parameters_as_one_keyword_only_record():
    settings = DDPGSettings(hidden=8, action_scale=0.5, sigma=0.0, capacity=3, batch_size=2)
    agent = DDPGAgent(4, 2, settings=settings, seed=1)
    assert agent.batch_size == 2 and agent.buffer._items.maxlen == 3 and agent.actor[0].out_features == 8
    assert np.abs(agent.act(np.ones(4, np.float32))).max() <= 0.5
    with pytest.raises(TypeError):
        DDPGAgent(4, 2, 8)  # the settings are keyword-only
    with pytest.raises(ValueError, match="sigma"):
        DDPGAgent(4, 2, settings=DDPGSettings(sigma=-1.0))
