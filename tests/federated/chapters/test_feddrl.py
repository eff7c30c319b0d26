"""The FedDRL chapter driver: claims are per-seed differences of the right columns."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters.feddrl import FedDrlRun, claims
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec


def test_claims_from_a_known_frame():
    rows = [{"method": m, "seed": s, "accuracy": 0.0, "budget_accuracy": acc + s, "client_acc_std": sd}
            for s in (0, 1) for m, acc, sd in (("fedavg", 70.0, 9.0), ("fedprox", 71.0, 8.0), ("feddrl", 73.5, 6.5))]
    assert claims(pd.DataFrame(rows)) == {"acc_gain_vs_fedavg": [3.5, 3.5], "acc_gain_vs_fedprox": [2.5, 2.5],
                                          "client_std_change_vs_fedavg": [-2.5, -2.5]}


def test_run_record_names_the_method_it_rejects():
    spec = TaskSpec(dataset="digits", num_clients=3, scheme="cluster_skew", cluster_sizes=(2, 1), samples_per_client=20)
    with pytest.raises(ValueError, match="method"):
        FedDrlRun("fedsgd", spec, LocalSGD(), tau=1, rounds=1, seed=0)
