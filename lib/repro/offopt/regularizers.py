"""Surrogate regularisers: BOSS's sensitivity term and IGNITE's sharpness term.

Both are *hooks* for :func:`repro.offopt.surrogate.train_surrogate`: callables
``reg(model, x, y) -> scalar tensor`` whose value is added to the batch loss.

Notation (after the chapter specs): ``beta`` are the surrogate's parameters and
``G_B(beta) = mean_{x in B} g(x; beta)`` its mean prediction over a batch.

* **Sensitivity (BOSS).** Perturb *all* parameters by the same scalar
  ``gamma ~ N(mu, sigma^2)``: ``beta + gamma * 1``.  To first order the mean
  prediction moves by ``Delta = gamma * S`` with ``S = sum_j dG/dbeta_j`` (the
  *sum* of the parameter gradient).  The surrogate is *sensitive* when
  ``|Delta| > alpha |G|``; the differentiable penalty is
  ``L_sens = mean_gamma min(1, (gamma S / (alpha G))^2)``.  The perturbation
  law ``omega = (mu, sigma)`` is pushed towards the worst case by ascent
  through a small classifier ``Phi(gamma)`` of the sensitive event.
* **Sharpness (IGNITE).** The worst first-order increase of ``G_B`` in a
  ``rho``-ball of parameters is ``rho ||grad_beta G_B||``.  IGNITE penalises it
  with a Lagrange multiplier ``lambda`` updated by dual ascent, and takes the
  penalty's gradient by a finite-difference Hessian-vector product.  The same
  class also offers the SAM view on the *loss* (``target="loss"``).  Both vanish
  for a function that is constant in its parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from repro.offopt.surrogate import data_loss, seeded
from repro.validation import (
    check_choice,
    check_nonneg,
    check_positive,
    check_positive_int,
)

Params = dict[str, torch.Tensor]


# ----------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------


def trainable_params(model: nn.Module) -> Params:
    """The model's trainable parameters by name (the tensors themselves)."""
    return {k: p for k, p in model.named_parameters() if p.requires_grad}


def mean_prediction(model: nn.Module, x: torch.Tensor, params: Params | None = None) -> torch.Tensor:
    """``G_B = mean_x g(x; beta)``, optionally at substituted parameters.

    Parameters
    ----------
    model
        The surrogate.
    x
        Batch of designs.
    params
        Parameters to use instead of the model's own (via ``torch.func.functional_call``).

    Returns
    -------
    torch.Tensor
        Scalar.
    """
    out = model(x) if params is None else functional_call(model, params, (x,))
    return out.mean()


def _grads(value: torch.Tensor, params: Iterable[torch.Tensor], create_graph: bool) -> list[torch.Tensor]:
    params = list(params)
    if not value.requires_grad:  # the value does not depend on any parameter
        return [torch.zeros_like(p) for p in params]
    gs = torch.autograd.grad(value, list(params), create_graph=create_graph, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, gs)]


def _total(terms: list[torch.Tensor]) -> torch.Tensor:
    """The sum of scalar tensors, left to right as ``sum`` adds them (a zero tensor for none)."""
    if not terms:
        return torch.zeros(())
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


