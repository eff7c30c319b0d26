"""Gaussian-process synthetic functions fitted to offline data, and ROOT's design pairs.

ROOT learns a bridge from low- to high-scoring designs using *synthetic*
functions that resemble the black box: GPs fitted to the offline data with
perturbed hyper-parameters (never maximum-likelihood fitted).  Two kinds are
offered:

* ``"posterior_mean"`` (ROOT code): :class:`GPPosteriorMean`, the exact RBF-GP
  posterior mean ``mu(x) = s k(x, X) (s K + noise I)^{-1} y`` via Cholesky.
* ``"rff_sample"``: :class:`RFFPosteriorSample`, a *posterior sample* of the
  GP drawn with random Fourier features (Bayesian linear regression on the
  features), so each ensemble member is a different plausible function.

:func:`gp_ensemble` draws ``n_functions`` members with length scale and output
scale sampled as ``l0 + delta U(-1, 1)`` and ``s0 + delta U(-1, 1)``;
:func:`sample_design_pairs` descends/ascends each member from the same seeds to
make (low, high) pairs; :func:`build_root_pairs` does both for an offline set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch

from repro.offopt.seeds import derive_seed
from repro.validation import (
    as_1d,
    as_2d,
    check_choice,
    check_nonneg,
    check_positive,
    check_positive_int,
)

GP_KINDS = ("posterior_mean", "rff_sample")


class SyntheticGP(Protocol):
    """A differentiable synthetic function ``(n, d) tensor -> (n,) tensor``."""

    lengthscale: float
    outputscale: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Evaluate at ``x``."""
        ...


def rbf_kernel(a: torch.Tensor, b: torch.Tensor, lengthscale: float, outputscale: float) -> torch.Tensor:
    """``outputscale * exp(-|a_i - b_j|^2 / (2 lengthscale^2))``, shape ``(len(a), len(b))``."""
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return outputscale * torch.exp(-0.5 * torch.clamp(d2, min=0.0) / lengthscale**2)


@dataclass(frozen=True, kw_only=True)
class GPData:
    """A GP's training data and RBF hyper-parameters, checked.

    Attributes
    ----------
    x
        Training designs, shape ``(n, d)``.
    y
        Training scores, shape ``(n,)``.
    lengthscale, outputscale
        RBF hyper-parameters (positive).
    noise
        Observation-noise variance (positive).
    """

    x: np.ndarray
    y: np.ndarray
    lengthscale: float
    outputscale: float
    noise: float

    @classmethod
    def checked(cls, x: np.ndarray, y: np.ndarray, *, lengthscale: float, outputscale: float, noise: float) -> GPData:
        """Check shapes and hyper-parameters (``ValueError`` on a bad one) and build the record."""
        x = as_2d("x", x)
        y = as_1d("y", y, n=x.shape[0])
        return cls(x=x, y=y, lengthscale=check_positive("lengthscale", lengthscale),
                   outputscale=check_positive("outputscale", outputscale), noise=check_positive("noise", noise))


class GPPosteriorMean:
    """Exact posterior mean of a zero-mean RBF GP with fixed hyper-parameters.

    Parameters
    ----------
    x
        Training designs, shape ``(n, d)``.
    y
        Training scores, shape ``(n,)``.
    lengthscale, outputscale
        RBF hyper-parameters (not fitted).
    noise
        Observation-noise variance added to the diagonal.
    """

    def __init__(
        self, x: np.ndarray, y: np.ndarray, *, lengthscale: float = 1.0, outputscale: float = 1.0, noise: float = 0.01
    ) -> None:
        data = GPData.checked(x, y, lengthscale=lengthscale, outputscale=outputscale, noise=noise)
        x, y, self.lengthscale, self.outputscale, self.noise = data.x, data.y, data.lengthscale, data.outputscale, data.noise
        self.x_train = torch.as_tensor(x, dtype=torch.float64)
        k = rbf_kernel(self.x_train, self.x_train, self.lengthscale, self.outputscale)
        k = k + self.noise * torch.eye(k.shape[0], dtype=torch.float64)
        chol = torch.linalg.cholesky(k)
        self.alpha = torch.cholesky_solve(torch.as_tensor(y, dtype=torch.float64)[:, None], chol)[:, 0]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Posterior mean at ``x`` (float64), shape ``(m,)``."""
        x = torch.as_tensor(x, dtype=torch.float64)
        return rbf_kernel(x, self.x_train, self.lengthscale, self.outputscale) @ self.alpha

    @torch.no_grad()
    def value_and_grad(self, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and its analytic gradient w.r.t. ``x``, computed in ``dtype``.

        ``grad mu(x) = (1/l^2) sum_j alpha_j k(x, X_j) (X_j - x)``.

        Parameters
        ----------
        x
            Designs, shape ``(m, d)``.
        dtype
            Working precision (float32 is ~3x faster on CPU).

        Returns
        -------
        value, grad
            Shapes ``(m,)`` and ``(m, d)``.
        """
        x = torch.as_tensor(x, dtype=dtype)
        xt, al = self.x_train.to(dtype), self.alpha.to(dtype)
        ka = rbf_kernel(x, xt, self.lengthscale, self.outputscale) * al
        value = ka.sum(1)
        grad = (ka @ xt - value[:, None] * x) / self.lengthscale**2
        return value, grad


