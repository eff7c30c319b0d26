"""Hierarchical local SGD: averaging, discrepancy, cost model and the chapter driver."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.training.chapters import hier_localsgd as driver
from repro.training.cost import Network
from repro.training.hier_localsgd import flat_averaging_cost, model_discrepancy, sharded_averaging_cost
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, build_template, make_optimizer, train_step

SETUP = driver.LocalSGDSetup(n_samples=1200, n_features=10, n_informative=6, num_classes=3, class_sep=1.5,
                             hidden=(16,), batch_size=8, lr_per_worker=0.05, momentum=0.9, epochs=2)


def test_after_averaging_all_replicas_are_identical_and_spread_is_zero():
    bank = ReplicaBank(build_template(5, (8,), 3, batch_norm=False, seed=0), Topology(num_groups=3, group_size=2))
    opt = make_optimizer(bank, SGDConfig(lr=0.1))
    x = torch.randn(3, 2, 4, 5)
    y = torch.randint(0, 3, (3, 2, 4))
    train_step(bank, opt, x, y)
    assert model_discrepancy(bank) > 0
    means = [p.detach().mean(0) for p in bank.weights]
    bank.average_groups()
    for p, m in zip(bank.weights, means):
        for g in range(3):
            np.testing.assert_allclose(p[g].detach().numpy(), m.numpy(), atol=1e-6)
    assert model_discrepancy(bank) == pytest.approx(0.0, abs=1e-12)


def test_configurations_cover_sync_local_and_groups():
    cfg = driver.configurations([4, 8], [2, 3], [4])
    assert (4, 1, 1) in cfg and (4, 4, 4) in cfg and (8, 2, 4) in cfg and (8, 8, 4) in cfg
    assert not any(g == 3 for _, g, _ in cfg), "G must divide P"


def test_comm_model_limits():
    free = Network(alpha=0.0, beta=0.0)
    assert driver.comm_per_iteration(1e6, 32, 2, 4, free) == 0.0
    net = Network()
    # sharded averaging never moves more bytes per process than a flat allreduce once groups have 2+ members
    for g, s in [(2, 2), (2, 16), (4, 8), (16, 2)]:
        assert sharded_averaging_cost(1e6, g, s, net).bytes_per_process <= flat_averaging_cost(1e6, g * s, net).bytes_per_process
    # with one member per group the sharded scheme is a G-way allreduce, as flat
    assert sharded_averaging_cost(1e6, 8, 1, net).bytes_per_process == pytest.approx(
        flat_averaging_cost(1e6, 8, net).bytes_per_process)


def test_global_shuffle_plan_covers_each_epoch_once():
    plan = driver.global_shuffle_plan(100, Topology(num_groups=2, group_size=2), 5, epochs=2, seed=0)
    assert plan.shape == (10, 2, 2, 5)
    for e in range(2):
        ids = plan[5 * e:5 * (e + 1)].ravel()
        assert len(np.unique(ids)) == 100


def test_group_of_one_reports_no_discrepancy_and_claims_have_all_keys():
    runs = driver.sweep(SETUP, [4], [2], [2], [0])
    assert {r.kind for r in runs} == {"sync", "hierarchical", "local"}
    assert next(r for r in runs if r.groups == 1).discrepancy == 0.0
    check = driver.GlooCheck(max_abs_param_diff=0.0, averaging_bytes_per_rank=0)
    vals = driver.claims(runs, 2, 2, Network(), check)
    assert set(vals) == {"localsgd_degrades", "hier_closer", "hier_vs_sync", "discrepancy_ranks",
                         "averaging_bytes_saving", "comm_time_saving", "gloo_matches_simulator"}
