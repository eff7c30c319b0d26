"""Multi-resolution training: pyramid, model, switch rules, the authors' schedule and the driver's arms."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from repro.params import ParameterError, load_profiles
from repro.registry import load_registry
from repro.results import Evidence, Ledger
from repro.training.chapters import multires as driver
from repro.training.multires import PlateauSwitch, coarsen, field_cnn, gaussian_random_fields

CHAPTER = load_registry().get("multires")


def _params(**changes) -> driver.Params:
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in load_profiles(CHAPTER)["smoke"].items()}
    small = {"n_train": 96, "n_val": 32, "size": 16, "channels": (4, 8, 8, 8), "epochs": 4}
    return driver.Params(**{**values, **small, **changes})


@pytest.mark.parametrize("factor", [2, 4])
def test_block_average_keeps_the_mean_and_divides_the_size(factor):
    x, _ = gaussian_random_fields(5, 32, np.random.default_rng(0))
    t = torch.as_tensor(x[:, None], dtype=torch.float64)
    c = coarsen(t, factor)
    assert c.numel() * factor ** 2 == t.numel()
    np.testing.assert_allclose(c.mean(dim=(1, 2, 3)).numpy(), t.mean(dim=(1, 2, 3)).numpy(), atol=1e-12)
    with pytest.raises(ValueError):
        coarsen(t[..., :30], 4)


def test_fields_have_zero_mean_and_steeper_slopes_are_smoother():
    x, y = gaussian_random_fields(200, 32, np.random.default_rng(1))
    np.testing.assert_allclose(x.mean(axis=(1, 2)), 0.0, atol=1e-10)
    rough = np.abs(np.diff(x, axis=2)).mean(axis=(1, 2)) / (x.std(axis=(1, 2)) + 1e-12)
    assert np.corrcoef(y[:, 0], rough)[0, 1] < -0.3  # a larger n_s puts less power at high k


def test_model_accepts_both_resolutions():
    model = field_cnn((4, 8, 8, 8)).eval()
    for side in (32, 16):
        assert model(torch.randn(3, 1, side, side)).shape == (3, 2)


@pytest.mark.parametrize("window", [1, 3])
def test_plateau_switch_waits_for_the_window_and_switches_once(window):
    sw = PlateauSwitch(window=window, delta=0.5)
    flags = [sw.update(1.0) for _ in range(window + 4)]
    assert flags.index(True) == window  # the earliest switch is after window + 1 epochs
    assert sum(flags) == 1 and not sw.coarse and sw.switched_at == window + 1
    assert not sw.update(0.0)


def test_the_judged_schedule_is_the_authors_half_coarse_with_a_fresh_slower_optimiser():
    # cosmoflow/train.py (066aa7ab): 50 coarse epochs of 100, then a new Adam at 8e-4 against 2e-3
    p = _params(epochs=100, coarse_fraction=0.5, switch_lr_ratio=0.4, max_coarse_epochs=60, final_window=5)
    coarse, fine = driver.schedule(driver.JUDGED, p)
    assert (coarse.coarse, coarse.epochs, coarse.lr) == (True, 50, p.lr)
    assert (fine.coarse, fine.epochs) == (False, 50) and fine.lr == pytest.approx(0.4 * p.lr)
    assert [s.epochs for s in driver.schedule("fine", p)] == [100]
    rates = [driver.stage_rate(coarse, step, 100, (0.5, 0.75)) for step in (0, 49, 50, 74, 75, 99)]
    assert rates == pytest.approx([p.lr, p.lr, p.lr / 10, p.lr / 10, p.lr / 100, p.lr / 100])


def test_every_arm_trains_the_same_epochs_and_the_fixed_arm_switches_at_its_fraction():
    p = _params()
    runs = driver.run_seed(driver.SeedJob(params=p, seed=0))
    assert all(len(r.curve) == p.epochs for r in runs.arms.values())
    fixed = runs.arms[driver.JUDGED]
    assert fixed.switched_at == p.coarse_epochs
    assert [pt.coarse for pt in fixed.curve] == [True] * p.coarse_epochs + [False] * (p.epochs - p.coarse_epochs)
    assert all(pt.coarse for pt in runs.arms["coarse"].curve) and not any(pt.coarse for pt in runs.arms["fine"].curve)
    assert runs.trivial_mse > 0


def test_the_final_mse_is_the_mean_of_the_last_epochs_not_one_epoch():
    pts = tuple(driver.EpochPoint(val_mse=v, pixel_passes=1.0, seconds=1.0, coarse=False) for v in (5.0, 0.1, 0.3, 0.2))
    run = driver.ArmRun(arm="fine", seed=0, curve=pts, switched_at=None)
    assert run.final_mse(3) == pytest.approx(0.2) and run.final_mse(1) == pytest.approx(0.2)
    assert run.final_mse(4) == pytest.approx(5.6 / 4)


def _fake(arm: str, seconds: float, mse: float) -> driver.ArmRun:
    pts = tuple(driver.EpochPoint(val_mse=mse, pixel_passes=100.0 if arm in ("fine",) else 62.5, seconds=seconds,
                                  coarse=False) for _ in range(3))
    return driver.ArmRun(arm=arm, seed=0, curve=pts, switched_at=None)


def test_the_time_saving_counts_only_where_the_accuracy_is_kept():
    p = _params(seeds=tuple(range(5)), final_window=1)

    def results(mixed_mse: float) -> driver.Results:
        seeds = [driver.SeedRuns(seed=s, trivial_mse=1.0, arms={
            "fine": _fake("fine", 10.0, 0.10), "coarse": _fake("coarse", 5.0, 1.5),
            driver.JUDGED: _fake(driver.JUDGED, 7.0 + 0.01 * s, mixed_mse), "mrt_plateau": _fake("mrt_plateau", 7.0, 0.1)})
            for s in range(5)]
        return driver.Results(params=p, seeds=seeds)

    values = driver.claims(results(0.099))
    assert values["time_saving"] == pytest.approx([30.0 - 0.1 * s for s in range(5)])
    assert values["pixel_saving"] == [pytest.approx(37.5)]
    assert isinstance(values["accuracy_kept"], Evidence)
    ledger = Ledger("multires", "cpu", "/tmp")
    ledger.record_all(values)
    assert ledger.results["time_saving"].verdict == "reproduced"
    ledger.record_all(driver.claims(results(0.2)))  # a 100% worse final MSE: the time saving is not evidence
    assert ledger.results["accuracy_kept"].verdict == "not reproduced at this scale"
    assert ledger.results["time_saving"].verdict == "precondition not met"


@pytest.mark.parametrize(("changes", "named"), [
    ({"size": 20}, "'size', 'factor'"),
    ({"batch_size": 200}, "'n_train', 'batch_size'"),
    ({"coarse_fraction": 0.0}, "'coarse_fraction', 'epochs'"),
    ({"coarse_fraction": 1.0}, "'coarse_fraction', 'epochs'"),
    ({"final_window": 3}, "'final_window', 'coarse_fraction', 'epochs'"),
    ({"max_coarse_epochs": 4}, "'max_coarse_epochs', 'epochs', 'final_window'"),
    ({"window": 2}, "'window', 'max_coarse_epochs'"),
    ({"decay_fractions": (0.75, 0.5)}, "'decay_fractions'"),
    ({"decay_fractions": (0.0, 0.5)}, "'decay_fractions'"),
])
def test_impossible_combinations_are_refused_by_name(changes, named):
    _params().checks()
    with pytest.raises(ParameterError, match=named):
        dataclasses.replace(_params(), **changes).checks()
