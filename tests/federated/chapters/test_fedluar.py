"""The FedLUAR chapter driver: parameter checks, claims and evidence from a known frame."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters import fedluar
from repro.params import ParameterError

BASE = dict(dataset="digits", n_train=400, num_clients=8, active_clients=4, alpha=0.5, hidden=(16, 8), tau=2,
            rounds=2, batch_size=8, lr=0.1, momentum=0.0, deltas=(1, 2), delta=2, seeds=(0, 1), eval_every=1,
            engine="inprocess", device="cpu", workers=1)


def _results(final: pd.DataFrame, delta: int = 2) -> fedluar.Results:
    return fedluar.Results(final=final, curves=pd.DataFrame(), recycled={}, delta=delta, trivial=12.0, sizes={})


def test_claims_from_a_known_frame():
    rows = []
    for seed in (0, 1):
        rows += [{"method": "fedavg", "delta": 0, "seed": seed, "accuracy": 90.0 + seed, "uplink": 1.0},
                 {"method": "fedluar", "delta": 2, "seed": seed, "accuracy": 89.0, "uplink": 0.25},
                 {"method": "drop", "delta": 2, "seed": seed, "accuracy": 80.0, "uplink": 0.3},
                 {"method": "topk", "delta": 2, "seed": seed, "accuracy": 85.0, "uplink": 0.25}]
    c = fedluar.claims(_results(pd.DataFrame(rows)))
    # seed 1 loses 2 points, more than the registry's 1-point margin: its uplink counts as FedAvg's
    assert fedluar.accuracy_margin() == 1.0
    assert {k: list(v.values) for k, v in c.items()} == {
        "uplink_cost_pct": [25.0, 100.0], "acc_drop_vs_fedavg": [1.0, 2.0],
        "acc_gain_vs_drop": [9.0, 9.0], "acc_gain_vs_topk": [4.0, 4.0]}
    # every claim carries the arms it compares, per seed, and the task's trivial level
    assert c["acc_gain_vs_drop"].arms == {"fedluar": [89.0, 89.0], "drop": [80.0, 80.0]}
    assert all(v.trivial == 12.0 for v in c.values())
    # the uplink claim moves with the margin it is computed at
    assert fedluar.uplink_within_margin(_results(pd.DataFrame(rows)), 2.0) == [25.0, 25.0]


@pytest.mark.parametrize("change, names", [
    ({"delta": 3}, "'delta', 'deltas'"),
    ({"active_clients": 9}, "'active_clients', 'num_clients'"),
    ({"deltas": (1, 4), "delta": 4}, "'deltas', 'hidden'"),
    ({"num_clients": 300, "active_clients": 4}, "'dataset', 'n_train', 'num_clients'"),
])
def test_impossible_combinations_are_refused_by_name(change, names):
    fedluar.Params(**BASE).checks()
    with pytest.raises(ParameterError, match=names):
        fedluar.Params(**{**BASE, **change}).checks()


def test_a_tiny_run_gives_every_method_and_seed_one_row():
    results = fedluar.run(fedluar.Params(**BASE))
    assert len(results.final) == 2 * (1 + 2 + 3)  # FedAvg, FedLUAR at each delta, drop, uniform, top-k
    assert set(results.curves.columns) == {"method", "delta", "seed", "round", "accuracy", "uplink"}
    assert set(fedluar.claims(results)) == {c.id for c in fedluar.load_registry().get("fedluar").claims}