class RFFPosteriorSample:
    """One GP posterior sample, drawn with random Fourier features.

    Features ``phi(x) = sqrt(2 s / M) cos(Omega x + b)`` with
    ``Omega ~ N(0, I / l^2)``, ``b ~ U[0, 2 pi)`` approximate the RBF kernel;
    with prior ``w ~ N(0, I)`` and ``y = Phi w + N(0, noise)``, the weights are
    drawn from their Gaussian posterior and ``f(x) = phi(x) . w``.

    Parameters
    ----------
    x, y
        Training data.
    lengthscale, outputscale, noise
        Hyper-parameters.
    n_features
        Number of features ``M``.
    seed
        Seed of the features and of the posterior draw.
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        lengthscale: float = 1.0,
        outputscale: float = 1.0,
        noise: float = 0.01,
        n_features: int = 512,
        seed: int = 0,
    ) -> None:
        data = GPData.checked(x, y, lengthscale=lengthscale, outputscale=outputscale, noise=noise)
        x, y, self.lengthscale, self.outputscale, self.noise = data.x, data.y, data.lengthscale, data.outputscale, data.noise
        m = check_positive_int("n_features", n_features)
        gen = torch.Generator().manual_seed(int(seed))
        self.omega = torch.randn(m, x.shape[1], generator=gen, dtype=torch.float64) / self.lengthscale
        self.phase = 2.0 * np.pi * torch.rand(m, generator=gen, dtype=torch.float64)
        self.scale = float(np.sqrt(2.0 * self.outputscale / m))
        phi = self._features(torch.as_tensor(x, dtype=torch.float64))
        a = phi.T @ phi / self.noise + torch.eye(m, dtype=torch.float64)
        chol = torch.linalg.cholesky(a)
        mean = torch.cholesky_solve((phi.T @ torch.as_tensor(y, dtype=torch.float64))[:, None] / self.noise, chol)[:, 0]
        z = torch.randn(m, 1, generator=gen, dtype=torch.float64)
        # if A = L L^T then L^{-T} z ~ N(0, A^{-1})
        self.weight = mean + torch.linalg.solve_triangular(chol.T, z, upper=True)[:, 0]

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.cos(x @ self.omega.T + self.phase)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The sample at ``x`` (float64), shape ``(m,)``."""
        return self._features(torch.as_tensor(x, dtype=torch.float64)) @ self.weight

    @torch.no_grad()
    def value_and_grad(self, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """The sample and its analytic gradient w.r.t. ``x``, computed in ``dtype``.

        Parameters
        ----------
        x
            Designs, shape ``(m, d)``.
        dtype
            Working precision.

        Returns
        -------
        value, grad
            Shapes ``(m,)`` and ``(m, d)``.
        """
        x = torch.as_tensor(x, dtype=dtype)
        om, ph, w = self.omega.to(dtype), self.phase.to(dtype), self.weight.to(dtype)
        z = x @ om.T + ph
        value = self.scale * torch.cos(z) @ w
        grad = -self.scale * (torch.sin(z) * w) @ om
        return value, grad


@dataclass(frozen=True, kw_only=True)
class GPPrior:
    """How ROOT's synthetic functions are drawn.

    Member ``i`` has ``l = lengthscale + delta_lengthscale * U(-1, 1)`` and
    ``s = outputscale + delta_outputscale * U(-1, 1)`` (ROOT's defaults:
    1.0, 1.0, 0.25, 0.25, noise 0.01).

    Attributes
    ----------
    n_functions
        Ensemble size.
    lengthscale, outputscale
        Centres of the hyper-parameter draws.
    delta_lengthscale, delta_outputscale
        Half-widths of the uniform draws (each must leave the value > 0).
    noise
        Noise variance.
    kind
        ``"posterior_mean"`` or ``"rff_sample"``.
    n_features
        Features per RFF sample.
    """

    n_functions: int = 8
    lengthscale: float = 1.0
    outputscale: float = 1.0
    delta_lengthscale: float = 0.25
    delta_outputscale: float = 0.25
    noise: float = 0.01
    kind: str = "posterior_mean"
    n_features: int = 512


def gp_ensemble(x: np.ndarray, y: np.ndarray, prior: GPPrior | None = None, *, seed: int = 0) -> list[SyntheticGP]:
    """Build ``prior.n_functions`` GPs on ``(x, y)`` with sampled hyper-parameters.

    Parameters
    ----------
    x, y
        Offline data (normally z-scored).
    prior
        How the members are drawn (default :class:`GPPrior`).
    seed
        Seed of the hyper-parameter draws (and RFF samples).

    Returns
    -------
    list
        The synthetic functions; each has ``lengthscale`` and ``outputscale`` attributes.
    """
    p = prior or GPPrior()
    n_functions, kind, lengthscale, outputscale = p.n_functions, p.kind, p.lengthscale, p.outputscale
    delta_lengthscale, delta_outputscale, noise, n_features = p.delta_lengthscale, p.delta_outputscale, p.noise, p.n_features
    n_functions = check_positive_int("n_functions", n_functions)
    check_choice("kind", kind, GP_KINDS)
    dl = check_nonneg("delta_lengthscale", delta_lengthscale)
    ds = check_nonneg("delta_outputscale", delta_outputscale)
    if dl >= lengthscale:
        raise ValueError(f"delta_lengthscale must be < lengthscale so every draw is > 0, got {dl} >= {lengthscale}")
    if ds >= outputscale:
        raise ValueError(f"delta_outputscale must be < outputscale so every draw is > 0, got {ds} >= {outputscale}")
    rng = np.random.default_rng(derive_seed(seed, 40))
    members: list[SyntheticGP] = []
    for i in range(n_functions):
        ls = lengthscale + dl * rng.uniform(-1.0, 1.0)
        os_ = outputscale + ds * rng.uniform(-1.0, 1.0)
        if kind == "posterior_mean":
            members.append(GPPosteriorMean(x, y, lengthscale=ls, outputscale=os_, noise=noise))
        else:
            members.append(
                RFFPosteriorSample(
                    x, y, lengthscale=ls, outputscale=os_, noise=noise, n_features=n_features, seed=derive_seed(seed, 41, i)
                )
            )
    return members


@dataclass(kw_only=True)
class DesignPairs:
    """Pairs of designs from the same seed, one descended and one ascended.

    Attributes
    ----------
    x_low, x_high
        Designs, shape ``(m, d)``.
    y_low, y_high
        The synthetic function's values there, shape ``(m,)``.
    function_index
        Which ensemble member produced each pair, shape ``(m,)``.
    """

    x_low: np.ndarray
    x_high: np.ndarray
    y_low: np.ndarray
    y_high: np.ndarray
    function_index: np.ndarray

    def __len__(self) -> int:
        return int(self.x_low.shape[0])

    @staticmethod
    def concat(parts: list["DesignPairs"]) -> "DesignPairs":
        """Concatenate several sets of pairs."""
        if not parts:
            raise ValueError("parts must not be empty")
        fields = ("x_low", "x_high", "y_low", "y_high", "function_index")
        return DesignPairs(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in fields})


