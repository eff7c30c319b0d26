"""Synthetic black-box functions: stated optima, GP samples reproducible by seed."""

from __future__ import annotations

import numpy as np
import pytest

from repro.offopt.functions import (
    BRANIN_ARGMINS,
    BRANIN_MIN,
    ackley,
    branin,
    levy,
    make_function,
    rff_gp_sample,
    rff_params,
    rosenbrock,
)


@pytest.mark.parametrize("dim", [1, 2, 8, 16])
def test_ackley_optimum_is_zero_at_origin(dim: int) -> None:
    f = ackley(dim)
    assert f.sense == "min" and f.optimum_value == 0.0
    assert f(f.optimum_x)[0] == pytest.approx(0.0, abs=1e-12)
    assert np.array_equal(f.optimum_x, np.zeros(dim))


@pytest.mark.parametrize("dim", [2, 3, 8])
def test_rosenbrock_optimum_is_zero_at_ones(dim: int) -> None:
    f = rosenbrock(dim)
    assert f(np.ones(dim))[0] == 0.0
    assert f.optimum_value == 0.0


@pytest.mark.parametrize("dim", [1, 2, 8])
def test_levy_optimum_is_zero_at_ones(dim: int) -> None:
    f = levy(dim)
    assert f(np.ones(dim))[0] == pytest.approx(0.0, abs=1e-12)


def test_branin_2d_has_three_global_minima_of_5_over_4pi() -> None:
    f = branin(2)
    assert BRANIN_MIN == pytest.approx(0.397887357729738, abs=1e-12)
    np.testing.assert_allclose(f(BRANIN_ARGMINS), BRANIN_MIN, atol=1e-12)


@pytest.mark.parametrize("dim", [4, 8])
def test_branin_pair_sum_optimum_scales_with_pairs(dim: int) -> None:
    f = branin(dim)
    assert f.optimum_value == pytest.approx(dim // 2 * BRANIN_MIN, abs=1e-12)
    assert f(f.optimum_x)[0] == pytest.approx(f.optimum_value, abs=1e-12)
    # mixing different minimisers across pairs is still optimal
    mixed = np.concatenate([BRANIN_ARGMINS[i % 3] for i in range(dim // 2)])
    assert f(mixed)[0] == pytest.approx(f.optimum_value, abs=1e-12)


@pytest.mark.parametrize("name", ["ackley", "rosenbrock", "levy", "branin"])
def test_no_random_point_beats_the_stated_minimum(name: str) -> None:
    f = make_function(name, 4)
    x = f.sample_uniform(5000, np.random.default_rng(0))
    assert np.all(f(x) >= f.optimum_value - 1e-12)
    # in maximisation form, the optimum is the objective's maximum
    assert f.objective(f.optimum_x)[0] == pytest.approx(f.objective_max, abs=1e-12)
    assert np.all(f.objective(x) <= f.objective_max + 1e-12)


def test_branin_rejects_odd_dimension() -> None:
    with pytest.raises(ValueError, match="dim"):
        branin(3)


def test_box_must_contain_the_optimum() -> None:
    with pytest.raises(ValueError, match="bounds"):
        rosenbrock(4, bounds=(-3.0, 0.5))


def test_bad_dim_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="dim"):
        ackley(0)


@pytest.mark.parametrize("dim", [1, 4, 8])
def test_rff_gp_sample_is_reproducible_by_seed(dim: int) -> None:
    kw = dict(n_ref=2000, n_polish=2)
    a, b = rff_gp_sample(dim, seed=7, **kw), rff_gp_sample(dim, seed=7, **kw)
    c = rff_gp_sample(dim, seed=8, **kw)
    x = np.random.default_rng(1).uniform(-2, 2, size=(50, dim))
    assert np.array_equal(a(x), b(x))
    assert a.optimum_value == b.optimum_value and np.array_equal(a.optimum_x, b.optimum_x)
    assert not np.allclose(a(x), c(x))


def test_rff_gp_sample_optimum_is_consistent() -> None:
    f = rff_gp_sample(3, seed=0, n_ref=3000, n_polish=3)
    assert f.sense == "max" and not f.optimum_exact
    assert f(f.optimum_x)[0] == pytest.approx(f.optimum_value, abs=1e-12)
    assert np.all(f.optimum_x >= f.lower) and np.all(f.optimum_x <= f.upper)
    ref = f.sample_uniform(3000, np.random.default_rng(123))
    # the polished maximum beats (or equals) fresh uniform draws
    assert f(ref).max() <= f.optimum_value + 1e-12


def test_rff_features_approximate_the_rbf_kernel() -> None:
    """Across seeds, Cov(f(x1), f(x2)) ~ s * exp(-|x1 - x2|^2 / (2 l^2))."""
    ls, s = 0.8, 1.5
    pts = np.array([[0.0, 0.0], [0.5, 0.0], [1.0, 1.0]])
    vals = np.stack([rff_params(2, seed, lengthscale=ls, outputscale=s, n_features=256).values(pts) for seed in range(400)])
    emp = vals.T @ vals / vals.shape[0]
    d2 = ((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(emp, s * np.exp(-d2 / (2 * ls**2)), atol=0.25)
