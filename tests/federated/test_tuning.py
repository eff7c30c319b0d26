"""Fair tuning: the best mean over seeds is kept per method and condition, unequal budgets are refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.federated.engine import initial_arrays
from repro.federated.task import TaskSpec, load_task_data
from repro.federated.tuning import Choice, best_settings, chosen, grid_end_note, held_out, keep_best, validation_accuracy

NAN = float("nan")


def _frame(prox=((0.1, (70.0, 90.0)), (1.0, (82.0, 81.0))), dyn=((0.01, (75.0, 75.0)), (0.1, (79.0, 80.0)))):
    rows = [{"method": "fedavg", "setting": NAN, "alpha": 0.1, "seed": s, "val": 80.0} for s in (0, 1)]
    for method, grid in (("fedprox", prox), ("feddyn", dyn)):
        for value, per_seed in grid:
            rows += [{"method": method, "setting": value, "alpha": 0.1, "seed": s, "val": v}
                     for s, v in enumerate(per_seed)]
    return pd.DataFrame(rows)


def test_the_best_mean_over_seeds_wins_not_the_best_single_seed():
    # FedProx at mu = 0.1 has the best single seed (90) but the worse mean (80 < 81.5)
    choices = best_settings(_frame(), "val")
    assert chosen(choices) == {"feddyn": 0.1, "fedprox": 1.0}
    prox = next(c for c in choices if c.method == "fedprox")
    assert prox.score == pytest.approx(81.5) and prox.grid == (0.1, 1.0)


def test_a_choice_at_an_end_of_its_grid_is_named():
    grid = (0.1, 0.2, 0.4)
    low, mid, high = (Choice(method="m", value=v, score=0.0, grid=grid) for v in grid)
    assert (low.grid_end, mid.grid_end, high.grid_end) == ("lowest", "", "highest")
    assert Choice(method="m", value=0.1, score=0.0, grid=(0.1,)).grid_end == ""  # a one-value grid tuned nothing
    assert grid_end_note([mid], {"m": "M"}) == ""
    note = grid_end_note([low, Choice(method="n", value=0.4, score=0.0, grid=grid)], {"m": "M"})
    assert "M (lowest, 0.1)" in note and "n (highest, 0.4)" in note


def test_keep_best_drops_the_values_not_chosen_and_keeps_untuned_methods():
    final = _frame()
    kept = keep_best(final, best_settings(final, "val"))
    assert sorted(zip(kept.method, kept.setting.fillna(-1))) == sorted(
        [("fedavg", -1.0)] * 2 + [("fedprox", 1.0)] * 2 + [("feddyn", 0.1)] * 2)


def test_each_condition_is_tuned_on_its_own():
    sparse = _frame()
    dense = _frame(prox=((0.1, (95.0, 95.0)), (1.0, (60.0, 60.0)))).assign(alpha=1.0)
    final = pd.concat([sparse, dense], ignore_index=True)
    choices = best_settings(final, "val", by=("alpha",))
    assert chosen(choices, alpha=0.1)["fedprox"] == 1.0
    assert chosen(choices, alpha=1.0)["fedprox"] == 0.1
    kept = keep_best(final, choices)
    assert set(kept[(kept.alpha == 1.0) & (kept.method == "fedprox")].setting) == {0.1}
    assert set(kept[(kept.alpha == 0.1) & (kept.method == "fedprox")].setting) == {1.0}


def test_unequal_grids_and_missing_seeds_are_refused():
    with pytest.raises(ValueError, match="unequal size"):
        best_settings(_frame(dyn=((0.01, (75.0, 75.0)),)), "val")
    partial = _frame()
    partial = partial[~((partial.method == "fedprox") & (partial.setting == 1.0) & (partial.seed == 1))]
    with pytest.raises(ValueError, match="same seeds"):
        best_settings(partial, "val")
    with pytest.raises(ValueError, match="lacks the columns"):
        best_settings(_frame(), "accuracy")


def test_validation_uses_only_samples_no_client_holds():
    spec = TaskSpec(dataset="digits", num_clients=4, scheme="cluster_skew", alpha=0.5, hidden=(8,),
                    cluster_sizes=(2, 2), samples_per_client=40)
    ds, parts = load_task_data(spec)
    idx = held_out(spec)
    assert len(idx) == len(ds.y_train) - len(np.unique(np.concatenate(parts)))
    assert not np.isin(idx, np.concatenate(parts)).any()
    acc = validation_accuracy(spec, initial_arrays(spec, seed=0))
    assert 0.0 <= acc <= 30.0  # an untrained 10-class model is near chance
    with pytest.raises(ValueError, match="no training sample unused"):
        held_out(TaskSpec(dataset="digits", num_clients=4, scheme="iid", hidden=(8,)))


def test_a_failed_value_loses_the_tuning_and_is_reported():
    # FedProx at mu = 0.1 has the best mean but failed (diverged) on seed 1; it must not be chosen
    frame = _frame(prox=((0.1, (95.0, 99.0)), (1.0, (82.0, 81.0))))
    frame["diverged"] = (frame.method == "fedprox") & (frame.setting == 0.1) & (frame.seed == 1)
    frame.loc[frame.diverged, "val"] = NAN  # a diverged run may leave no usable metric
    choices = best_settings(frame, "val", failed="diverged")
    prox = next(c for c in choices if c.method == "fedprox")
    assert prox.value == 1.0 and prox.failed == (0.1,) and prox.grid == (0.1, 1.0)
    assert next(c for c in choices if c.method == "feddyn").failed == ()
    # without the failed column named, the diverged value would win on its surviving seed
    assert chosen(best_settings(frame, "val"))["fedprox"] == 0.1
    frame["diverged"] = frame.method == "fedprox"
    with pytest.raises(ValueError, match="every value of its grid failed"):
        best_settings(frame, "val", failed="diverged")
    with pytest.raises(ValueError, match="lacks the columns"):
        best_settings(frame.drop(columns="diverged"), "val", failed="diverged")


def test_validation_share_holds_out_a_stratified_set_no_client_holds():
    spec = TaskSpec(dataset="digits", num_clients=5, scheme="dirichlet", alpha=0.5, hidden=(8,), validation_share=0.2)
    ds, parts = load_task_data(spec)
    idx = held_out(spec)
    dealt = np.concatenate(parts)
    assert len(idx) + len(dealt) == len(ds.y_train) and not np.isin(idx, dealt).any()
    assert abs(len(idx) - 0.2 * len(ds.y_train)) <= 1
    share = np.bincount(ds.y_train[idx], minlength=ds.num_classes) / np.bincount(ds.y_train, minlength=ds.num_classes)
    assert np.allclose(share, 0.2, atol=0.05)  # every class held out in proportion
    with pytest.raises(ValueError, match="validation_share"):
        load_task_data(TaskSpec(dataset="digits", num_clients=5, hidden=(8,), validation_share=1.0))
