"""The CADIS chapter driver: claims from a known frame (FedProx tuned on validation), checks, and a tiny run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.federated.chapters import cluster_skew_kd as driver
from repro.federated.chapters.cluster_skew_kd import Params, Results, choices, claims
from repro.params import ParameterError

NAN = float("nan")
BASE = dict(dataset="digits", cluster_sizes=(3, 2), samples_per_client=20, alpha=0.3, active_clients=5, hidden=(8,),
            tau=2, rounds=2, batch_size=8, lr=0.1, mus=(1.0, 3.0), kd_mu=1.0, threshold=0.6, threshold_growth=False,
            methods=("fedavg", "fedprox", "cadis"), seeds=(0, 1), eval_every=1, engine="inprocess", device="cpu",
            workers=1)


def _frame(methods: tuple[str, ...]) -> pd.DataFrame:
    # (setting, test accuracy, validation accuracy); FedProx's mu = 0.3 wins on validation, not on test
    runs = {"fedavg": [(NAN, 60.0, 50.0)], "fedprox": [(0.3, 61.0, 55.0), (1.0, 64.0, 52.0)],
            "cadis": [(NAN, 66.0, 57.0)], "kd": [(NAN, 62.0, 51.0)]}
    return pd.DataFrame([{"method": m, "setting": mu, "seed": s, "accuracy": 0.0, "budget_accuracy": acc + s,
                          "client_acc_std": 1.0, "validation_accuracy": val,
                          "ari": 0.75 if m == "cadis" else NAN}
                         for m in methods for mu, acc, val in runs[m] for s in (0, 1)])


def _results(final: pd.DataFrame) -> Results:
    return Results(final=final, curves=pd.DataFrame(), tuned=choices(final), similarity={},
                   planted=np.array([0, 0, 1]), trivial=11.0, threshold=0.7)


def test_claims_from_a_known_frame():
    c = claims(_results(_frame(("fedavg", "fedprox", "cadis", "kd"))))
    assert {k: list(getattr(v, "values", v)) for k, v in c.items()} == {
        "acc_gain_vs_fedavg": [6.0, 6.0], "acc_gain_vs_fedprox": [5.0, 5.0], "cluster_ari": [0.75, 0.75]}
    assert c["acc_gain_vs_fedprox"].arms == {"cadis": [66.0, 67.0], "fedprox": [61.0, 62.0]}  # mu = 0.3's


def test_claims_name_the_missing_methods():
    with pytest.raises(ValueError, match="fedprox"):
        claims(_results(_frame(("fedavg", "cadis"))))


@pytest.mark.parametrize("change, names", [
    ({"active_clients": 6}, "'active_clients', 'cluster_sizes'"),
    ({"methods": ("fedavg", "cadis")}, "'methods'"),
    ({"mus": (0.1, 1.0), "lr": 0.05, "tau": 10}, "'mus', 'lr', 'tau'"),
    ({"cluster_sizes": (60, 20)}, "'cluster_sizes', 'samples_per_client', 'dataset'"),
])
def test_impossible_combinations_are_refused_by_name(change, names):
    Params(**BASE).checks()
    with pytest.raises(ParameterError, match=names):
        Params(**{**BASE, **change}).checks()


def test_a_tiny_run_records_cadis_similarity_and_reads_the_ari_at_any_threshold():
    results = driver.run(Params(**BASE))
    assert len(results.final) == 2 * (1 + 2 + 1) and set(results.similarity) == {0, 1}
    assert all(s.shape == (5, 5) for s in results.similarity.values())
    assert len(driver.ari_at(results, 0.5)) == 2
    assert set(claims(results)) == {"acc_gain_vs_fedavg", "acc_gain_vs_fedprox", "cluster_ari"}