def _norm(gs: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.sqrt(_total([(g * g).sum() for g in gs]))


def _shift(params: Params, direction: Sequence[torch.Tensor], step: float | torch.Tensor) -> Params:
    return {k: p + step * d for (k, p), d in zip(params.items(), direction)}


# ----------------------------------------------------------------------------
# BOSS: sensitivity
# ----------------------------------------------------------------------------


def gradient_sum(
    model: nn.Module, x: torch.Tensor, *, create_graph: bool = False, variant: str = "sum"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``G_B`` and ``S``, the sum (or norm) of ``dG_B/dbeta`` over all parameter entries.

    Parameters
    ----------
    model
        The surrogate.
    x
        Batch of designs.
    create_graph
        Keep the graph so ``S`` can be differentiated (needed for training).
    variant
        ``"sum"`` (BOSS code: perturbation along the all-ones direction; signs
        cancel) or ``"norm"`` (the Euclidean norm: the worst direction).

    Returns
    -------
    G, S
        Scalars.
    """
    check_choice("variant", variant, ("sum", "norm"))
    params = trainable_params(model)
    g_b = mean_prediction(model, x)
    gs = _grads(g_b, params.values(), create_graph)
    s = _total([g.sum() for g in gs]) if variant == "sum" else _norm(gs)
    return g_b, s


def sensitivity_loss(g_b: torch.Tensor, s: torch.Tensor, gamma: torch.Tensor, alpha: float, eps: float = 1e-12) -> torch.Tensor:
    """``L_sens = mean_gamma min(1, (gamma S)^2 / ((alpha G)^2 + eps))``, always in ``[0, 1]``.

    Parameters
    ----------
    g_b
        Mean prediction ``G`` (scalar).
    s
        Gradient sum ``S`` (scalar).
    gamma
        Perturbation draws, shape ``(n_gamma,)``.
    alpha
        Relative tolerance (>= 0); ``alpha = 0`` makes any ``gamma S != 0`` count as sensitive.
    eps
        Guards the division when ``G`` is 0 (the BOSS code divides by ``alpha G`` directly).

    Returns
    -------
    torch.Tensor
        Scalar in ``[0, 1]``.
    """
    check_nonneg("alpha", alpha)
    ratio2 = (gamma * s) ** 2 / ((alpha * g_b) ** 2 + eps)
    return torch.clamp(ratio2, max=1.0).mean()


@torch.no_grad()
def perturbed_mean_prediction(model: nn.Module, x: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_B(beta + gamma * 1)``: every parameter entry shifted by the same ``gamma``."""
    params = trainable_params(model)
    return mean_prediction(model, x, {k: p + gamma for k, p in params.items()})


@torch.no_grad()
def empirical_sensitivity(
    model: nn.Module,
    x: torch.Tensor,
    *,
    alpha: float = 0.1,
    mu: float = 0.0,
    sigma: float = 1e-3,
    n_gamma: int = 100,
    seed: int = 0,
) -> float:
    """Monte-Carlo sensitivity with true perturbed forward passes.

    The fraction of draws ``gamma ~ N(mu, sigma^2)`` for which
    ``|G(beta + gamma 1) - G(beta)| > alpha |G(beta)|``.

    Parameters
    ----------
    model
        The surrogate.
    x
        Designs, shape ``(n, d)`` (a tensor in the model's dtype).
    alpha, mu, sigma, n_gamma
        Tolerance and perturbation law.
    seed
        Seed of the draws.

    Returns
    -------
    float
        A probability in ``[0, 1]``.
    """
    n_gamma = check_positive_int("n_gamma", n_gamma)
    check_nonneg("sigma", sigma)
    gen = torch.Generator().manual_seed(int(seed))
    gammas = mu + sigma * torch.randn(n_gamma, generator=gen, dtype=torch.float64)
    g0 = mean_prediction(model, x)
    hits = [float(abs(perturbed_mean_prediction(model, x, float(gm)) - g0) > alpha * abs(g0)) for gm in gammas]
    return float(np.mean(hits))


@dataclass(kw_only=True)
class SensitivityRegularizer:
    """BOSS's sensitivity penalty ``weight * L_sens`` with a worst-case perturbation law.

    Each call draws ``n_gamma`` values ``gamma = mu + sigma * eps`` from a private
    generator, returns ``weight * L_sens`` (differentiable through ``S`` by
    double back-propagation), and, if ``update_omega``, moves ``omega = (mu, sigma)``
    by one ascent step: a classifier ``Phi(gamma)`` (1 -> ``phi_hidden`` -> 1,
    sigmoid) is fitted for ``phi_steps`` Adam/BCE steps to the indicator
    ``z = 1[|gamma S| > |alpha G|]``, then
    ``mu += omega_lr * mean dPhi/dgamma`` and
    ``sigma += omega_lr * mean(dPhi/dgamma * (gamma - mu) / sigma)``, and both
    are clipped to ``[-mu_bound, mu_bound]`` and ``sigma_bounds``.

    Parameters
    ----------
    weight
        ``lambda``; 0 leaves training bitwise identical to no regulariser.
    alpha
        Relative tolerance.
    n_gamma
        Draws per batch.
    mu, sigma
        Initial perturbation law.
    update_omega
        Whether to run the worst-case ascent on ``(mu, sigma)``.
    omega_lr, mu_bound, sigma_bounds
        Ascent step and clipping box.
    phi_hidden, phi_lr, phi_steps
        The classifier ``Phi``.
    variant
        ``"sum"`` (faithful) or ``"norm"``; see :func:`gradient_sum`.
    seed
        Seed of the draws and of ``Phi``'s initial weights.

    Notes
    -----
    Deviations from the BOSS code (documented in the chapter): ``Phi``'s BCE has
    its arguments in the usual order (the code passes them swapped), the sigma
    gradient multiplies each draw's own ``dPhi/dgamma`` by ``(gamma - mu)/sigma``
    (the code multiplies the *summed* derivative), and the division by
    ``alpha G`` is guarded by ``eps``.  ``Phi`` sees raw ``gamma`` as in the code.
    """

    weight: float = 1e-3
    alpha: float = 0.1
    n_gamma: int = 100
    mu: float = 0.0
    sigma: float = 1e-3
    update_omega: bool = True
    omega_lr: float = 1e-2
    mu_bound: float = 1e-3
    sigma_bounds: tuple[float, float] = (1e-5, 1e-2)
    phi_hidden: int = 16
    phi_lr: float = 1e-3
    phi_steps: int = 5
    variant: str = "sum"
    seed: int = 0
    history: list[dict[str, float]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.weight = check_nonneg("weight", self.weight)
        self.alpha = check_nonneg("alpha", self.alpha)
        self.n_gamma = check_positive_int("n_gamma", self.n_gamma)
        self.mu = float(self.mu)
        self.sigma = check_nonneg("sigma", self.sigma)
        self.update_omega = bool(self.update_omega)
        self.omega_lr = check_nonneg("omega_lr", self.omega_lr)
        self.mu_bound = check_nonneg("mu_bound", self.mu_bound)
        lo, hi = (check_nonneg("sigma_bounds", s) for s in self.sigma_bounds)
        if hi < lo:
            raise ValueError(f"sigma_bounds must be (low, high) with low <= high, got {self.sigma_bounds}")
        self.sigma_bounds = (lo, hi)
        self.phi_steps = check_positive_int("phi_steps", self.phi_steps, minimum=0)
        self.variant = check_choice("variant", self.variant, ("sum", "norm"))
        self._gen = torch.Generator().manual_seed(int(self.seed))
        width = check_positive_int("phi_hidden", self.phi_hidden)
        self.phi = seeded(
            lambda: nn.Sequential(nn.Linear(1, width), nn.Tanh(), nn.Linear(width, 1), nn.Sigmoid()), int(self.seed) + 1
        )
        self._phi_opt = torch.optim.Adam(self.phi.parameters(), lr=check_positive("phi_lr", self.phi_lr))

    def __call__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Return ``weight * L_sens`` for the batch (and update ``omega``)."""
        g_b, s = gradient_sum(model, x, create_graph=True, variant=self.variant)
        eps = torch.randn(self.n_gamma, generator=self._gen, dtype=torch.float64).to(g_b.dtype)  # drawn on the CPU
        gamma = self.mu + self.sigma * eps.to(g_b.device)
        l_sens = sensitivity_loss(g_b, s, gamma, self.alpha)
        z = (torch.abs(gamma * s.detach()) > torch.abs(self.alpha * g_b.detach())).to(g_b.dtype)
        if self.update_omega:  # Phi is a small CPU network
            self._ascend_omega(gamma.detach().cpu(), eps, z.cpu())
        self.history.append(
            {"l_sens": float(l_sens.detach()), "mu": self.mu, "sigma": self.sigma, "frac_sensitive": float(z.mean())}
        )
        return self.weight * l_sens

    def _ascend_omega(self, gamma: torch.Tensor, eps: torch.Tensor, z: torch.Tensor) -> None:
        g_in = gamma.float()[:, None]
        target = z.float()[:, None]
        for _ in range(self.phi_steps):
            self._phi_opt.zero_grad(set_to_none=True)
            loss = nn.functional.binary_cross_entropy(self.phi(g_in), target)
            loss.backward()
            self._phi_opt.step()
        g_req = g_in.clone().requires_grad_(True)
        (dphi,) = torch.autograd.grad(self.phi(g_req).sum(), g_req)
        dphi = dphi[:, 0].double()
        d_mu = float(dphi.mean())
        d_sigma = float((dphi * eps.double()).mean())  # (gamma - mu) / sigma == eps
        self.mu = float(np.clip(self.mu + self.omega_lr * d_mu, -self.mu_bound, self.mu_bound))
        self.sigma = float(np.clip(self.sigma + self.omega_lr * d_sigma, *self.sigma_bounds))


# ----------------------------------------------------------------------------
# IGNITE: sharpness
# ----------------------------------------------------------------------------

TARGETS = ("output", "loss")


class _LossOf(nn.Module):
    """Wraps a surrogate so ``functional_call`` can evaluate its data loss at other parameters."""

    def __init__(self, model: nn.Module, loss: str) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return data_loss(self.model, x, y, self.loss)


def _objective(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor | None, target: str, loss: str
) -> Callable[[Params | None], torch.Tensor]:
    """``T(params)``: the batch mean prediction, or the batch data loss."""
    check_choice("target", target, TARGETS)
    if target == "output":
        return lambda params: mean_prediction(model, x, params)
    if y is None:
        raise ValueError("y is required when target='loss'")
    wrapper = _LossOf(model, loss)

    def loss_at(params: Params | None) -> torch.Tensor:
        if params is None:
            return wrapper(x, y)
        return functional_call(wrapper, {f"model.{k}": v for k, v in params.items()}, (x, y))

    return loss_at


def gradient_norm(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor | None = None, *, target: str = "output", loss: str = "mse"
) -> float:
    """``||grad_beta T||`` where ``T`` is ``G_B`` (``target="output"``) or the batch loss.

    ``rho`` times this is IGNITE's sharpness proxy (the first-order worst-case
    increase of ``T`` in a ``rho``-ball of parameters).

    Parameters
    ----------
    model
        The surrogate.
    x, y
        Batch (``y`` only for ``target="loss"``).
    target
        ``"output"`` or ``"loss"``.
    loss
        Data loss for ``target="loss"``.

    Returns
    -------
    float
        The norm.
    """
    t_fn = _objective(model, x, y, target, loss)
    params = trainable_params(model)
    gs = _grads(t_fn(None), params.values(), create_graph=False)
    return float(_norm(gs))


def sam_sharpness(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor | None = None,
    *,
    rho: float = 0.05,
    target: str = "loss",
    loss: str = "mse",
) -> float:
    """SAM's one-step estimate of the worst-case increase of ``T`` in a ``rho``-ball.

    ``T(beta + rho g/||g||) - T(beta)`` with ``g = grad_beta T``; defined as 0
    when ``g = 0`` (e.g. a function constant in its parameters, or a loss at a
    stationary point).

    Parameters
    ----------
    model
        The surrogate.
    x, y
        Batch (``y`` only for ``target="loss"``).
    rho
        Radius of the parameter ball.
    target
        ``"loss"`` (SAM) or ``"output"`` (IGNITE's ``G_B``).
    loss
        Data loss for ``target="loss"``.

    Returns
    -------
    float
        The estimated increase.
    """
    check_nonneg("rho", rho)
    t_fn = _objective(model, x, y, target, loss)
    params = trainable_params(model)
    base = t_fn(None)
    gs = _grads(base, params.values(), create_graph=False)
    norm = _norm(gs)
    if float(norm) == 0.0:
        return 0.0
    with torch.no_grad():
        return float(t_fn(_shift(params, [g / norm for g in gs], rho)) - base)


def grad_norm_gradient(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor | None = None,
    *,
    r: float | None = 0.05,
    target: str = "output",
    loss: str = "mse",
) -> tuple[float, list[torch.Tensor]]:
    """``||grad T||`` and its gradient w.r.t. the parameters.

    With ``r`` a float, the gradient is IGNITE's finite-difference
    Hessian-vector product ``[grad T(beta + r v) - grad T(beta)] / r`` with
    ``v = grad T / ||grad T||``; with ``r=None`` it is exact (double backward).
    A zero gradient gives a zero result.

    Parameters
    ----------
    model
        The surrogate.
    x, y
        Batch.
    r
        Finite-difference step, or ``None`` for autograd.
    target, loss
        See :func:`gradient_norm`.

    Returns
    -------
    norm, grads
        The norm and one tensor per trainable parameter (detached).
    """
    t_fn = _objective(model, x, y, target, loss)
    params = trainable_params(model)
    if r is None:
        gs = _grads(t_fn(None), params.values(), create_graph=True)
        norm = _norm(gs)
        if float(norm.detach()) == 0.0:
            return 0.0, [torch.zeros_like(p) for p in params.values()]
        hs = _grads(norm, params.values(), create_graph=False)
        return float(norm.detach()), [h.detach() for h in hs]
    r = check_positive("r", r)
    gs = [g.detach() for g in _grads(t_fn(None), params.values(), create_graph=False)]
    norm = _norm(gs)
    if float(norm) == 0.0:
        return 0.0, [torch.zeros_like(p) for p in params.values()]
    shifted = _shift({k: p.detach() for k, p in params.items()}, [g / norm for g in gs], r)
    shifted = {k: v.requires_grad_(True) for k, v in shifted.items()}
    gs2 = _grads(t_fn(shifted), list(shifted.values()), create_graph=False)
    return float(norm), [(g2.detach() - g) / r for g2, g in zip(gs2, gs)]


@dataclass(kw_only=True)
class SharpnessRegularizer:
    """IGNITE's sharpness penalty ``lambda * rho * ||grad_beta T||`` with dual ascent on ``lambda``.

    On each call the returned tensor has *value* ``lambda * rho * ||grad T||``
    and *gradient* ``lambda * rho * d||grad T||/dbeta``, computed by the
    finite-difference HVP (``hvp="finite_difference"``, step ``r``; IGNITE code)
    or exactly (``hvp="autograd"``).  Then, if ``dual_lr > 0``, the multiplier
    moves ``lambda <- lambda + dual_lr * (rho ||grad T|| - eps)``, clipped at 0
    unless ``project=False`` (the code does not clip).

    ``target="output"`` (default) penalises the sharpness of ``G_B``, as
    IGNITE; ``target="loss"`` penalises the loss's SAM-style first-order
    worst-case increase.  Both are 0 for a function constant in its parameters.

    Parameters
    ----------
    rho
        Radius of the parameter ball.
    lam
        Initial multiplier ``lambda``.
    eps
        Constraint level: ``rho ||grad T|| <= eps``.
    dual_lr
        Dual step ``eta_lambda`` (0 keeps ``lambda`` fixed: IGNITE2).
    r
        Finite-difference step.
    hvp
        ``"finite_difference"`` or ``"autograd"``.
    project
        Clip ``lambda`` at 0 after each dual step.
    target, loss
        What is penalised; see :func:`gradient_norm`.
    """

    rho: float = 0.05
    lam: float = 1e-3
    eps: float = 0.1
    dual_lr: float = 1e-3
    r: float = 0.05
    hvp: str = "finite_difference"
    project: bool = True
    target: str = "output"
    loss: str = "mse"
    history: list[dict[str, Any]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.rho = check_nonneg("rho", self.rho)
        self.lam = float(self.lam)
        self.eps = float(self.eps)
        self.dual_lr = check_nonneg("dual_lr", self.dual_lr)
        self.r = check_positive("r", self.r)
        self.hvp = check_choice("hvp", self.hvp, ("finite_difference", "autograd"))
        self.project = bool(self.project)
        self.target = check_choice("target", self.target, TARGETS)

    @classmethod
    def ignite(cls, **kwargs: float) -> "SharpnessRegularizer":
        """IGNITE defaults: ``rho=0.05, lam=1e-3, eps=0.1, dual_lr=1e-3, r=0.05``."""
        return cls(**kwargs)  # type: ignore[arg-type]

    @classmethod
    def ignite2(cls, **kwargs: float) -> "SharpnessRegularizer":
        """IGNITE2: fixed ``lambda=0.01``, ``rho=0.2``, finite-difference step ``r=0.2``, no dual update.

        The values are those of the authors' ``scripts/IGNITE2/ga.py`` (github.com/cuong-dm/IGNITE at
        c7026148); ``r`` was 0.05 (IGNITE's) here before.
        """
        base = {"rho": 0.2, "lam": 0.01, "r": 0.2, "dual_lr": 0.0}
        return cls(**{**base, **kwargs})  # type: ignore[arg-type]

    def dual_step(self, sharpness: float) -> float:
        """Update ``lambda`` given ``rho ||grad T||``; returns the new ``lambda``."""
        lam = self.lam + self.dual_lr * (sharpness - self.eps)
        self.lam = max(0.0, lam) if self.project else lam
        return self.lam

    def __call__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Return the penalty tensor for the batch, then take the dual step."""
        params = trainable_params(model)
        coef = self.lam * self.rho
        norm, hs = grad_norm_gradient(
            model, x, y, r=None if self.hvp == "autograd" else self.r, target=self.target, loss=self.loss
        )
        lin = _total([(h * p).sum() for h, p in zip(hs, params.values())])
        # value: coef * norm; gradient w.r.t. beta: coef * d||grad T||/dbeta
        penalty = coef * (lin - lin.detach()) + coef * norm
        sharp = self.rho * norm
        self.history.append({"lambda": self.lam, "grad_norm": norm, "sharpness": sharp})
        if self.dual_lr > 0:
            self.dual_step(sharp)
        return penalty
