"""The CADIS chapter driver: claims from a known frame, and the methods the claims need."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters.cluster_skew_kd import claims


def _frame(methods: tuple[str, ...]) -> pd.DataFrame:
    acc = {"fedavg": 60.0, "fedprox": 61.0, "cadis": 66.0, "kd": 62.0}
    return pd.DataFrame([{"method": m, "seed": s, "accuracy": 0.0, "budget_accuracy": acc[m] + s,
                          "client_acc_std": 1.0, "ari": 0.75 if m == "cadis" else float("nan")}
                         for m in methods for s in (0, 1)])


def test_claims_from_a_known_frame():
    assert claims(_frame(("fedavg", "fedprox", "cadis", "kd"))) == {
        "acc_gain_vs_fedavg": [6.0, 6.0], "acc_gain_vs_fedprox": [5.0, 5.0], "cluster_ari": [0.75, 0.75]}


def test_claims_name_the_missing_methods():
    with pytest.raises(ValueError, match="fedprox"):
        claims(_frame(("fedavg", "cadis")))
