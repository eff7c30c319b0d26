"""The FedDRL chapter driver: claims are per-seed differences, FedProx at the mu chosen on validation accuracy."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters.feddrl import FedDrlRun, choices, claims
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec
from repro.federated.tuning import chosen
from repro.registry import load_registry

NAN = float("nan")


def _frame() -> pd.DataFrame:
    # FedProx at mu = 3 has the better test accuracy but the worse validation accuracy: mu = 1 must be kept
    runs = (("fedavg", NAN, 70.0, 9.0, 50.0), ("fedprox", 1.0, 71.0, 8.0, 60.0), ("fedprox", 3.0, 75.0, 7.0, 55.0),
            ("feddrl", NAN, 73.5, 6.5, 58.0))
    return pd.DataFrame([{"method": m, "setting": mu, "seed": s, "accuracy": 0.0, "budget_accuracy": acc + s,
                          "client_acc_std": sd, "validation_accuracy": val} for s in (0, 1) for m, mu, acc, sd, val in runs])


def test_claims_compare_fedprox_at_the_mu_chosen_on_validation():
    final = _frame()
    assert chosen(choices(final)) == {"fedprox": 1.0}
    assert claims(final) == {"acc_gain_vs_fedavg": [3.5, 3.5], "acc_gain_vs_fedprox": [2.5, 2.5],
                             "client_std_change_vs_fedavg": [-2.5, -2.5]}


def test_run_record_names_the_method_it_rejects_and_the_tuned_setting():
    spec = TaskSpec(dataset="digits", num_clients=3, scheme="cluster_skew", cluster_sizes=(2, 1), samples_per_client=20)
    with pytest.raises(ValueError, match="method"):
        FedDrlRun(method="fedsgd", spec=spec, sgd=LocalSGD(), tau=1, rounds=1, seed=0)
    assert FedDrlRun(method="fedprox", spec=spec, sgd=LocalSGD(), tau=1, rounds=1, seed=0, mu=0.3).setting == 0.3
    assert pd.isna(FedDrlRun(method="feddrl", spec=spec, sgd=LocalSGD(), tau=1, rounds=1, seed=0, mu=0.3).setting)


@pytest.mark.parametrize("chapter", ["feddrl", "cluster-skew-kd"])
def test_the_registry_refuses_a_mu_grid_that_leaves_fedprox_fedavg(chapter):
    (check,) = [c for c in load_registry().get(chapter).checks if "mus" in c.params]
    assert check.holds({"mus": [0.3, 1.0, 3.0], "lr": 0.05, "tau": 10})
    assert not check.holds({"mus": [0.1, 1.0], "lr": 0.05, "tau": 10})  # lr * mu * tau = 0.05 for mu = 0.1
