"""The on-device KD chapter driver: parameter checks, tuning on validation, the claims with their arms."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from repro.federated.chapters import ondevice_kd as driver
from repro.federated.task import TaskSpec
from repro.federated.tuning import Choice
from repro.params import ParameterError

TINY = driver.Params(dataset="digits", n_train=400, validation_share=0.2, num_clients=8, active_clients=4, alpha=0.5,
                     hidden=(16,), aux_hidden=(8,), strong_share=0.25, labelled_share=0.3, steps=2, rounds=2,
                     batch_size=8, lrs=(0.05, 0.2), momentum=0.9, temperature=3.0, kd_final=0.5, kd_rampup=1,
                     pool_size=40, server_steps=2, memory_batch=8, tuning_seed=9, seeds=(0,), workers=1, device="cpu",
                     eval_every=1)


def known_results() -> driver.Results:
    acc = {"strong_only": 70.0, "aux_all": 85.0, "feddf": 86.0, "kd_only": 75.0, "ondevice_kd": 88.0}
    final = pd.DataFrame([{"method": m, "seed": s, "setting": 0.1, "accuracy": 0.0, "budget_accuracy": acc[m] + s,
                           "validation_accuracy": acc[m], "weak_large_scalars": 0, "large_scalars": 1}
                          for m in driver.METHODS for s in (0, 1)])
    choices = tuple(Choice(method=m, value=0.1, score=0.0, grid=(0.1,)) for m in driver.METHODS)
    return driver.Results(final=final, curves=pd.DataFrame(), choices=choices, tuning=pd.DataFrame(),
                          memory=pd.DataFrame(), trivial=10.0, strong_clients=2)


def test_claims_pair_the_kd_model_with_each_baseline_by_seed():
    c = driver.claims(known_results())
    assert list(c["gain_vs_strong_only"].values) == [18.0, 18.0] and list(c["gain_vs_aux"].values) == [3.0, 3.0]
    assert list(c["gain_vs_feddf"].values) == [2.0, 2.0]
    assert list(c["gain_vs_feddf"].arms["feddf"]) == [86.0, 87.0] and c["gain_vs_feddf"].trivial == 10.0


def test_every_method_is_tuned_on_validation_and_never_on_test(shuffled_test_labels):
    choices, runs = driver.tune(TINY)
    assert {c.method for c in choices} == set(driver.METHODS) and {len(c.grid) for c in choices} == {2}
    shuffled_test_labels()
    again, rerun = driver.tune(TINY)
    assert again == choices
    assert rerun.validation_accuracy.tolist() == runs.validation_accuracy.tolist()
    assert rerun.budget_accuracy.tolist() != runs.budget_accuracy.tolist()  # the test labels did change


def test_tiers_follow_the_share_and_the_run_rejects_unknown_methods():
    spec = TaskSpec(dataset="digits", num_clients=40, hidden=(16,), n_train=400)
    assert sum(t.name == "strong" for t in driver.client_tiers(spec, 0.25, seed=3)) == 10
    with pytest.raises(ValueError, match="method"):
        TINY.job("fedavg", 0.1, 0)


@pytest.mark.parametrize(("named", "change"), [
    ('labelled_share', dict(labelled_share=1.0)),
    ('strong_share', dict(strong_share=0.05)),
    ('pool_size', dict(pool_size=5000)),
    ('tuning_seed', dict(tuning_seed=0)),
    ('active_clients', dict(active_clients=9)),
    ('num_clients', dict(n_train=100, num_clients=60, active_clients=4)),
])
def test_every_impossible_combination_is_refused_naming_its_parameters(named, change):
    TINY.checks()  # the base case passes
    with pytest.raises(ParameterError, match=named):
        dataclasses.replace(TINY, **change).checks()
