"""The SAFA chapter driver: claims from a known frame."""

from __future__ import annotations

import pandas as pd
from repro.federated.chapters.safa import claims as safa_claims


def test_safa_claims_from_a_known_frame():
    rows = []
    for seed in (0, 1):
        for m, acc in (("fedavg", 80.0), ("fedprox", 80.5), ("feddc", 84.0), ("safa", 86.0 + seed)):
            rows.append({"method": m, "alpha": 0.1, "seed": seed, "accuracy": 0.0, "budget_accuracy": acc})
        rows.append({"method": "safa", "alpha": 1.0, "seed": seed, "accuracy": 0.0, "budget_accuracy": 0.0})
    c = safa_claims(pd.DataFrame(rows), 0.1)
    assert c == {"acc_gain_vs_fedavg": [6.0, 7.0], "acc_gain_vs_feddc": [2.0, 3.0],
                 "fedprox_gain_vs_fedavg": [0.5, 0.5]}
