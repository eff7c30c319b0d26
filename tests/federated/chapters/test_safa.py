"""The SAFA chapter driver: claims from a known frame, with the baselines tuned over their grids on validation."""

from __future__ import annotations

import pandas as pd

from repro.federated.chapters.safa import BASELINES, choices, strongest_baseline, sweep
from repro.federated.chapters.safa import claims as safa_claims
from repro.federated.client import LocalSGD
from repro.federated.safa import PeriodRule
from repro.federated.task import TaskSpec
from repro.federated.tuning import chosen, keep_best
from repro.registry import load_registry

NAN = float("nan")


def _frame() -> pd.DataFrame:
    rows = []
    for seed in (0, 1):
        for m, setting, acc, val in (("fedavg", NAN, 80.0, 70.0), ("fedprox", 0.1, 80.5, 75.0),
                                     ("fedprox", 1.0, 83.0, 72.0), ("feddyn", 0.01, 82.0, 74.0),
                                     ("feddyn", 0.1, 79.0, 71.0), ("scaffold", 0.025, 84.5, 76.0),
                                     ("scaffold", 0.05, 85.5, 73.0), ("feddc", NAN, 84.0, 74.0),
                                     ("safa", NAN, 86.0 + seed, 77.0)):
            rows.append({"method": m, "setting": setting, "alpha": 0.1, "seed": seed, "accuracy": 0.0,
                         "budget_accuracy": acc, "validation_accuracy": val})
        rows.append({"method": "safa", "setting": NAN, "alpha": 1.0, "seed": seed, "accuracy": 0.0,
                     "budget_accuracy": 0.0, "validation_accuracy": 0.0})
    return pd.DataFrame(rows)


def test_baselines_are_tuned_and_the_best_one_is_the_comparison():
    final = _frame()
    assert chosen(choices(final), alpha=0.1) == {"fedprox": 0.1, "feddyn": 0.01, "scaffold": 0.025}
    kept = keep_best(final[final.alpha == 0.1], choices(final))
    assert sorted(kept[kept.seed == 0].method) == sorted(["fedavg", "fedprox", "feddyn", "scaffold", "feddc", "safa"])
    c = safa_claims(final, 0.1)
    assert c == {"acc_gain_vs_fedavg": [6.0, 7.0], "acc_gain_vs_best_baseline": [1.5, 2.5],
                 "acc_gain_vs_feddc": [2.0, 3.0], "fedprox_gain_vs_fedavg": [0.5, 0.5]}



def test_the_strongest_baseline_is_the_tuned_one_with_the_best_mean_and_the_claim_compares_against_it():
    final = _frame()
    assert strongest_baseline(final, 0.1) == "scaffold"  # tuned: FedProx 80.5, FedDyn 82.0, SCAFFOLD 84.5
    weak = final.assign(budget_accuracy=final.budget_accuracy.where(final.method != "scaffold", 70.0))
    assert strongest_baseline(weak, 0.1) == "feddyn"
    assert safa_claims(weak, 0.1)["acc_gain_vs_best_baseline"] == [4.0, 5.0]  # SAFA 86, 87 minus FedDyn's 82

def test_the_grids_are_chosen_on_validation_never_on_the_test_accuracy_the_claims_compare():
    final = _frame()
    # on test accuracy FedProx would keep mu = 1 and SCAFFOLD lr = 0.05; on the held-out samples they lose
    assert chosen(choices(final.assign(validation_accuracy=final.budget_accuracy)), alpha=0.1) == {
        "fedprox": 1.0, "feddyn": 0.01, "scaffold": 0.05}
    assert chosen(choices(final), alpha=0.1)["scaffold"] == 0.025


def test_scaffold_reaches_the_comparison_through_the_same_tuning_as_the_other_baselines():
    spec = TaskSpec(dataset="digits", num_clients=12, scheme="sparse_and_scarce", alpha=0.1, usage=1.0, hidden=(8,),
                    validation_share=0.1)
    tables = sweep(spec, LocalSGD(batch_size=8, lr=0.05, momentum=0.0), tau=2, rounds=2, active_clients=3, seeds=[0],
                   lam=0.1, mix=0.95, period=3, mus=[1.0, 3.0], feddyn_alphas=[0.01, 0.1], scaffold_lrs=[0.025, 0.05],
                   eval_every=1, period_rule=PeriodRule(retain=1))
    final = tables.final
    assert sorted(final[final.method == "scaffold"].setting) == [0.025, 0.05]
    picks = {c.method: c for c in choices(final)}
    assert set(picks) == {"fedprox", "feddyn", "scaffold"} and {len(c.grid) for c in picks.values()} == {2}
    for method, c in picks.items():  # each pick is the best on the held-out training samples
        rows = final[final.method == method].set_index("setting")
        assert c.value == rows.validation_accuracy.idxmax() and c.score == rows.validation_accuracy.max()
    assert "scaffold" in BASELINES
    assert set(tables.periods.method) == {"safa", "feddc"} and set(tables.periods["round"]) == {1, 2}


def test_the_registry_refuses_a_mu_grid_that_makes_the_fedprox_claim_true_by_construction():
    (check,) = [c for c in load_registry().get("safa").checks if "mus" in c.params and "tau" in c.params]
    assert check.holds({"mus": [0.3, 1.0], "lr": 0.05, "tau": 10})
    assert not check.holds({"mus": [0.1, 1.0], "lr": 0.05, "tau": 10})  # the grid of the earlier cpu profile


def test_the_registry_makes_scaffold_s_grid_as_large_as_the_others_and_hold_the_shared_lr():
    checks = load_registry().get("safa").checks
    (size,) = [c for c in checks if "scaffold_lrs" in c.params and "mus" in c.params]
    (shared,) = [c for c in checks if c.params == ["scaffold_lrs", "lr"] or tuple(c.params) == ("scaffold_lrs", "lr")]
    assert size.holds({"mus": [1.0, 3.0], "feddyn_alphas": [0.01, 0.1], "scaffold_lrs": [0.025, 0.05]})
    assert not size.holds({"mus": [1.0, 3.0], "feddyn_alphas": [0.01, 0.1], "scaffold_lrs": [0.025, 0.05, 0.1]})
    assert shared.holds({"scaffold_lrs": [0.025, 0.05], "lr": 0.05})
    assert not shared.holds({"scaffold_lrs": [0.025, 0.1], "lr": 0.05})
