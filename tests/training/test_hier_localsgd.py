"""Hierarchical local SGD: averaging, discrepancy, cost model, rate tuning and the chapter driver."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from repro.params import ParameterError, resolve
from repro.registry import load_registry
from repro.training.chapters import hier_localsgd as driver
from repro.training.cost import Network
from repro.training.hier_localsgd import flat_averaging_cost, model_discrepancy, sharded_averaging_cost
from repro.training.simulator import ReplicaBank, SGDConfig, Topology, build_template, make_optimizer, train_step

PARAMS = driver.Params(
    n_samples=1200, n_features=10, n_informative=6, num_classes=3, class_sep=1.5, hidden=(16,), batch_size=8,
    lr_grid=(0.01, 0.2), validation_fraction=0.2, momentum=0.9, epochs=2, worker_counts=(4,), group_counts=(2,),
    taus=(2,), claim_groups=2, claim_tau=2, alpha_us=5.0, bandwidth_gbs=10.0, sweep_alphas_us=(0.0, 5.0),
    check_steps=4, tune_seeds=(7,), seeds=(0, 1), workers=1, device="cpu")
CHAPTER = load_registry().get("hier-localsgd")


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
    params = dataclasses.replace(PARAMS, worker_counts=(4, 8), group_counts=(2, 3), taus=(4,), claim_tau=4)
    cfg = {(c.workers, c.groups, c.tau) for c in driver.configurations(params)}
    assert {(4, 1, 1), (4, 4, 4), (8, 2, 4), (8, 8, 4)} <= cfg
    assert not any(g == 3 for _, g, _ in cfg), "G must divide P"


def test_comm_model_limits():
    free = Network(alpha=0.0, beta=0.0)
    assert driver.comm_per_iteration(1e6, driver.Config(workers=32, groups=2, tau=4), free) == 0.0
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


@pytest.mark.parametrize("group_size", [1, 4, 32])
def test_every_configuration_peaks_at_its_own_grid_rate(group_size):
    """The peak rate is the tuned value for every S (the chapter once scaled one rate by S: 0.02 against 0.64)."""
    lrs = driver.learning_rates(0.1, group_size, steps_per_epoch=10, epochs=3)
    assert lrs.max() == pytest.approx(0.1)
    assert lrs[0] == pytest.approx(0.1 / group_size)
    assert np.all(lrs[10:] == pytest.approx(0.1))


@pytest.mark.parametrize("override,name", [
    ({"n_informative": 50}, "n_informative"),
    ({"check_steps": 20000}, "check_steps"),
    ({"tune_seeds": [0]}, "tune_seeds"),
    ({"claim_groups": 4}, "claim_groups"),
    ({"num_classes": 200, "n_informative": 3}, "num_classes"),
    ({"batch_size": 4096}, "batch_size"),
    ({"lr_grid": [0.1, 0.1]}, "lr_grid"),
])
def test_impossible_combinations_are_refused_before_any_work(override, name):
    with pytest.raises(ParameterError, match=repr(name)):
        resolve(CHAPTER, "smoke", override)


def test_every_configuration_is_tuned_on_the_same_grid_by_validation_accuracy():
    tuning, rates = driver.tune(PARAMS)
    configs = driver.configurations(PARAMS)
    assert set(rates) == set(configs)
    for c in configs:
        tried = [r for r in tuning if r.config == c]
        assert sorted(r.lr for r in tried) == sorted(PARAMS.lr_grid)
        assert {r.seed for r in tried} == set(PARAMS.tune_seeds)
        best = max(tried, key=lambda r: (r.val_accuracy, -r.lr))
        assert rates[c] == best.lr


def test_claims_compare_tuned_configurations_on_the_evaluation_seeds():
    rates = {c: PARAMS.lr_grid[-1] for c in driver.configurations(PARAMS)}
    runs = driver.sweep(PARAMS, rates)
    assert {r.config.kind for r in runs} == {"sync", "hierarchical", "local"}
    assert {r.seed for r in runs} == set(PARAMS.seeds)
    assert next(r for r in runs if r.config.groups == 1).discrepancy == 0.0
    results = driver.Results(params=PARAMS, tuning=(), rates=rates, runs=tuple(runs),
                             check=driver.GlooCheck(max_abs_param_diff=0.0, averaging_bytes_per_rank=0), chance=34.0)
    vals = driver.claims(results)
    assert set(vals) == {c.id for c in CHAPTER.claims}
    gap = vals["localsgd_degrades"]
    sync, local = results.accuracy(driver.Config(workers=4, groups=1, tau=1)), results.accuracy(
        driver.Config(workers=4, groups=4, tau=2))
    assert list(gap.values) == pytest.approx([sync[s] - local[s] for s in PARAMS.seeds])
    assert set(gap.arms) == {"sync", "local"} and gap.trivial == 34.0
    assert len(vals["comm_time_saving"]) == 1 and len(vals["averaging_bytes_saving"]) == 1
