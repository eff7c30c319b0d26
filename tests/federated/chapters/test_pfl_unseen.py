"""The pfl-unseen driver: the federation's split, groups and draws, sealed unseen clients, tuning on validation, claims."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from repro.federated.chapters import pfl_unseen as driver
from repro.federated.personal import LabelAccessError
from repro.federated.tuning import Choice
from repro.params import ParameterError

TINY = driver.Params(num_clients=12, unseen=4, groups=3, alpha=0.5, body_width=16, descriptor=4, hyper_hidden=8,
                     test_per_client=20, validation_share=0.2, active_clients=2, steps=1, head_steps=1,
                     finetune_share=0.5, finetune_steps=3, batch_size=8, lrs=(0.05, 0.1), momentum=0.0, rounds=2,
                     tune_seed=7, seeds=(0,), workers=1, device="cpu", eval_every=1)
FED = TINY.federation()


def test_held_out_group_has_only_unseen_clients():
    seen, unseen = FED.split()
    g = FED.group_of()
    assert (g[seen] < FED.groups - 1).all()
    assert (g[unseen] == FED.groups - 1).sum() == 2 == len(FED.held_out_group())
    inputs, test = driver.sealed(FED, unseen[0])
    with pytest.raises(LabelAccessError):
        _ = inputs.y
    assert len(test.x) == FED.test_per_client


def test_validation_and_test_draws_follow_each_clients_label_mix_from_disjoint_pools():
    for s in driver.client_sets(FED):
        assert set(np.unique(s.y_test)) <= set(np.unique(s.y)) and set(np.unique(s.y_val)) <= set(np.unique(s.y))
        assert len(s.y_val) == len(s.y_test) == FED.test_per_client


def test_tuning_reads_the_seen_validation_draws_never_the_test_draws(shuffled_test_labels):
    choices, runs = driver.tune(TINY)
    assert {c.method for c in choices} == set(driver.TRAINED)
    shuffled_test_labels()
    driver.client_sets.cache_clear()
    again, rerun = driver.tune(TINY)
    driver.client_sets.cache_clear()
    assert again == choices
    assert rerun.seen_validation.tolist() == runs.seen_validation.tolist()
    assert rerun.seen_accuracy.tolist() != runs.seen_accuracy.tolist()  # the test labels did change


def test_fedreps_run_scores_both_ways_of_serving_an_unseen_client():
    records = driver.run_one(TINY.schedule().job("fedrep", 0, FED, 0.1))
    by = {r.method: r for r in records}
    assert set(by) == {"fedrep", "fedrep_ft"}
    assert by["fedrep"].seen_accuracy == by["fedrep_ft"].seen_accuracy  # seen clients keep their own heads
    assert by["fedrep"].unseen_accuracy != by["fedrep_ft"].unseen_accuracy  # unseen ones fine-tune on labels
    assert all(len(r.per_client) == FED.spec.num_clients for r in records)


def test_claims_are_hypernetwork_against_baseline_per_seed_with_both_arms():
    rows = [{"method": m, "seed": s, "setting": 0.1, "seen_accuracy": base + s, "unseen_accuracy": base - s,
             "seen_validation": base}
            for m, base in (("fedavg", 50.0), ("fedavg_em", 55.0), ("fedrep", 60.0), ("fedrep_ft", 75.0),
                            ("hypernet", 70.0)) for s in (0, 1)]
    results = driver.Results(final=pd.DataFrame(rows), clients=pd.DataFrame(), curves=pd.DataFrame(),
                             choices=(Choice(method="fedavg", value=0.1, score=0.0, grid=(0.1,)),), tuning=pd.DataFrame(),
                             trivial_seen=30.0, trivial_unseen=35.0, held_out_group=())
    c = driver.claims(results)
    assert list(c["unseen_gain_vs_fedavg"].values) == [20.0, 20.0] and list(c["seen_gain_vs_fedrep"].values) == [10.0, 10.0]
    assert list(c["unseen_gain_vs_em"].values) == [15.0, 15.0]
    assert list(c["unseen_gap_to_fedrep_finetuned"].values) == [5.0, 5.0]  # FedRep with labels minus the hypernetwork
    assert c["unseen_gain_vs_fedavg"].trivial == 35.0 and c["seen_gain_vs_fedavg"].trivial == 30.0
    assert list(c["seen_gain_vs_fedavg"].arms["fedavg"]) == [50.0, 51.0]


@pytest.mark.parametrize(("named", "change"), [
    ('active_clients', dict(active_clients=9)),
    ('tune_seed', dict(tune_seed=0)),
    ('unseen', dict(unseen=1)),
    ('groups', dict(groups=10)),
    ('num_clients', dict(num_clients=700, unseen=4)),
])
def test_every_impossible_combination_is_refused_naming_its_parameters(named, change):
    TINY.checks()  # the base case passes
    with pytest.raises(ParameterError, match=named):
        dataclasses.replace(TINY, **change).checks()
