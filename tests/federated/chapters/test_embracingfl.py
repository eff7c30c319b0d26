"""The EmbracingFL chapter driver: parameter checks, every method tuned over one grid on validation, the claims."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from repro.federated.chapters import embracingfl as driver
from repro.federated.tuning import Choice
from repro.params import ParameterError

TINY = driver.Params(dataset="digits", n_train=400, validation_share=0.2, num_clients=6, active_clients=3, alpha=0.5,
                     hidden=(16, 16), init="he", moderate_layers=2, weak_layers=1, moderate_width=0.5, weak_width=0.25,
                     heterofl_scaler=True, heterofl_masked_ce=True, fjord_self_distillation=True, strong_shares=(0.5,),
                     moderate_shares=(0.2,), steps=2, rounds=2, batch_size=16, lrs=(0.05, 0.1), momentum=0.9,
                     tuning_seed=9, seeds=(0,), workers=1, device="cpu", eval_every=1)


def test_tuning_gives_every_method_the_same_grid_and_chooses_on_validation(shuffled_test_labels):
    choices, runs = driver.tune(TINY)
    assert {c.method for c in choices} == set(driver.METHODS)
    assert all(c.grid == (0.05, 0.1) for c in choices)
    assert len(runs) == 2 * len(driver.METHODS) and set(runs.seed) == {9}
    for c in choices:
        scores = runs[runs.method == c.method].set_index("setting").validation_accuracy
        assert scores[c.value] == scores.max()
    shuffled_test_labels()
    again, rerun = driver.tune(TINY)
    assert again == choices and rerun.budget_accuracy.tolist() != runs.budget_accuracy.tolist()


def test_one_rate_tunes_nothing():
    choices, runs = driver.tune(dataclasses.replace(TINY, lrs=(0.1,)))
    assert runs.empty and {c.value for c in choices} == {0.1}


def test_claims_are_read_in_the_weak_heavy_mix_with_both_arms():
    acc = {"all_strong": 90.0, "strong_only": 60.0, "heterofl": 70.0, "fjord": 72.0, "embracingfl": 80.0}
    rows = [{"method": m, "setting": 0.1, "strong_share": 1.0 if m == "all_strong" else share, "seed": s,
             "accuracy": 0.0, "budget_accuracy": acc[m] + s + (5.0 if share == 0.2 else 0.0),
             "validation_accuracy": 0.0, "comm": 1.0}
            for m in driver.METHODS for share in (0.1, 0.2) for s in (0, 1)]
    final = pd.DataFrame(rows).drop_duplicates(subset=["method", "strong_share", "seed"])
    results = driver.Results(final=final, curves=pd.DataFrame(), choices=(Choice(method="fedavg", value=0.1, score=0.0,
                                                                                  grid=(0.1,)),),
                             tuning=pd.DataFrame(), mixes=((0.2, 0.3), (0.1, 0.2)), weak_heavy=(0.1, 0.2),
                             memory=pd.DataFrame(), trivial=10.0)
    c = driver.claims(results)
    assert list(c["gain_vs_heterofl"].values) == [10.0, 10.0] and list(c["gain_vs_strong_only"].values) == [20.0, 20.0]
    assert list(c["gap_to_all_strong"].values) == [10.0, 10.0]  # all-strong FedAvg (shared by the mixes) minus 80, 81
    assert list(c["gap_to_all_strong"].arms["all_strong"]) == [90.0, 91.0]
    assert c["gain_vs_fjord"].trivial == 10.0


@pytest.mark.parametrize(("named", "change"), [
    ('moderate_shares', dict(moderate_shares=(0.6,))),
    ('moderate_shares', dict(moderate_shares=(0.2, 0.3))),
    ('weak_layers', dict(weak_layers=3)),
    ('weak_width', dict(weak_width=0.75)),
    ('strong_shares', dict(strong_shares=(0.05,))),
    ('tuning_seed', dict(tuning_seed=0)),
    ('active_clients', dict(active_clients=7)),
    ('num_clients', dict(n_train=100, num_clients=60, active_clients=3)),
])
def test_every_impossible_combination_is_refused_naming_its_parameters(named, change):
    TINY.checks()  # the base case passes
    with pytest.raises(ParameterError, match=named):
        dataclasses.replace(TINY, **change).checks()


def test_the_scale_table_measures_both_inits_whatever_the_run_uses():
    spec = dataclasses.replace(TINY, hidden=(64, 64, 64)).spec()
    scales = driver.input_scales(spec)
    assert scales.layer.tolist() == ["fc0", "fc1", "fc2", "fc3"]
    torch_rms, he_rms = scales["input RMS (torch init)"], scales["input RMS (he init)"]
    assert torch_rms.iloc[0] == he_rms.iloc[0]  # both see the same samples
    assert torch_rms.is_monotonic_decreasing and torch_rms.iloc[-1] < 0.25 * torch_rms.iloc[0]
    assert he_rms.iloc[-1] > 0.6 * he_rms.iloc[0]
    assert scales.equals(driver.input_scales(dataclasses.replace(spec, init="torch")))
    note = driver.scale_note(scales, "he")
    share = f"{torch_rms.iloc[-1] / torch_rms.iloc[0]:.1%} under torch init"
    assert share in note and note.endswith("This run uses he init.")
