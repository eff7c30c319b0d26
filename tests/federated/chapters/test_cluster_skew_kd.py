"""The CADIS chapter driver: claims from a known frame (FedProx tuned on validation), and the methods they need."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters.cluster_skew_kd import claims

NAN = float("nan")


def _frame(methods: tuple[str, ...]) -> pd.DataFrame:
    # (setting, test accuracy, validation accuracy); FedProx's mu = 0.3 wins on validation, not on test
    runs = {"fedavg": [(NAN, 60.0, 50.0)], "fedprox": [(0.3, 61.0, 55.0), (1.0, 64.0, 52.0)],
            "cadis": [(NAN, 66.0, 57.0)], "kd": [(NAN, 62.0, 51.0)]}
    return pd.DataFrame([{"method": m, "setting": mu, "seed": s, "accuracy": 0.0, "budget_accuracy": acc + s,
                          "client_acc_std": 1.0, "validation_accuracy": val,
                          "ari": 0.75 if m == "cadis" else NAN}
                         for m in methods for mu, acc, val in runs[m] for s in (0, 1)])


def test_claims_from_a_known_frame():
    assert claims(_frame(("fedavg", "fedprox", "cadis", "kd"))) == {
        "acc_gain_vs_fedavg": [6.0, 6.0], "acc_gain_vs_fedprox": [5.0, 5.0], "cluster_ari": [0.75, 0.75]}


def test_claims_name_the_missing_methods():
    with pytest.raises(ValueError, match="fedprox"):
        claims(_frame(("fedavg", "cadis")))
