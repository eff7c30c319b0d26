import numpy as np
import pytest

from repro.medical.attenuation import KVP_140, attenuation_map, hu_to_mu


def test_anchor_values():
    assert hu_to_mu(np.array(-1000.0)) == pytest.approx(0.0, abs=1e-12)
    assert hu_to_mu(np.array(0.0)) == pytest.approx(0.093, abs=1e-12)
    assert attenuation_map(np.array([-1000.0]))[0] == pytest.approx(1.0)


def test_continuous_and_non_decreasing():
    hu = np.linspace(-1500.0, 3500.0, 50001)
    mu = hu_to_mu(hu)
    assert np.all(np.diff(mu) >= 0.0)
    # continuity: no jump larger than the steepest slope times the grid step
    assert np.max(np.abs(np.diff(mu))) <= max(KVP_140.slopes) * (hu[1] - hu[0]) + 1e-12
    for knot in KVP_140.knots[0]:
        left, right = hu_to_mu(np.array([knot - 1e-6, knot + 1e-6]))
        assert right - left < 1e-9


def test_bone_slope_is_shallower_than_soft_tissue():
    assert hu_to_mu(np.array(1000.0)) - hu_to_mu(np.array(0.0)) < hu_to_mu(np.array(0.0)) - hu_to_mu(np.array(-1000.0))
