"""The FedDRL chapter driver: claims are per-seed differences, FedProx at the mu chosen on validation accuracy."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters import feddrl
from repro.federated.chapters.feddrl import FedDrlRun, Params, Results, choices, claims
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec
from repro.federated.tuning import chosen
from repro.params import ParameterError

NAN = float("nan")
BASE = dict(dataset="digits", cluster_sizes=(3, 1), samples_per_client=20, alpha=0.5, hidden=(8,), tau=2, rounds=2,
            batch_size=8, lr=0.1, mus=(1.0, 3.0), beta=1.0, sigma=0.1, updates=1, seeds=(0, 1), eval_every=1,
            engine="inprocess", device="cpu", workers=1)


def _frame() -> pd.DataFrame:
    # FedProx at mu = 3 has the better test accuracy but the worse validation accuracy: mu = 1 must be kept
    runs = (("fedavg", NAN, 70.0, 9.0, 50.0), ("fedprox", 1.0, 71.0, 8.0, 60.0), ("fedprox", 3.0, 75.0, 7.0, 55.0),
            ("feddrl", NAN, 73.5, 6.5, 58.0))
    return pd.DataFrame([{"method": m, "setting": mu, "seed": s, "accuracy": 0.0, "budget_accuracy": acc + s,
                          "client_acc_std": sd, "validation_accuracy": val} for s in (0, 1) for m, mu, acc, sd, val in runs])


def test_claims_compare_fedprox_at_the_mu_chosen_on_validation():
    final = _frame()
    results = Results(final=final, curves=pd.DataFrame(), weights=pd.DataFrame(), tuned=choices(final),
                      cluster_sizes=(3, 1), trivial=11.0)
    assert chosen(choices(final)) == {"fedprox": 1.0} and results.best_mu == 1.0
    c = claims(results)
    assert {k: list(v.values) for k, v in c.items()} == {
        "acc_gain_vs_fedavg": [3.5, 3.5], "acc_gain_vs_fedprox": [2.5, 2.5], "client_std_change_vs_fedavg": [-2.5, -2.5]}
    assert c["acc_gain_vs_fedprox"].arms == {"feddrl": [73.5, 74.5], "fedprox": [71.0, 72.0]}  # mu = 1's, not 3's


def test_run_record_names_the_method_it_rejects_and_the_tuned_setting():
    spec = TaskSpec(dataset="digits", num_clients=3, scheme="cluster_skew", cluster_sizes=(2, 1), samples_per_client=20)
    with pytest.raises(ValueError, match="method"):
        FedDrlRun(method="fedsgd", spec=spec, sgd=LocalSGD(), tau=1, rounds=1, seed=0)
    assert FedDrlRun(method="fedprox", spec=spec, sgd=LocalSGD(), tau=1, rounds=1, seed=0, mu=0.3).setting == 0.3
    assert pd.isna(FedDrlRun(method="feddrl", spec=spec, sgd=LocalSGD(), tau=1, rounds=1, seed=0, mu=0.3).setting)


@pytest.mark.parametrize("change, names", [
    ({"mus": (0.1, 1.0), "lr": 0.05, "tau": 10}, "'mus', 'lr', 'tau'"),  # lr * mu * tau = 0.05 for mu = 0.1
    ({"cluster_sizes": (60, 20), "samples_per_client": 20}, "'cluster_sizes', 'samples_per_client', 'dataset'"),
])
def test_impossible_combinations_are_refused_by_name(change, names):
    Params(**BASE).checks()
    with pytest.raises(ParameterError, match=names):
        Params(**{**BASE, **change}).checks()


def test_a_tiny_run_tunes_fedprox_and_records_the_agents_weights():
    results = feddrl.run(Params(**BASE))
    assert len(results.final) == 2 * (1 + 2 + 1) and results.best_mu in (1.0, 3.0)
    assert set(results.weights.cluster) == {0, 1} and set(results.weights.seed) == {0, 1}
    assert set(claims(results)) == {"acc_gain_vs_fedavg", "acc_gain_vs_fedprox", "client_std_change_vs_fedavg"}