def sample_design_pairs(
    fn: Callable[[torch.Tensor], torch.Tensor],
    seeds: np.ndarray,
    *,
    steps: int = 100,
    lr: float = 1e-3,
    threshold: float = 1e-3,
    function_index: int = 0,
) -> DesignPairs:
    """Descend and ascend ``fn`` from each seed by plain gradient steps; keep clear pairs.

    From each seed ``x0``: ``x_low <- x_low - lr grad fn(x_low)`` and
    ``x_high <- x_high + lr grad fn(x_high)`` for ``steps`` steps; a pair is kept
    iff ``fn(x_high) - fn(x_low) > threshold`` (so ``lr = 0`` keeps none).
    If ``fn`` has a ``value_and_grad`` method (the GPs here do) the climb uses
    its analytic gradient in float32; otherwise autograd in float64.  The
    final values are evaluated in float64.

    Parameters
    ----------
    fn
        Differentiable synthetic function.
    seeds
        Starting designs, shape ``(m, d)``.
    steps, lr
        Gradient steps and step size.
    threshold
        Minimum gap ``fn(x_high) - fn(x_low)``.
    function_index
        Recorded in the result.

    Returns
    -------
    DesignPairs
        The kept pairs.
    """
    seeds = as_2d("seeds", seeds)
    steps = check_positive_int("steps", steps, minimum=0)
    lr = check_nonneg("lr", lr)
    m = seeds.shape[0]
    analytic = getattr(fn, "value_and_grad", None)
    dtype = torch.float32 if analytic is not None else torch.float64
    x = torch.as_tensor(np.concatenate([seeds, seeds]), dtype=dtype)
    sign = torch.cat([-torch.ones(m, dtype=dtype), torch.ones(m, dtype=dtype)])[:, None]
    for _ in range(steps):
        if analytic is not None:
            _, g = analytic(x, dtype)
        else:
            xr = x.clone().requires_grad_(True)
            (g,) = torch.autograd.grad(fn(xr).sum(), xr)
        x = x + lr * sign * g
    with torch.no_grad():
        vals = fn(x.double()).double()
    y_low, y_high = vals[:m].numpy(), vals[m:].numpy()
    keep = (y_high - y_low) > threshold
    xn = x.double().numpy()
    return DesignPairs(
        x_low=xn[:m][keep],
        x_high=xn[m:][keep],
        y_low=y_low[keep],
        y_high=y_high[keep],
        function_index=np.full(int(keep.sum()), function_index),
    )


