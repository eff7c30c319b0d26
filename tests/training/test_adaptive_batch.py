"""The batch-size controller's invariants and the adaptive-batch driver."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from repro.params import ParameterError, resolve
from repro.registry import load_registry
from repro.training.batch_schedule import BatchController, BatchSchedule
from repro.training.chapters import adaptive_batch as driver

SETUP = driver.Params(hidden=(16,), epochs=3, momentum=0.9, lr_grid=(0.02, 0.1), validation_fraction=0.2,
                      initial_batch=16, medium_batch=32, max_batch=64, interval=1, window=1, delta=0.02, warmup_steps=4,
                      alphas=(1.0, 0.5), local_batch=16, sample_ms=1.0, sweep_sample_ms=(0.1, 1.0), alpha_us=5.0,
                      bandwidth_gbs=10.0, ddp_batch=16, ddp_steps=3, tune_seeds=(100,), seeds=(0, 1), workers=1,
                      device="cpu")
CHAPTER = load_registry().get("adaptive-batch")


@pytest.mark.parametrize("trigger", ["interval", "plateau"])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_batch_grows_in_powers_of_two_up_to_the_cap_and_lr_scales(trigger, alpha):
    ctl = BatchController(
        BatchSchedule(
            initial_batch=16, max_batch=256, initial_lr=0.1, alpha=alpha, trigger=trigger, interval=2, window=1, delta=0.5
        )
    )
    seen = [ctl.batch]
    for e in range(20):
        old_lr = ctl.lr
        sw = ctl.end_epoch(e, 1.0 / (e + 1))
        if sw is not None:
            assert sw.new_batch == 2 * sw.old_batch
            assert sw.new_lr == pytest.approx(old_lr * 2**alpha)
        seen.append(ctl.batch)
    assert all(b2 >= b1 for b1, b2 in zip(seen, seen[1:]))
    assert all(b <= 256 and (b // 16) & (b // 16 - 1) == 0 and b % 16 == 0 for b in seen)
    assert seen[-1] == 256


def test_fixed_never_switches_and_plateau_waits_for_the_window():
    fixed = BatchController(BatchSchedule(initial_batch=16, max_batch=256, initial_lr=0.1))
    assert all(fixed.end_epoch(e, 1.0) is None for e in range(5)) and fixed.batch == 16
    plateau = BatchController(
        BatchSchedule(initial_batch=16, max_batch=256, initial_lr=0.1, trigger="plateau", window=3, delta=0.5)
    )
    assert [plateau.end_epoch(e, 1.0) is None for e in range(4)] == [True, True, True, False]


def test_warmup_ramps_from_old_to_new_rate():
    ctl = BatchController(
        BatchSchedule(initial_batch=16, max_batch=32, initial_lr=0.1, alpha=1.0, trigger="interval", interval=1, warmup_steps=4)
    )
    ctl.end_epoch(0, 1.0)
    ramp = [ctl.step_lr() for _ in range(6)]
    assert ramp == pytest.approx([0.125, 0.15, 0.175, 0.2, 0.2, 0.2])


@pytest.mark.parametrize("batch", [16, 48, 500])
def test_every_sample_once_per_epoch_whatever_the_batch(batch):
    ctl = BatchController(BatchSchedule(initial_batch=batch, max_batch=batch, initial_lr=0.1))
    ids = [i for b in ctl.batches(1000, torch.Generator().manual_seed(0)) for i in b]
    assert sorted(ids) == list(range(1000))


def test_every_arm_is_tuned_on_the_same_grid_by_validation_accuracy():
    tuning, rates = driver.tune(SETUP)
    assert set(rates) == set(driver.arm_names(SETUP))
    for name in driver.arm_names(SETUP):
        tried = [r for r in tuning if r.arm == name]
        assert sorted(r.lr for r in tried) == sorted(SETUP.lr_grid)
        assert rates[name] == max(tried, key=lambda r: (r.val_accuracy, -r.lr)).lr


def test_arm_runs_and_claims():
    rates = {a: 0.02 for a in driver.arm_names(SETUP)}
    runs = driver.sweep(SETUP, rates)
    results = driver.Results(params=SETUP, tuning=(), rates=rates, runs=tuple(runs), ddp_diff=0.0, chance=10.6)
    ad = next(r for r in runs if r.arm == "adaptive interval, alpha=1")
    assert ad.batch_per_epoch == (16, 32, 64)
    small = next(r for r in runs if r.arm == "fixed 16")
    assert small.steps == SETUP.epochs * int(np.ceil(small.n_train / 16)) and small.n_train == SETUP.n_train
    vals = driver.claims(results)
    assert set(vals) == {c.id for c in CHAPTER.claims}
    assert len(vals["step_reduction"]) == 1 and vals["step_reduction"][0] > 0  # deterministic: recorded once
    assert len(vals["modelled_speedup"]) == 1 and vals["modelled_speedup"][0] > 1
    gap = vals["large_batch_gap"]
    assert set(gap.arms) == {"fixed 16", "fixed 64"} and gap.trivial == 10.6 and len(gap.values) == 2


@pytest.mark.parametrize("override,name", [
    ({"medium_batch": 8}, "medium_batch"),
    ({"max_batch": 96}, "max_batch"),
    ({"max_batch": 2048, "medium_batch": 64}, "max_batch"),
    ({"ddp_batch": 31}, "ddp_batch"),
    ({"tune_seeds": [0]}, "tune_seeds"),
])
def test_impossible_combinations_are_refused_before_any_work(override, name):
    with pytest.raises(ParameterError, match=repr(name)):
        resolve(CHAPTER, "smoke", override)


def test_two_ranks_with_half_batches_equal_one_process():
    assert driver.ddp_check(replace(SETUP, hidden=(8,)), 0.02) < 1e-5
