"""KD loss and aggregation-weight policies."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.kd import kd_loss
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.federated.weighting import AggregationWeightPolicy, PolicyFedAvg, SampleSizeWeights, UniformWeights

SPEC = TaskSpec(dataset="digits", num_clients=8, alpha=0.3, hidden=(16,))
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.0).config(3)


def test_kd_loss_zero_for_equal_logits_and_matches_the_formula():
    t = torch.randn(5, 4)
    for T in (0.5, 1.0, 4.0):
        assert kd_loss(t.clone(), t, T).item() == pytest.approx(0.0, abs=1e-6)
    s = torch.randn(5, 4)
    T = 2.0
    p_t, p_s = torch.softmax(t / T, 1), torch.softmax(s / T, 1)
    manual = T**2 * (p_t * (p_t.log() - p_s.log())).sum(1).mean()
    assert kd_loss(s, t, T).item() == pytest.approx(manual.item(), rel=1e-5)
    assert kd_loss(s, t, T).item() > 0
    with pytest.raises(ValueError, match="temperature"):
        kd_loss(s, t, 0.0)


def _run(strategy, rounds=3):
    return run_federated(strategy, make_client_app(SPEC), SPEC.num_clients, initial_arrays(SPEC, 0), rounds,
                         central_evaluator(SPEC), [rounds])


def test_sample_size_policy_is_fedavg_and_uniform_is_the_plain_mean():
    a = snapshot(_run(SeededFedAvg(4, LOCAL, seed=0)).final_arrays)
    s = PolicyFedAvg(4, LOCAL, SampleSizeWeights(), seed=0)
    b = snapshot(_run(s).final_arrays)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6)
    for w in s.weights_used.values():
        assert sum(w.values()) == pytest.approx(1.0)
    u = PolicyFedAvg(4, LOCAL, UniformWeights(), seed=0)
    _run(u, rounds=1)
    assert set(u.weights_used[1].values()) == {0.25}


def test_invalid_policy_weights_are_refused():
    class Bad(AggregationWeightPolicy):
        name = "bad"

        def raw_weights(self, server_round, stats):
            return np.array([-1.0] + [1.0] * (len(stats) - 1))

    with pytest.raises(ValueError, match="bad"):
        Bad().weights(1, [{"num-examples": 1}] * 3)