@dataclass(frozen=True, kw_only=True)
class PairClimb:
    """How ROOT climbs each synthetic function to make its pairs.

    Attributes
    ----------
    n_seeds
        Seeds per function: the ``n_seeds`` highest-scoring offline designs
        (ROOT's ``type_of_initial_points: highest``).
    steps, lr, threshold
        See :func:`sample_design_pairs`.
    max_points
        If set and smaller than the offline set, the GPs are fitted to a seeded
        random subset of this size (ROOT does this for its largest task; here it
        bounds CPU cost).  The seeds are always the best offline designs.
    """

    n_seeds: int = 512
    steps: int = 100
    lr: float = 1e-3
    threshold: float = 1e-3
    max_points: int | None = None


def build_root_pairs(
    x: np.ndarray, y: np.ndarray, prior: GPPrior | None = None, climb: PairClimb | None = None, *, seed: int = 0
) -> DesignPairs:
    """ROOT's training pairs: an ensemble of GPs, each climbed both ways from the best designs.

    Parameters
    ----------
    x, y
        Offline data (z-scored).
    prior
        The GP ensemble (:func:`gp_ensemble`).
    climb
        Seeds, steps and the fitting subset (default :class:`PairClimb`).
    seed
        Seed of the ensemble (and of the subset).

    Returns
    -------
    DesignPairs
        All kept pairs, function by function.
    """
    c = climb or PairClimb()
    n_seeds, max_points = c.n_seeds, c.max_points
    x = as_2d("x", x)
    y = as_1d("y", y, n=x.shape[0])
    n_seeds = check_positive_int("n_seeds", n_seeds)
    seeds = x[np.argsort(-y, kind="stable")[: min(n_seeds, x.shape[0])]]
    if max_points is not None and check_positive_int("max_points", max_points) < x.shape[0]:
        sub = np.random.default_rng(derive_seed(seed, 42)).choice(x.shape[0], size=max_points, replace=False)
        x, y = x[np.sort(sub)], y[np.sort(sub)]
    ens = gp_ensemble(x, y, prior, seed=seed)
    parts = [sample_design_pairs(f, seeds, steps=c.steps, lr=c.lr, threshold=c.threshold, function_index=i)
             for i, f in enumerate(ens)]
    return DesignPairs.concat(parts)
