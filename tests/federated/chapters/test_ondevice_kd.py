"""The on-device KD chapter driver: claims from a known frame, each method at its own best learning rate."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.federated.chapters.ondevice_kd import METHODS, KdRun, choices, claims, client_tiers, sweep
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec


def frame() -> pd.DataFrame:
    acc = {"strong_only": (60.0, 70.0), "aux_all": (85.0, 80.0), "feddf": (84.0, 86.0), "kd_only": (70.0, 75.0),
           "ondevice_kd": (88.0, 83.0)}
    return pd.DataFrame([{"method": m, "seed": s, "setting": lr, "accuracy": 0.0, "budget_accuracy": acc[m][i] + s,
                          "validation_accuracy": acc[m][i] - 2.0, "weak_large_scalars": 0, "large_scalars": 1}
                         for m in METHODS for s in (0, 1) for i, lr in enumerate((0.05, 0.1))])


def test_claims_compare_each_method_at_its_best_learning_rate():
    assert claims(frame()) == {"gain_vs_strong_only": [18.0, 18.0], "gain_vs_aux": [3.0, 3.0],
                               "gain_vs_feddf": [2.0, 2.0]}


def test_the_learning_rate_is_chosen_on_validation_and_never_on_test():
    final = frame()
    # validation reverses every method's preference; the claims follow validation, not test
    final["validation_accuracy"] = final.groupby("method").validation_accuracy.transform(lambda v: v[::-1].to_numpy())
    assert claims(final) == {"gain_vs_strong_only": [23.0, 23.0], "gain_vs_aux": [3.0, 3.0],
                             "gain_vs_feddf": [-1.0, -1.0]}
    scrambled = final.assign(budget_accuracy=np.random.default_rng(0).permutation(final.budget_accuracy.to_numpy()))
    assert choices(scrambled) == choices(final)


def test_tuning_never_reads_test_labels(shuffled_test_labels):
    spec = TaskSpec(dataset="digits", num_clients=8, hidden=(16,), n_train=400, alpha=0.5, validation_share=0.2)
    base = KdRun(
        method="ondevice_kd",
        spec=spec,
        sgd=LocalSGD(batch_size=8, lr=0.05, momentum=0.9),
        tau=2,
        rounds=2,
        seed=0,
        active_clients=4,
        eval_every=1,
        aux_hidden=(8,),
        strong_share=0.25,
        labelled_share=0.3,
        temperature=3.0,
        kd_final=0.5,
        kd_rampup=1,
        pool_size=40,
        server_steps=2,
    )
    final, _ = sweep(base, [0.05, 0.2], [0])
    shuffled_test_labels()
    again, _ = sweep(base, [0.05, 0.2], [0])
    assert again.validation_accuracy.tolist() == final.validation_accuracy.tolist()
    assert choices(again) == choices(final)
    assert again.budget_accuracy.tolist() != final.budget_accuracy.tolist()  # the test labels did change


def test_unequal_tuning_budgets_are_refused():
    final = frame()
    with pytest.raises(ValueError, match="same budget"):
        claims(final[~((final.method == "feddf") & (final.setting == 0.1))])


def test_tiers_follow_the_share_and_the_run_rejects_unknown_methods():
    spec = TaskSpec(dataset="digits", num_clients=40, hidden=(16,), n_train=400)
    assert sum(t.name == "strong" for t in client_tiers(spec, 0.25, seed=3)) == 10
    with pytest.raises(ValueError, match="method"):
        KdRun(
            method="fedavg",
            spec=spec,
            sgd=LocalSGD(batch_size=8, lr=0.1, momentum=0.9),
            tau=1,
            rounds=1,
            seed=0,
            active_clients=4,
            aux_hidden=(8,),
            strong_share=0.25,
            labelled_share=0.2,
            temperature=3.0,
            kd_final=0.5,
            kd_rampup=1,
            pool_size=10,
            server_steps=1,
        )
