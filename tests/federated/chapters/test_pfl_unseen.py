"""The pfl-unseen driver: the federation's split and groups, sealed unseen clients, equal tuning, claims."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.federated.chapters import pfl_unseen as driver
from repro.federated.personal import LabelAccessError
from repro.federated.task import TaskSpec

FED = driver.Federation(spec=TaskSpec(dataset="digits", num_clients=12, alpha=0.5, hidden=(16,)), groups=3, unseen=4,
                        test_per_client=20)


def test_held_out_group_has_only_unseen_clients():
    seen, unseen = FED.split()
    g = FED.group_of()
    assert (g[seen] < FED.groups - 1).all()
    assert (g[unseen] == FED.groups - 1).sum() == 2
    inputs, test = driver.sealed(FED, unseen[0])
    with pytest.raises(LabelAccessError):
        _ = inputs.y
    assert len(test.x) == FED.test_per_client


def test_test_draws_follow_each_clients_label_mix():
    sets = driver.client_sets(FED)
    for s in sets:
        assert set(np.unique(s.y_test)) <= set(np.unique(s.y))


def test_tuning_uses_one_grid_for_every_trained_method_and_runs_score_every_client():
    schedule = driver.Schedule(momentum=0.0, batch_size=8, steps=1, head_steps=1, rounds=2, active_clients=2,
                               eval_every=1, descriptor=4, hyper_hidden=8)
    tuned = driver.tune(FED, schedule, tune_seed=7, lrs=[0.05, 0.1])
    assert set(tuned) == set(driver.TRAINED) and set(tuned.values()) <= {0.05, 0.1}
    records = driver.run(schedule.job("fedavg", 0, FED, 0.1))
    assert [r.method for r in records] == ["fedavg", "fedavg_em"]
    assert all(len(r.per_client) == FED.spec.num_clients for r in records)


def test_claims_are_hypernetwork_minus_baseline_per_seed():
    rows = [{"method": m, "seed": s, "seen_accuracy": base + s, "unseen_accuracy": base - s}
            for m, base in (("fedavg", 50.0), ("fedavg_em", 55.0), ("fedrep", 60.0), ("hypernet", 70.0)) for s in (0, 1)]
    c = driver.claims(pd.DataFrame(rows))
    assert c["unseen_gain_vs_fedavg"] == [20.0, 20.0] and c["seen_gain_vs_fedrep"] == [10.0, 10.0]
    assert c["unseen_gain_vs_em"] == [15.0, 15.0]
