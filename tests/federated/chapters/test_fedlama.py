"""The FedLAMA chapter driver: equal total local steps, typed run records, worker-independent sweeps."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters.fedlama import FedLamaRun, claims, run_strategy, sweep
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=12, alpha=0.3, hidden=(32, 16))


def test_same_total_steps_for_long_interval_baseline():
    sgd = LocalSGD(batch_size=16, lr=0.05, momentum=0.0)
    _, s_long = run_strategy(
        FedLamaRun(method="fedavg_long", phi=2, seed=0, spec=SPEC, sgd=sgd, tau=3, rounds=4, active_clients=3, eval_every=2)
    )
    _, s_avg = run_strategy(
        FedLamaRun(method="fedavg", phi=1, seed=0, spec=SPEC, sgd=sgd, tau=3, rounds=4, active_clients=3, eval_every=2)
    )
    assert s_long.local["steps"] == 2 * s_avg.local["steps"]  # phi*tau steps per round
    assert s_long.comm.total * 2 == s_avg.comm.total  # half the rounds, full model each time
    with pytest.raises(ValueError, match="multiple of phi"):
        FedLamaRun(method="fedlama", phi=3, seed=0, spec=SPEC, sgd=sgd, tau=3, rounds=4, active_clients=3, eval_every=2)


def test_sweep_results_do_not_depend_on_worker_processes():
    spec = TaskSpec(dataset="digits", num_clients=6, alpha=0.5, hidden=(16,))
    args = dict(
        sgd=LocalSGD(batch_size=16, lr=0.05, momentum=0.0),
        tau=2,
        phis=[2],
        rounds=4,
        active_clients=3,
        seeds=[0, 1],
        eval_every=2,
    )
    f1, c1, t1 = sweep(spec, workers=1, **args)
    f2, c2, t2 = sweep(spec, workers=2, **args)
    assert f1.equals(f2) and c1.equals(c2) and t1 == t2


def test_communication_counts_only_where_accuracy_holds():
    rows = []
    for seed, lama_acc in ((0, 89.5), (1, 85.0)):  # seed 1 drops 5 points below FedAvg(tau')
        rows += [
            {"method": "fedavg", "phi": 1, "seed": seed, "accuracy": 90.0, "comm": 1000},
            {"method": "fedavg_long", "phi": 4, "seed": seed, "accuracy": 80.0, "comm": 250},
            {"method": "fedlama", "phi": 4, "seed": seed, "accuracy": lama_acc, "comm": 400},
        ]
    c = claims(pd.DataFrame(rows), 4)
    assert c["comm_reduction_vs_fedavg_tau"] == [60.0, 60.0]
    assert c["comm_saved_within_margin"] == [60.0, 0.0]
    assert c["acc_drop_vs_fedavg_tau"] == [0.5, 5.0]
