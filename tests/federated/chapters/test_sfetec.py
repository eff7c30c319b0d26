"""The SFETEC chapter driver: parameter checks, equal tuning on validation, the claims and their determinism."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from repro.federated.chapters import sfetec as driver
from repro.federated.tuning import Choice
from repro.params import ParameterError

TINY = driver.Params(edges=2, clients_per_edge=2, samples_per_client=20, alpha=0.5, hidden=(8, 8), steps=1, rounds=2,
                     batch_size=8, lrs=(0.05, 0.3), validation_share=0.2, tuning_seed=9, cloud_every=1, share_bases=True,
                     client_gflops=1.0, server_speedup=20.0, wan_mbps=1.0, edge_mbps=1.0, backbone_mbps=10.0,
                     bandwidth_ratios=(0.5, 2.0), seeds=(0, 1), workers=1, device="cpu", eval_every=1)


def known_results(up_sfetec: tuple[float, float] = (25.0, 25.0)) -> driver.Results:
    rows = []
    for s in (0, 1):
        for m, acc, up, sec in (("fedavg", 90.0, 100.0, 4.0), ("hierfavg", 89.0, 100.0, 3.0),
                                ("splitfed", 90.0, 40.0, 10.0), ("sfetec", 88.5, up_sfetec[s], 5.0)):
            rows.append({"method": m, "setting": 0.1, "seed": s, "accuracy": acc + s, "budget_accuracy": acc + s,
                         "validation_accuracy": acc, "client_up": up, "client_down": up, "cloud": 0.0, "seconds": sec})
    choices = tuple(Choice(method=m, value=0.1, score=0.0, grid=(0.1,)) for m in driver.METHODS)
    return driver.Results(final=pd.DataFrame(rows), curves=pd.DataFrame(), choices=choices, tuning=pd.DataFrame(),
                          sensitivity=pd.DataFrame(), trivial=10.0, model_scalars=100)


def test_claims_pair_arms_by_seed_and_record_the_deterministic_savings_once():
    c = driver.claims(known_results())
    gap = c["acc_gap_vs_fedavg"]
    assert list(gap.values) == [1.5, 1.5] and list(gap.arms["sfetec"]) == [88.5, 89.5] and gap.trivial == 10.0
    assert c["uplink_saving_vs_fedavg"] == [75.0]
    assert c["time_saving_vs_splitfed"] == [50.0]


def test_a_saving_that_differs_between_seeds_is_refused():
    with pytest.raises(ValueError, match="differs between seeds"):
        driver.claims(known_results(up_sfetec=(25.0, 30.0)))


def test_every_method_is_tuned_on_validation_and_never_on_test(shuffled_test_labels):
    choices, runs = driver.tune(TINY)
    assert {c.method for c in choices} == set(driver.METHODS)
    assert sorted(runs.groupby("method").setting.nunique().unique()) == [2]  # one grid, one size, for every method
    shuffled_test_labels()
    again, rerun = driver.tune(TINY)
    assert again == choices
    assert rerun.validation_accuracy.tolist() == runs.validation_accuracy.tolist()
    assert rerun.budget_accuracy.tolist() != runs.budget_accuracy.tolist()  # the test labels did change


@pytest.mark.parametrize(("named", "change"), [
    ('samples_per_client', dict(samples_per_client=400)),
    ('tuning_seed', dict(tuning_seed=1)),
    ('cloud_every', dict(cloud_every=3)),
])
def test_every_impossible_combination_is_refused_naming_its_parameters(named, change):
    TINY.checks()  # the base case passes
    with pytest.raises(ParameterError, match=named):
        dataclasses.replace(TINY, **change).checks()
