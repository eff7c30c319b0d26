"""Multi-resolution training: pyramid, model, switch rule and the driver's arms."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from repro.training.chapters import multires as driver
from repro.training.multires import PlateauSwitch, coarsen, field_cnn, gaussian_random_fields, make_fieldsets

SETUP = driver.MultiresSetup(n_train=96, n_val=32, size=16, factor=2, channels=(4, 8, 8, 8), batch_size=32, lr=2e-3,
                             epochs=3, window=1, delta=0.02, max_coarse_epochs=2, fixed_switch=1, tolerance=0.02)


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


def test_switch_at_epoch_zero_is_fine_only_training():
    train, val = make_fieldsets(SETUP.n_train, SETUP.n_val, SETUP.size, 0)
    fine = driver.run_arm("fine", SETUP, train, val, 0)
    mixed = driver.run_arm("mrt_fixed", replace(SETUP, fixed_switch=0), train, val, 0)
    assert [p.val_mse for p in fine.curve] == [p.val_mse for p in mixed.curve]
    assert [p.pixel_passes for p in fine.curve] == [p.pixel_passes for p in mixed.curve]


def test_mixed_arms_stay_within_the_fine_budget_and_claims_have_all_keys():
    runs = driver.sweep(SETUP, [0])
    by = {r.arm: r for r in runs}
    budget = by["fine"].curve[-1].pixel_passes
    assert by["mrt_plateau"].curve[-1].pixel_passes <= budget and by["mrt_plateau"].switched_at is not None
    assert all(p.coarse for p in by["coarse"].curve)
    vals = driver.claims(runs, SETUP.tolerance)
    assert set(vals) == {"time_saving", "pixel_saving", "accuracy_kept", "coarse_only_worse"}
