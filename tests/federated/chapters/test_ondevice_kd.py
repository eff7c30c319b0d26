"""The on-device KD chapter driver: claims from a known frame, each method at its own best learning rate."""

from __future__ import annotations

import pandas as pd
import pytest

from repro.federated.chapters.ondevice_kd import METHODS, KdRun, claims, client_tiers
from repro.federated.task import TaskSpec


def frame() -> pd.DataFrame:
    acc = {"strong_only": (60.0, 70.0), "aux_all": (85.0, 80.0), "feddf": (84.0, 86.0), "kd_only": (70.0, 75.0),
           "ondevice_kd": (88.0, 83.0)}
    return pd.DataFrame([{"method": m, "seed": s, "setting": lr, "accuracy": 0.0,
                          "budget_accuracy": acc[m][i] + s, "weak_large_scalars": 0, "large_scalars": 1}
                         for m in METHODS for s in (0, 1) for i, lr in enumerate((0.05, 0.1))])


def test_claims_compare_each_method_at_its_best_learning_rate():
    assert claims(frame()) == {"gain_vs_strong_only": [18.0, 18.0], "gain_vs_aux": [3.0, 3.0],
                               "gain_vs_feddf": [2.0, 2.0]}


def test_unequal_tuning_budgets_are_refused():
    final = frame()
    with pytest.raises(ValueError, match="same budget"):
        claims(final[~((final.method == "feddf") & (final.setting == 0.1))])


def test_tiers_follow_the_share_and_the_run_rejects_unknown_methods():
    spec = TaskSpec(dataset="digits", num_clients=40, hidden=(16,), n_train=400)
    assert sum(t.name == "strong" for t in client_tiers(spec, 0.25, seed=3)) == 10
    with pytest.raises(ValueError, match="method"):
        KdRun("fedavg", 0, 0.1, spec, (8,), 0.25, 0.2, 4, 1, 1, 8, 0.9, 3.0, 0.5, 1, 10, 1, 1)
