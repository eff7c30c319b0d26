"""The FedDCT chapter driver: claims from a known frame, rounds to target, the per-device memory table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.federated.chapters.feddct import (
    METHODS,
    DctRun,
    choices,
    claims,
    device_memory,
    per_device_memory,
    rounds_to_target,
    sweep,
)
from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec

SPEC = TaskSpec(dataset="digits", num_clients=8, scheme="iid", hidden=(64, 64), n_train=400)


def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    best = {"fedavg_large": 80.0, "fedavg_small": 75.0, "fedprox_large": 79.0, "splitfed_large": 70.0,
            "fedgkt": 68.0, "clustered_large": 84.0, "feddct": 86.0}
    final, curves = [], []
    for m in METHODS:
        for s in (0, 1):
            for lr, shift in ((0.05, -5.0), (0.1, 0.0)):
                acc = best[m] + shift + s
                final.append({"method": m, "seed": s, "setting": lr, "accuracy": acc, "budget_accuracy": acc,
                              "validation_accuracy": acc - 1.0})
                reach = 8 if m == "feddct" else 16  # FedDCT climbs twice as fast
                curves += [{"method": m, "seed": s, "setting": lr, "round": r, "accuracy": acc * min(1.0, r / reach)}
                           for r in range(0, 21, 4)]
    return pd.DataFrame(final), pd.DataFrame(curves)


def test_claims_at_each_methods_best_learning_rate():
    final, curves = frames()
    memory = per_device_memory(SPEC, 4, 32)
    c = claims(final, curves, memory, rounds=20, eval_every=4)
    assert c["gain_vs_fedavg_large"] == [6.0, 6.0] and c["gain_vs_fedavg_small"] == [11.0, 11.0]
    assert c["gain_vs_splitfed"] == [16.0, 16.0] and c["gain_vs_fedprox"] == [7.0, 7.0]
    assert c["gain_vs_fedgkt"] == [18.0, 18.0]
    # FedAvg-large reaches 95% of its best at round 16, FedDCT (86 >= 0.95 * 80 at 8 * 76/86) at round 8
    assert c["rounds_saved_vs_fedavg_large"] == [8.0, 8.0]
    assert c["memory_reduction"][0] == pytest.approx(device_memory(memory, "feddct")["large / device"])


def test_the_learning_rate_is_chosen_on_validation_and_never_on_test():
    final, curves = frames()
    memory = per_device_memory(SPEC, 4, 32)
    # validation now prefers lr 0.05 for every method, while test still prefers 0.1
    final.loc[final.setting == 0.05, "validation_accuracy"] += 20.0
    c = claims(final, curves, memory, rounds=20, eval_every=4)
    assert {x.method: x.value for x in choices(final)} == {m: 0.05 for m in METHODS}
    # scrambling the test accuracy leaves the choice alone
    scrambled = final.assign(budget_accuracy=np.random.default_rng(0).permutation(final.budget_accuracy.to_numpy()))
    assert choices(scrambled) == choices(final)
    assert c["gain_vs_fedavg_large"] == [6.0, 6.0]  # differences at lr 0.05: (86-5+s) - (80-5+s)


def test_tuning_never_reads_test_labels(shuffled_test_labels):
    spec = TaskSpec(dataset="digits", num_clients=4, scheme="iid", hidden=(16, 16), n_train=300, validation_share=0.2)
    kwargs = dict(split_factor=2, steps=2, rounds=2, batch_size=8, lrs=[0.05, 0.2], mu=0.01, cot_final=0.5,
                  cot_warmup=1, seeds=[0], eval_every=1)
    final, _ = sweep(spec, **kwargs)
    shuffled_test_labels()
    again, _ = sweep(spec, **kwargs)
    assert again.validation_accuracy.tolist() == final.validation_accuracy.tolist()
    assert choices(again) == choices(final)
    assert again.budget_accuracy.tolist() != final.budget_accuracy.tolist()  # the test labels did change


def test_a_run_that_never_reaches_the_target_is_censored():
    _, curves = frames()
    curves.loc[curves.method == "splitfed_large", "accuracy"] = 10.0
    hit = rounds_to_target(curves[curves.setting == 0.1], rounds=20, eval_every=4)
    split = hit[hit.method == "splitfed_large"]
    assert not split.reached.any() and (split["rounds"] == 24).all()


def test_memory_table_model_matches_torch_and_sub_models_are_smaller():
    memory = per_device_memory(SPEC, 4, 32)
    err = (memory["step memory, torch (kB)"] / memory["step memory, model (kB)"] - 1).abs().set_axis(memory.device)
    split = memory.device.str.startswith("SplitFed")
    assert (err[~split.to_numpy()] < 0.01).all() and err[split.to_numpy()].isna().all()  # the split client is not measured
    assert all(device_memory(memory, m)["large / device"] > 1.0 for m in ("feddct", "splitfed_large", "fedgkt"))


def test_clusters_must_be_whole():
    with pytest.raises(ValueError, match="multiple of split_factor"):
        DctRun(
            method="feddct",
            spec=SPEC,
            sgd=LocalSGD(batch_size=8, lr=0.1),
            tau=1,
            rounds=1,
            seed=0,
            split_factor=3,
            mu=0.01,
            cot_final=0.5,
            cot_warmup=1,
        )
