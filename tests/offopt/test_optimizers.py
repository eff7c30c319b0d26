"""Optimisers over a surrogate: gradient ascent, CMA-ES (cma), GA (deap)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from repro.models import torch_threads
from repro.offopt.optimizers import Box, GAOperators, as_numpy_fn, cma_es, genetic_algorithm, gradient_ascent
from repro.offopt.surrogate import TrainSettings, train_surrogate


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


class _Bowl(nn.Module):
    """A concave surrogate -|x - c|^2 with its maximum at c."""

    def __init__(self, centre: np.ndarray) -> None:
        super().__init__()
        self.c = nn.Parameter(torch.as_tensor(centre, dtype=torch.float32), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return -((x - self.c) ** 2).sum(1)


CENTRE = np.array([0.5, -0.3, 0.8, 0.0])
STARTS = np.random.default_rng(0).normal(0.0, 1.5, size=(12, 4))


@pytest.fixture(scope="module")
def mlp_surrogate() -> nn.Module:
    """A small MLP fitted to the bowl: a 'simple surrogate' as chapters use."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, size=(400, 4))
    y = -((x - CENTRE) ** 2).sum(1)
    return train_surrogate(x, (y - y.mean()) / y.std(), TrainSettings(hidden=(32, 32), epochs=40, batch_size=64, lr=3e-3),
                           seed=0).model


def test_gradient_ascent_improves_every_start_and_respects_the_box() -> None:
    f = _Bowl(CENTRE)
    fn = as_numpy_fn(f)
    out = gradient_ascent(f, STARTS, steps=100, lr=0.05)  # Adam
    assert out.shape == STARTS.shape
    assert np.all(fn(out) > fn(STARTS))
    sgd = gradient_ascent(f, STARTS, steps=100, lr=0.1, optimizer="sgd")  # contracts by 0.8 a step
    np.testing.assert_allclose(sgd, np.tile(CENTRE, (12, 1)), atol=1e-5)
    boxed = gradient_ascent(f, STARTS, steps=50, lr=0.1, box=Box(lower=-0.1, upper=0.1))
    assert boxed.min() >= -0.1 - 1e-7 and boxed.max() <= 0.1 + 1e-7
    np.testing.assert_allclose(gradient_ascent(f, STARTS, steps=0), STARTS, atol=1e-6)  # float32 round trip


@pytest.mark.parametrize("use_mlp", [False, True])
def test_cma_es_improves_the_surrogate_over_the_starts(use_mlp: bool, mlp_surrogate: nn.Module) -> None:
    fn = as_numpy_fn(mlp_surrogate if use_mlp else _Bowl(CENTRE))
    starts = STARTS[:6]
    out = cma_es(fn, starts, sigma0=0.5, popsize=8, generations=15, seed=0, box=Box(lower=-2.0, upper=2.0))
    assert out.shape == (6, 4)
    # each run keeps its best design, start included, so no run gets worse...
    assert np.all(fn(out) >= fn(np.clip(starts, -2, 2)) - 1e-9)
    # ...and the search really improves on the starts
    assert fn(out).max() > fn(starts).max() and np.mean(fn(out) > fn(np.clip(starts, -2, 2))) >= 0.8
    assert out.min() >= -2.0 and out.max() <= 2.0


def test_cma_es_n_best_and_determinism() -> None:
    fn = as_numpy_fn(_Bowl(CENTRE))
    a = cma_es(fn, STARTS[:3], popsize=6, generations=5, n_best=4, seed=11)
    b = cma_es(fn, STARTS[:3], popsize=6, generations=5, n_best=4, seed=11)
    c = cma_es(fn, STARTS[:3], popsize=6, generations=5, n_best=4, seed=12)
    assert a.shape == (12, 4) and np.array_equal(a, b) and not np.array_equal(a, c)
    vals = fn(a).reshape(3, 4)
    assert np.all(np.diff(vals, axis=1) <= 0)  # each run's designs best first
    with pytest.raises(ValueError, match="n_best"):
        cma_es(fn, STARTS[:2], popsize=2, generations=2, n_best=5)


@pytest.mark.parametrize("use_mlp", [False, True])
def test_genetic_algorithm_improves_the_surrogate_over_the_start(use_mlp: bool, mlp_surrogate: nn.Module) -> None:
    fn = as_numpy_fn(mlp_surrogate if use_mlp else _Bowl(CENTRE))
    pop0 = np.random.default_rng(2).uniform(-2, 2, size=(32, 4))
    out = genetic_algorithm(fn, pop0, generations=20, seed=0, box=Box(lower=-2.0, upper=2.0))
    vals = fn(out)
    assert out.shape == pop0.shape
    assert np.all(np.diff(vals) <= 0)  # sorted, best first
    assert vals[0] > fn(pop0).max()  # the best design improved
    assert np.median(vals) > np.median(fn(pop0))  # and the population moved up
    assert out.min() >= -2.0 and out.max() <= 2.0


def test_ga_is_deterministic_and_validates_probabilities() -> None:
    fn = as_numpy_fn(_Bowl(CENTRE))
    pop0 = STARTS
    a = genetic_algorithm(fn, pop0, generations=5, seed=3)
    assert np.array_equal(a, genetic_algorithm(fn, pop0, generations=5, seed=3))
    assert not np.array_equal(a, genetic_algorithm(fn, pop0, generations=5, seed=4))
    with pytest.raises(ValueError, match="cx_prob"):
        genetic_algorithm(fn, pop0, operators=GAOperators(cx_prob=0.8, mut_prob=0.5))
    with pytest.raises(ValueError, match="init_pop"):
        genetic_algorithm(fn, pop0[:1])


def test_optimisers_restore_global_random_states() -> None:
    fn = as_numpy_fn(_Bowl(CENTRE))
    np.random.seed(5)
    random.seed(5)
    np_state, py_state = np.random.get_state()[1].copy(), random.getstate()
    cma_es(fn, STARTS[:2], popsize=4, generations=3, seed=1)
    genetic_algorithm(fn, STARTS, generations=3, seed=1)
    assert np.array_equal(np.random.get_state()[1], np_state) and random.getstate() == py_state
