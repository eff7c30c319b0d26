"""The FedLUAR chapter driver: claims from a known frame."""

from __future__ import annotations

import pandas as pd

from repro.federated.chapters.fedluar import claims as fedluar_claims


def test_claims_from_a_known_frame():
    rows = []
    for seed in (0, 1):
        rows += [{"method": "fedavg", "delta": 0, "seed": seed, "accuracy": 90.0 + seed, "uplink": 1.0},
                 {"method": "fedluar", "delta": 2, "seed": seed, "accuracy": 89.0, "uplink": 0.25},
                 {"method": "drop", "delta": 2, "seed": seed, "accuracy": 80.0, "uplink": 0.3},
                 {"method": "topk", "delta": 2, "seed": seed, "accuracy": 85.0, "uplink": 0.25}]
    c = fedluar_claims(pd.DataFrame(rows), delta=2)
    # seed 1 loses 2 points, more than the 1-point margin: its uplink counts as FedAvg's
    assert c == {"uplink_cost_pct": [25.0, 100.0], "acc_drop_vs_fedavg": [1.0, 2.0],
                 "acc_gain_vs_drop": [9.0, 9.0], "acc_gain_vs_topk": [4.0, 4.0]}
