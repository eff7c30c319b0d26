"""The SAFA chapter driver: claims from a known frame, with the baselines tuned over their grids."""

from __future__ import annotations

import pandas as pd

from repro.federated.chapters.safa import choices
from repro.federated.chapters.safa import claims as safa_claims
from repro.federated.tuning import chosen, keep_best
from repro.registry import load_registry

NAN = float("nan")


def _frame() -> pd.DataFrame:
    rows = []
    for seed in (0, 1):
        for m, setting, acc in (("fedavg", NAN, 80.0), ("fedprox", 0.1, 80.5), ("fedprox", 1.0, 83.0),
                                ("feddyn", 0.01, 82.0), ("feddyn", 0.1, 79.0), ("scaffold", NAN, 84.5),
                                ("feddc", NAN, 84.0), ("safa", NAN, 86.0 + seed)):
            rows.append({"method": m, "setting": setting, "alpha": 0.1, "seed": seed, "accuracy": 0.0,
                         "budget_accuracy": acc})
        rows.append({"method": "safa", "setting": NAN, "alpha": 1.0, "seed": seed, "accuracy": 0.0,
                     "budget_accuracy": 0.0})
    return pd.DataFrame(rows)


def test_baselines_are_tuned_and_the_best_one_is_the_comparison():
    final = _frame()
    assert chosen(choices(final), alpha=0.1) == {"fedprox": 1.0, "feddyn": 0.01}
    kept = keep_best(final[final.alpha == 0.1], choices(final))
    assert sorted(kept[kept.seed == 0].method) == sorted(["fedavg", "fedprox", "feddyn", "scaffold", "feddc", "safa"])
    c = safa_claims(final, 0.1)
    assert c == {"acc_gain_vs_fedavg": [6.0, 7.0], "acc_gain_vs_best_baseline": [1.5, 2.5],
                 "acc_gain_vs_feddc": [2.0, 3.0], "fedprox_gain_vs_fedavg": [3.0, 3.0]}


def test_an_untuned_weak_fedprox_no_longer_passes_the_fedprox_claim():
    # with mu tuned, FedProx's best setting is compared, not the weakest one
    final = _frame()
    assert safa_claims(final, 0.1)["fedprox_gain_vs_fedavg"] != [0.5, 0.5]


def test_the_registry_refuses_a_mu_grid_that_makes_the_fedprox_claim_true_by_construction():
    (check,) = [c for c in load_registry().get("safa").checks if "lr" in c.params]
    assert check.holds({"mus": [0.3, 1.0], "lr": 0.05, "tau": 10})
    assert not check.holds({"mus": [0.1, 1.0], "lr": 0.05, "tau": 10})  # the grid of the earlier cpu profile
