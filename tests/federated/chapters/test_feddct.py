"""The FedDCT chapter driver: claims from a known frame, both tuning stages, rounds to target, the memory table."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from repro.federated.chapters import feddct as driver
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec
from repro.federated.tuning import Choice
from repro.params import ParameterError

SPEC = TaskSpec(dataset="digits", num_clients=8, scheme="iid", hidden=(64, 64), n_train=400)
TINY = driver.Params(dataset="digits", n_train=300, validation_share=0.2, num_clients=4, scheme="iid", alpha=0.5,
                     hidden=(16, 16), split_factor=2, steps=1, rounds=2, batch_size=8, lrs=(0.05, 0.2), mus=(0.01, 0.5),
                     cot_finals=(0.5, 0.1), cot_warmup=1, gkt_temperature=3.0, gkt_kd_weights=(1.0, 0.3),
                     gkt_server_epochs=1, memory_batch=8, tuning_seed=9, seeds=(0,), workers=1, device="cpu", eval_every=1)
BEST = {"fedavg_large": 80.0, "fedavg_large_long": 85.0, "fedavg_small": 75.0, "fedprox_large": 79.0,
        "splitfed_large": 70.0, "fedgkt": 68.0, "clustered_large": 84.0, "feddct": 86.0}


def known_results() -> driver.Results:
    """Two seeds; FedDCT reaches its accuracy in 8 rounds, every other method in 16."""
    final, curves = [], []
    for m in driver.METHODS:
        for s in (0, 1):
            acc = BEST[m] + s
            final.append({"method": m, "seed": s, "setting": 0.1, "lr": 0.1, "knob": 0.5, "tau": 4, "accuracy": acc,
                          "budget_accuracy": acc, "validation_accuracy": acc - 1.0})
            reach = 8 if m == "feddct" else 16
            curves += [{"method": m, "seed": s, "round": r, "accuracy": acc * min(1.0, r / reach)} for r in range(0, 21, 4)]
    one = tuple(Choice(method=m, value=0.1, score=0.0, grid=(0.1,)) for m in driver.METHODS)
    tuned = driver.Tuned(lr=one, knob=tuple(c for c in one if c.method in driver.KNOBS), runs=pd.DataFrame())
    return driver.Results(final=pd.DataFrame(final), curves=pd.DataFrame(curves), tuned=tuned,
                          memory=driver.per_device_memory(SPEC, 4, 32), trivial=10.0, censor_round=24, rounds=20)


def test_claims_pair_feddct_with_each_baseline_by_seed():
    c = driver.claims(known_results())
    assert list(c["gain_vs_fedavg_large"].values) == [6.0, 6.0] and list(c["gain_vs_fedavg_small"].values) == [11.0, 11.0]
    assert list(c["gain_vs_fedavg_large_equal_steps"].values) == [1.0, 1.0]
    assert list(c["gain_vs_fedprox"].values) == [7.0, 7.0]
    # SplitFed (SFLV1) does FedAvg-large's arithmetic: shown and measured, never scored as a second gain
    assert "gain_vs_splitfed" not in c and driver.splitfed_gap(known_results()) == pytest.approx(10.0)
    assert list(c["gain_vs_fedgkt"].values) == [18.0, 18.0]
    assert list(c["gain_vs_fedgkt"].arms["fedgkt"]) == [68.0, 69.0] and c["gain_vs_fedgkt"].trivial == 10.0
    # FedAvg-large reaches 95% of its best at round 16, FedDCT at round 8: half the rounds saved; the same against
    # the long FedAvg
    assert list(c["rounds_saved_vs_fedavg_large"].values) == [50.0, 50.0]
    assert list(c["rounds_saved_vs_fedavg_large_equal_steps"].values) == [50.0, 50.0]
    assert c["memory_reduction"] == [pytest.approx(driver.device_memory(known_results().memory, "feddct")["large / device"])]


def test_a_run_that_never_reaches_the_target_is_censored():
    curves = known_results().curves
    curves.loc[curves.method == "splitfed_large", "accuracy"] = 10.0
    hit = driver.rounds_to_target(curves, "fedavg_large", censor_round=24)
    split = hit[hit.method == "splitfed_large"]
    assert not split.reached.any() and (split["rounds"] == 24).all()


def test_fedavg_at_equal_steps_takes_s_times_the_local_steps():
    ref = {**TINY.reference(), "lr": 0.1}
    assert driver.job(TINY, "fedavg_large_long", ref, 0).tau == TINY.split_factor * driver.job(TINY, "fedavg_large", ref, 0).tau


def test_both_stages_tune_on_validation_with_equal_grids_and_never_on_test(shuffled_test_labels):
    tuned = driver.tune(TINY)
    assert {c.method for c in tuned.lr} == set(driver.METHODS)
    assert {c.method: c.grid for c in tuned.knob} == {m: tuple(sorted(TINY.knob_grid(m))) for m in driver.KNOBS}
    knob_runs = tuned.runs[tuned.runs.stage == "knob"]
    for m in driver.KNOBS:  # the knob stage runs at the rate the first stage chose
        assert set(knob_runs[knob_runs.method == m].lr) == {dict((c.method, c.value) for c in tuned.lr)[m]}
    shuffled_test_labels()
    again = driver.tune(TINY)
    assert again.lr == tuned.lr and again.knob == tuned.knob
    assert again.runs.budget_accuracy.tolist() != tuned.runs.budget_accuracy.tolist()  # the test labels did change


def test_memory_table_model_matches_torch_and_sub_models_are_smaller():
    memory = driver.per_device_memory(SPEC, 4, 32)
    err = (memory["step memory, torch (kB)"] / memory["step memory, model (kB)"] - 1).abs().set_axis(memory.device)
    split = memory.device.str.startswith("SplitFed")
    assert (err[~split.to_numpy()] < 0.01).all() and err[split.to_numpy()].isna().all()  # the split client is not measured
    assert all(driver.device_memory(memory, m)["large / device"] > 1.0 for m in ("feddct", "splitfed_large", "fedgkt"))


def test_clusters_must_be_whole():
    with pytest.raises(ValueError, match="multiple of split_factor"):
        driver.DctRun(method="feddct", spec=SPEC, sgd=LocalSGD(batch_size=8, lr=0.1), tau=1, rounds=1, seed=0,
                      split_factor=3)


@pytest.mark.parametrize(("named", "change"), [
    ('mus', dict(mus=(0.01, 0.1, 1.0))),
    ('split_factor', dict(split_factor=3)),
    ('tuning_seed', dict(tuning_seed=0)),
    ('num_clients', dict(n_train=100, num_clients=200, split_factor=2)),
    ('eval_every', dict(eval_every=5)),
])
def test_every_impossible_combination_is_refused_naming_its_parameters(named, change):
    TINY.checks()  # the base case passes
    with pytest.raises(ParameterError, match=named):
        dataclasses.replace(TINY, **change).checks()
