"""Surrogate trainer and the BOSS (sensitivity) / IGNITE (sharpness) regularisers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from repro.models import torch_threads
from repro.offopt.regularizers import (
    SensitivityRegularizer,
    SharpnessRegularizer,
    empirical_sensitivity,
    grad_norm_gradient,
    gradient_norm,
    gradient_sum,
    perturbed_mean_prediction,
    sam_sharpness,
    sensitivity_loss,
)
from repro.offopt.surrogate import MLPSurrogate, TrainResult, TrainSettings, predict, seeded, train_ensemble, train_surrogate


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


def _data(n: int = 160, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return x, np.sin(x).sum(1) + 0.1 * rng.normal(size=n)


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _bitwise_equal(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


KW = dict(hidden=(16, 16), epochs=3, batch_size=32, seed=5)


def _fit(x: np.ndarray, y: np.ndarray, *, seed: int = 0, regularizer=None, **settings) -> TrainResult:
    """train_surrogate with its settings given as keywords."""
    return train_surrogate(x, y, TrainSettings(**settings), seed=seed, regularizer=regularizer)


# -- trainer -------------------------------------------------------------------


def test_training_is_deterministic_and_learns() -> None:
    x, y = _data()
    a = _fit(x, y, **KW)
    b = _fit(x, y, **KW)
    c = _fit(x, y, **{**KW, "seed": 6})
    assert _bitwise_equal(a.model, b.model)
    assert not _bitwise_equal(a.model, c.model)
    long = _fit(x, y, hidden=(16, 16), epochs=30, batch_size=32, lr=1e-2, seed=0)
    assert long.history[-1]["loss"] < 0.5 * long.history[0]["loss"]


def test_training_leaves_the_global_torch_rng_alone() -> None:
    x, y = _data(64)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    _fit(x, y, **KW)
    assert torch.equal(before, torch.get_rng_state())


def test_gaussian_nll_surrogate_and_ensemble() -> None:
    x, y = _data(64)
    res = _fit(x, y, loss="nll", **KW)
    assert isinstance(res.model, MLPSurrogate) and res.model.gaussian
    assert predict(res.model, x).shape == (64,)
    ens = train_ensemble(x, y, 3, TrainSettings(hidden=(8,), epochs=2), seed=1)
    preds = np.stack([predict(m, x) for m in ens.members])
    np.testing.assert_allclose(predict(ens, x), preds.mean(0), rtol=1e-5, atol=1e-6)


def test_trainer_argument_errors_name_the_argument() -> None:
    x, y = _data(20)
    with pytest.raises(ValueError, match="epochs"):
        _fit(x, y, epochs=0)
    with pytest.raises(ValueError, match="loss"):
        _fit(x, y, loss="huber")
    with pytest.raises(ValueError, match="y"):
        _fit(x, y[:-1])


# -- BOSS ----------------------------------------------------------------------


def test_boss_with_lambda_zero_is_bitwise_identical_to_vanilla() -> None:
    x, y = _data()
    vanilla = _fit(x, y, **KW)
    reg = SensitivityRegularizer(weight=0.0, n_gamma=10, seed=9)
    boss0 = _fit(x, y, regularizer=reg, **KW)
    assert _bitwise_equal(vanilla.model, boss0.model)
    assert len(reg.history) == 3 * 5  # the hook really ran on every batch (and updated omega)
    boss1 = _fit(x, y, regularizer=SensitivityRegularizer(weight=10.0, alpha=1e-3, n_gamma=10, seed=9), **KW)
    assert not _bitwise_equal(vanilla.model, boss1.model)


def test_sensitivity_loss_bounds_and_limits() -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        g, s = torch.randn(2, generator=gen)
        gamma = torch.randn(50, generator=gen) * 10 ** float(torch.randint(-4, 2, (1,), generator=gen))
        v = float(sensitivity_loss(g, s, gamma, alpha=0.1))
        assert 0.0 <= v <= 1.0
    gamma = torch.full((10,), 1e-3)
    assert float(sensitivity_loss(torch.tensor(0.7), torch.tensor(2.0), gamma, alpha=0.0)) == 1.0
    assert float(sensitivity_loss(torch.tensor(0.7), torch.tensor(2.0), torch.zeros(10), alpha=0.1)) == 0.0
    # a regulariser with mu = sigma = 0 draws gamma = 0: zero penalty
    model = seeded(lambda: MLPSurrogate(3, (8,)), 0)
    reg = SensitivityRegularizer(weight=1.0, mu=0.0, sigma=0.0, update_omega=False)
    assert float(reg(model, torch.randn(16, 3), torch.randn(16)).detach()) == 0.0


def test_first_order_delta_matches_a_true_perturbation() -> None:
    model = seeded(lambda: MLPSurrogate(3, (8, 8), activation="tanh"), 1).double()
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    g0, s = gradient_sum(model, x)
    gamma = 1e-5
    true = float(perturbed_mean_prediction(model, x, gamma) - g0.detach())
    assert float(gamma * s) == pytest.approx(true, rel=1e-2)


def test_omega_stays_in_its_box() -> None:
    x, y = _data(96)
    reg = SensitivityRegularizer(weight=1e-3, omega_lr=50.0, mu_bound=1e-3, sigma_bounds=(1e-5, 1e-2), n_gamma=20)
    _fit(x, y, regularizer=reg, **KW)
    mus = np.array([h["mu"] for h in reg.history])
    sigmas = np.array([h["sigma"] for h in reg.history])
    assert np.all(np.abs(mus) <= 1e-3) and np.all((sigmas >= 1e-5) & (sigmas <= 1e-2))
    assert np.any(mus != 0.0)  # it moved away from the initial mu = 0


def test_empirical_sensitivity_is_a_probability() -> None:
    model = seeded(lambda: MLPSurrogate(3, (8,)), 0)
    x = torch.randn(20, 3)
    p = empirical_sensitivity(model, x, sigma=1e-2, n_gamma=30)
    assert 0.0 <= p <= 1.0
    assert empirical_sensitivity(model, x, mu=0.0, sigma=0.0, n_gamma=10) == 0.0
    assert empirical_sensitivity(model, x, alpha=0.0, sigma=1.0, n_gamma=10) == 1.0


# -- IGNITE --------------------------------------------------------------------


class _Constant(nn.Module):
    """Output constant in x and in its (unused) parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))
        self.register_buffer("c", torch.tensor(2.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c.expand(x.shape[0])


def test_sharpness_penalty_is_zero_for_a_constant_function() -> None:
    x, y = torch.randn(16, 3), torch.randn(16)
    const = _Constant()
    assert gradient_norm(const, x) == 0.0
    assert sam_sharpness(const, x, target="output") == 0.0
    reg = SharpnessRegularizer(rho=0.5, lam=1.0, hvp="finite_difference")
    assert float(reg(const, x, y).detach()) == 0.0
    # a bias-only surrogate sitting exactly on constant data: zero loss gradient, zero SAM sharpness
    flat = nn.Linear(3, 1)
    with torch.no_grad():
        flat.weight.zero_()
        flat.bias.fill_(1.25)
    surrogate = _Squeeze(flat)
    yc = torch.full((16,), 1.25)
    assert sam_sharpness(surrogate, x, yc, rho=0.1, target="loss") == 0.0
    assert float(SharpnessRegularizer(target="loss", lam=1.0)(surrogate, x, yc).detach()) == 0.0
    # ...whereas a non-constant model is sharp
    model = seeded(lambda: MLPSurrogate(3, (8,)), 0)
    assert gradient_norm(model, x) > 0.0 and sam_sharpness(model, x, y, rho=0.1) > 0.0


class _Squeeze(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)[:, 0]


def test_finite_difference_hvp_matches_double_backward() -> None:
    model = seeded(lambda: MLPSurrogate(3, (6, 6), activation="tanh"), 3).double()
    x = torch.randn(24, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    n_fd, fd = grad_norm_gradient(model, x, r=1e-4)
    n_ex, ex = grad_norm_gradient(model, x, r=None)
    assert n_fd == pytest.approx(n_ex, rel=1e-12)
    flat_fd, flat_ex = torch.cat([t.flatten() for t in fd]), torch.cat([t.flatten() for t in ex])
    assert float((flat_fd - flat_ex).norm() / flat_ex.norm()) < 1e-3


def test_linear_surrogate_has_exactly_zero_hvp_correction() -> None:
    lin = _Squeeze(seeded(lambda: nn.Linear(4, 1), 0).double())
    x = torch.randn(10, 4, dtype=torch.float64)
    _, corr = grad_norm_gradient(lin, x, r=0.05)
    assert all(torch.equal(c, torch.zeros_like(c)) for c in corr)


def test_dual_update_raises_lambda_iff_constraint_is_violated() -> None:
    reg = SharpnessRegularizer(rho=0.05, lam=0.5, eps=0.1, dual_lr=0.1)
    assert reg.dual_step(0.3) > 0.5  # rho*||grad|| = 0.3 > eps
    lam = reg.lam
    assert reg.dual_step(0.05) < lam  # below eps
    lam = reg.lam
    assert reg.dual_step(0.1) == lam  # on the boundary
    proj = SharpnessRegularizer(lam=0.0, eps=1.0, dual_lr=1.0)
    assert proj.dual_step(0.0) == 0.0  # projected at zero
    raw = SharpnessRegularizer(lam=0.0, eps=1.0, dual_lr=1.0, project=False)
    assert raw.dual_step(0.0) == -1.0  # the code's unprojected update


def test_ignite_with_lambda_zero_equals_vanilla_and_is_active_otherwise() -> None:
    x, y = _data()
    vanilla = _fit(x, y, **KW)
    reg = SharpnessRegularizer(lam=0.0, dual_lr=0.0)
    assert _bitwise_equal(vanilla.model, _fit(x, y, regularizer=reg, **KW).model)
    assert len(reg.history) == 15 and all(h["grad_norm"] > 0 for h in reg.history)
    strong = SharpnessRegularizer(rho=1.0, lam=10.0, dual_lr=0.0)
    assert not _bitwise_equal(vanilla.model, _fit(x, y, regularizer=strong, **KW).model)


def test_sharpness_regularizer_lowers_measured_sharpness() -> None:
    x, y = _data(200)
    kw = dict(hidden=(32, 32), epochs=20, batch_size=50, lr=3e-3, seed=1)
    xt = torch.as_tensor(x, dtype=torch.float32)
    plain = _fit(x, y, **kw).model
    reg = _fit(x, y, regularizer=SharpnessRegularizer(rho=1.0, lam=1.0, dual_lr=0.0), **kw).model
    assert gradient_norm(reg, xt) < gradient_norm(plain, xt)


def test_ignite2_preset() -> None:
    r = SharpnessRegularizer.ignite2()
    # the authors' scripts/IGNITE2/ga.py (github.com/cuong-dm/IGNITE at c7026148): lambda 0.01, rho 0.2, r 0.2
    assert (r.rho, r.lam, r.dual_lr, r.r) == (0.2, 0.01, 0.0, 0.2)
    assert SharpnessRegularizer.ignite().r == 0.05
    with pytest.raises(ValueError, match="hvp"):
        SharpnessRegularizer(hvp="exact")
