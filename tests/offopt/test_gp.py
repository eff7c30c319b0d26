"""GP synthetic functions and ROOT's (low, high) design-pair sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.models import torch_threads
from repro.offopt.gp import (
    GPPosteriorMean,
    GPPrior,
    PairClimb,
    RFFPosteriorSample,
    build_root_pairs,
    gp_ensemble,
    sample_design_pairs,
)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


RNG = np.random.default_rng(0)
X = RNG.uniform(-2, 2, size=(30, 3))
Y = np.sin(X).sum(1)


def test_posterior_mean_interpolates_with_tiny_noise_and_reverts_far_away() -> None:
    gp = GPPosteriorMean(X, Y, lengthscale=0.7, noise=1e-8)
    assert np.max(np.abs(gp(torch.as_tensor(X)).numpy() - Y)) < 1e-4
    far = torch.full((2, 3), 100.0, dtype=torch.float64)
    assert np.all(np.abs(gp(far).numpy()) < 1e-12)  # zero prior mean


def test_analytic_gradients_match_autograd() -> None:
    x = torch.as_tensor(RNG.normal(size=(5, 3)))
    for f in (GPPosteriorMean(X, Y, lengthscale=0.9), RFFPosteriorSample(X, Y, n_features=64, seed=1)):
        val, grad = f.value_and_grad(x, torch.float64)
        xr = x.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(f(xr).sum(), xr)
        torch.testing.assert_close(grad, auto, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(val, f(x), rtol=1e-12, atol=1e-12)


def test_rff_posterior_sample_fits_the_data_and_is_seeded() -> None:
    a = RFFPosteriorSample(X, Y, lengthscale=0.8, noise=1e-4, n_features=400, seed=3)
    b = RFFPosteriorSample(X, Y, lengthscale=0.8, noise=1e-4, n_features=400, seed=3)
    c = RFFPosteriorSample(X, Y, lengthscale=0.8, noise=1e-4, n_features=400, seed=4)
    xt = torch.as_tensor(X)
    assert np.max(np.abs(a(xt).numpy() - Y)) < 0.1
    xq = torch.as_tensor(RNG.uniform(-2, 2, size=(20, 3)))
    assert torch.equal(a(xq), b(xq)) and not torch.allclose(a(xq), c(xq))


def prior6(kind: str) -> GPPrior:
    return GPPrior(n_functions=6, lengthscale=1.0, outputscale=2.0, delta_lengthscale=0.25, delta_outputscale=0.5,
                   kind=kind, n_features=32)


@pytest.mark.parametrize("kind", ["posterior_mean", "rff_sample"])
def test_ensemble_hyperparameters_are_sampled_in_range_and_reproducible(kind: str) -> None:
    ens = gp_ensemble(X, Y, prior6(kind), seed=7)
    ls = np.array([f.lengthscale for f in ens])
    os_ = np.array([f.outputscale for f in ens])
    assert np.all((0.75 <= ls) & (ls <= 1.25)) and np.all((1.5 <= os_) & (os_ <= 2.5))
    assert len(set(ls.round(12))) == 6
    again = gp_ensemble(X, Y, prior6(kind), seed=7)
    xq = torch.as_tensor(X[:4])
    assert all(torch.equal(f(xq), g(xq)) for f, g in zip(ens, again))
    with pytest.raises(ValueError, match="delta_lengthscale"):
        gp_ensemble(X, Y, GPPrior(lengthscale=0.2, delta_lengthscale=0.25))


def test_every_kept_pair_clears_the_threshold_and_lr_zero_keeps_none() -> None:
    gp = GPPosteriorMean(X, Y, lengthscale=0.9)
    pairs = sample_design_pairs(gp, X[:20], steps=30, lr=1e-2, threshold=0.05)
    assert len(pairs) > 0
    assert np.all(pairs.y_high - pairs.y_low > 0.05)
    np.testing.assert_allclose(gp(torch.as_tensor(pairs.x_high)).numpy(), pairs.y_high, atol=1e-12)
    np.testing.assert_allclose(gp(torch.as_tensor(pairs.x_low)).numpy(), pairs.y_low, atol=1e-12)
    assert len(sample_design_pairs(gp, X[:20], steps=30, lr=0.0, threshold=1e-3)) == 0
    # ascent and descent start from the same seed: each moves only along +/- the local gradient
    assert pairs.x_low.shape == pairs.x_high.shape == (len(pairs), 3)


def test_build_root_pairs_seeds_from_the_best_designs() -> None:
    pairs = build_root_pairs(X, Y, GPPrior(n_functions=3), PairClimb(n_seeds=5, steps=10, lr=1e-2, threshold=1e-3), seed=0)
    assert set(np.unique(pairs.function_index)) <= {0, 1, 2}
    assert len(pairs) <= 3 * 5 and len(pairs) > 0
    best = X[np.argsort(-Y)[:5]]
    # with tiny steps each pair's midpoint stays near one of the 5 seeds
    mid = (pairs.x_low + pairs.x_high) / 2
    dist = np.min(np.linalg.norm(mid[:, None, :] - best[None, :, :], axis=-1), axis=1)
    assert np.all(dist < 0.2)


def test_gp_subset_bounds_the_fit_but_keeps_the_best_seeds() -> None:
    full = build_root_pairs(X, Y, GPPrior(n_functions=1), PairClimb(n_seeds=4, steps=5, lr=1e-2), seed=0)
    sub = build_root_pairs(X, Y, GPPrior(n_functions=1), PairClimb(n_seeds=4, steps=5, lr=1e-2, max_points=10), seed=0)
    assert len(sub) > 0 and not np.allclose(full.y_high[: len(sub)], sub.y_high)
    best = X[np.argsort(-Y)[:4]]
    mid = (sub.x_low + sub.x_high) / 2
    assert np.all(np.min(np.linalg.norm(mid[:, None] - best[None], axis=-1), axis=1) < 0.2)
    with pytest.raises(ValueError, match="max_points"):
        build_root_pairs(X, Y, GPPrior(n_functions=1), PairClimb(max_points=0))
