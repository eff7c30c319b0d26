"""The batch-size controller's invariants and the adaptive-batch driver."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from repro.training.batch_schedule import BatchController, BatchSchedule
from repro.training.chapters import adaptive_batch as driver

SETUP = driver.BatchSetup(hidden=(16,), epochs=3, momentum=0.9, initial_lr=0.02, initial_batch=16, max_batch=64,
                          medium_batch=32, interval=1, window=1, delta=0.02, warmup_steps=4, alphas=(1.0, 0.5))


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


def test_arm_runs_and_claims():
    runs = driver.sweep(SETUP, [0])
    assert {r.arm for r in runs} == {a.name for a in driver.arms(SETUP)}
    ad = next(r for r in runs if r.arm == "adaptive interval, alpha=1")
    assert ad.batch_per_epoch == (16, 32, 64)
    small = next(r for r in runs if r.arm == "fixed 16")
    assert small.steps == SETUP.epochs * int(np.ceil(small.n_train / 16))
    vals = driver.claims(runs, SETUP, 16, 1e-3, driver.Network(), 0.0)
    assert vals["step_reduction"][0] > 0 and vals["modelled_speedup"][0] > 1


def test_two_ranks_with_half_batches_equal_one_process():
    assert driver.ddp_check(replace(SETUP, hidden=(8,)), 16, 3) < 1e-5
