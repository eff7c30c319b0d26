"""Surrogate models and their trainer, with a pluggable regulariser hook.

A *regulariser* is any callable ``reg(model, x, y) -> torch.Tensor`` returning a
scalar that the trainer adds to the data loss of every mini-batch (it carries
its own weight).  :class:`repro.offopt.regularizers.SensitivityRegularizer`
(BOSS) and :class:`repro.offopt.regularizers.SharpnessRegularizer` (IGNITE)
plug in there.

Determinism: the model's initial weights come from ``torch.manual_seed`` inside
:func:`torch.random.fork_rng` (the global RNG is left untouched) and the batch
order from a private :class:`torch.Generator`; regularisers draw from their own
generators.  So a run is a pure function of its seeds, and a regulariser that
contributes exactly zero leaves the trained weights bitwise unchanged.

Devices: :func:`train_surrogate` trains on its ``device`` (``cpu``, ``cuda`` or
``auto``, see :mod:`repro.devices`) and hands the model back on the CPU, where
the optimisers and diagnostics use it.  Weights are initialised and batches
ordered on the CPU, so every device starts from the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, TypeVar

import numpy as np
import torch
from torch import nn

from repro.devices import resolve_device
from repro.models import ACTIVATIONS
from repro.offopt.seeds import derive_seed
from repro.validation import (
    as_1d,
    as_2d,
    check_choice,
    check_nonneg,
    check_positive,
    check_positive_int,
)

T = TypeVar("T")

LOSSES = ("mse", "nll")


class Regularizer(Protocol):
    """The hook signature: a scalar penalty (already weighted) for one batch."""

    def __call__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Return the penalty to add to the batch loss."""
        ...


def seeded(factory: Callable[[], T], seed: int) -> T:
    """Call ``factory`` with the global torch RNG seeded, then restore the RNG.

    Parameters
    ----------
    factory
        Builds something that draws from torch's global RNG (e.g. a module).
    seed
        The seed.

    Returns
    -------
    T
        Whatever ``factory`` returns.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return factory()




def make_mlp(in_dim: int, out_dim: int, hidden: Sequence[int] = (64, 64), activation: str = "relu") -> nn.Sequential:
    """A plain MLP ``in_dim -> hidden... -> out_dim``.

    Parameters
    ----------
    in_dim, out_dim
        Input and output widths.
    hidden
        Hidden widths (may be empty: a linear model).
    activation
        One of :data:`ACTIVATIONS`.

    Returns
    -------
    torch.nn.Sequential
        The network (default torch initialisation).
    """
    check_positive_int("in_dim", in_dim)
    check_positive_int("out_dim", out_dim)
    check_choice("activation", activation, tuple(ACTIVATIONS))
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, check_positive_int("hidden", h)), ACTIVATIONS[activation]()]
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


class MLPSurrogate(nn.Module):
    """An MLP regressor ``g(x; beta)``; optionally Gaussian (mean and log-variance heads).

    Parameters
    ----------
    in_dim
        Design dimension.
    hidden
        Hidden widths.
    activation
        Activation name.
    gaussian
        If ``True`` the network has two outputs, mean and log-variance, and can
        be trained with the Gaussian negative log-likelihood (design-baselines'
        probabilistic MLP).

    Notes
    -----
    ``forward`` always returns the mean, shape ``(n,)``, so optimisers and
    regularisers treat deterministic and Gaussian surrogates alike.
    """

    LOGVAR_MIN = -10.0
    LOGVAR_MAX = 4.0

    def __init__(
        self, in_dim: int, hidden: Sequence[int] = (64, 64), activation: str = "relu", gaussian: bool = False
    ) -> None:
        super().__init__()
        self.gaussian = bool(gaussian)
        self.net = make_mlp(in_dim, 2 if self.gaussian else 1, hidden, activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted mean, shape ``(n,)``."""
        return self.net(x)[:, 0]

    def mean_logvar(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and (soft-clamped) log-variance, each shape ``(n,)``."""
        if not self.gaussian:
            raise ValueError("mean_logvar needs a surrogate built with gaussian=True")
        out = self.net(x)
        lo, hi = self.LOGVAR_MIN, self.LOGVAR_MAX
        logvar = lo + (hi - lo) * torch.sigmoid(out[:, 1])
        return out[:, 0], logvar


class EnsembleSurrogate(nn.Module):
    """The mean of several surrogates' predictions (design-baselines' mean ensemble).

    Parameters
    ----------
    members
        The trained surrogates.
    reduce
        ``"mean"`` or ``"min"`` over members.
    """

    def __init__(self, members: Sequence[nn.Module], reduce: str = "mean") -> None:
        super().__init__()
        if len(members) < 1:
            raise ValueError("members must hold at least one model")
        self.members = nn.ModuleList(members)
        self.reduce = check_choice("reduce", reduce, ("mean", "min"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reduced prediction, shape ``(n,)``."""
        preds = torch.stack([m(x) for m in self.members], dim=0)
        return preds.mean(dim=0) if self.reduce == "mean" else preds.min(dim=0).values


def data_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss: str = "mse") -> torch.Tensor:
    """Mean data loss of a batch: squared error, or Gaussian NLL (up to a constant).

    Parameters
    ----------
    model
        The surrogate (must be an :class:`MLPSurrogate` with ``gaussian=True`` for ``"nll"``).
    x, y
        Batch, shapes ``(b, d)`` and ``(b,)``.
    loss
        ``"mse"`` or ``"nll"``.

    Returns
    -------
    torch.Tensor
        Scalar loss.
    """
    if loss == "mse":
        return torch.mean((model(x) - y) ** 2)
    if loss == "nll":
        if not isinstance(model, MLPSurrogate):
            raise ValueError("loss='nll' needs an MLPSurrogate built with gaussian=True")
        mean, logvar = model.mean_logvar(x)
        return torch.mean(0.5 * (logvar + (y - mean) ** 2 * torch.exp(-logvar)))
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")


@dataclass(kw_only=True)
class TrainResult:
    """A trained surrogate and its per-epoch log.

    Attributes
    ----------
    model
        The trained surrogate (in eval mode).
    history
        One dict per epoch: ``epoch``, ``loss`` (mean data loss), ``penalty``
        (mean regulariser value, 0 without one).
    """

    model: nn.Module
    history: list[dict[str, float]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class TrainSettings:
    """How a surrogate is built and fitted.

    Attributes
    ----------
    hidden, activation
        Architecture of the default :class:`MLPSurrogate` (ignored when a ready model is trained).
    loss
        ``"mse"`` or ``"nll"`` (the latter builds a Gaussian surrogate).
    epochs, batch_size, lr, weight_decay
        Optimisation settings (Adam).
    dtype
        Floating type of the data and the new model.
    device
        Where to train: ``cpu``, ``cuda`` or ``auto``.  The model is back on the CPU on return.
    """

    hidden: Sequence[int] = (64, 64)
    activation: str = "relu"
    loss: str = "mse"
    epochs: int = 50
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    dtype: torch.dtype = torch.float32
    device: str = "cpu"


def train_surrogate(
    x: np.ndarray,
    y: np.ndarray,
    settings: TrainSettings | None = None,
    *,
    regularizer: Regularizer | None = None,
    seed: int = 0,
    model: nn.Module | None = None,
) -> TrainResult:
    """Fit a surrogate to ``(x, y)`` with Adam, adding ``regularizer`` to each batch loss.

    Parameters
    ----------
    x
        Designs (normally z-scored), shape ``(n, d)``.
    y
        Scores (normally z-scored), shape ``(n,)``.
    settings
        Architecture and optimisation (default :class:`TrainSettings`).
    regularizer
        Optional hook ``reg(model, xb, yb) -> scalar``, added to the loss.
    seed
        Seed of the initial weights and of the batch order.
    model
        A ready model to train instead of a new :class:`MLPSurrogate`.

    Returns
    -------
    TrainResult
        The model (on the CPU) and its training log.
    """
    cfg = settings or TrainSettings()
    x = as_2d("x", x)
    y = as_1d("y", y, n=x.shape[0])
    loss = check_choice("loss", cfg.loss, LOSSES)
    epochs = check_positive_int("epochs", cfg.epochs)
    batch_size = check_positive_int("batch_size", cfg.batch_size)
    lr = check_positive("lr", cfg.lr)
    weight_decay = check_nonneg("weight_decay", cfg.weight_decay)
    dtype = cfg.dtype
    if model is None:
        model = seeded(lambda: MLPSurrogate(x.shape[1], cfg.hidden, cfg.activation, gaussian=(loss == "nll")),
                       derive_seed(seed, 10))
        model = model.to(dtype)
    else:
        dtype = next(model.parameters()).dtype
    dev = resolve_device(cfg.device)
    model.to(dev)
    xt = torch.as_tensor(x, dtype=dtype).to(dev)
    yt = torch.as_tensor(y, dtype=dtype).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(derive_seed(seed, 11))
    history: list[dict[str, float]] = []
    model.train()
    for epoch in range(epochs):
        perm = torch.randperm(xt.shape[0], generator=gen)
        tot_loss, tot_pen, n_batches = 0.0, 0.0, 0
        for start in range(0, xt.shape[0], batch_size):
            idx = perm[start : start + batch_size].to(dev)
            xb, yb = xt[idx], yt[idx]
            opt.zero_grad(set_to_none=True)
            base = data_loss(model, xb, yb, loss)
            total = base
            if regularizer is not None:
                penalty = regularizer(model, xb, yb)
                total = base + penalty
                tot_pen += float(penalty.detach())
            total.backward()
            opt.step()
            tot_loss += float(base.detach())
            n_batches += 1
        history.append({"epoch": float(epoch), "loss": tot_loss / n_batches, "penalty": tot_pen / n_batches})
    model.to("cpu")
    model.eval()
    return TrainResult(model=model, history=history)


def train_members(
    x: np.ndarray,
    y: np.ndarray,
    n_models: int = 3,
    settings: TrainSettings | None = None,
    *,
    seed: int = 0,
    regularizer_factory: Callable[[int], Regularizer | None] | None = None,
) -> list[nn.Module]:
    """Train ``n_models`` surrogates that differ only in their seeds (the members of an ensemble).

    Parameters
    ----------
    x, y
        Training data.
    n_models
        Ensemble size.
    settings
        Architecture and optimisation of every member.
    seed
        Base seed; member ``i`` uses ``derive_seed(seed, 100 + i)``.
    regularizer_factory
        ``i -> `` the regulariser of member ``i`` (each member gets its own stateful one), or ``None``.

    Returns
    -------
    list of nn.Module
        The trained members (in eval mode, on the CPU).
    """
    n_models = check_positive_int("n_models", n_models)
    return [
        train_surrogate(x, y, settings, seed=derive_seed(seed, 100 + i),
                        regularizer=regularizer_factory(i) if regularizer_factory is not None else None).model
        for i in range(n_models)
    ]


def train_ensemble(
    x: np.ndarray,
    y: np.ndarray,
    n_models: int = 3,
    settings: TrainSettings | None = None,
    *,
    seed: int = 0,
    reduce: str = "mean",
    regularizer_factory: Callable[[int], Regularizer | None] | None = None,
) -> EnsembleSurrogate:
    """Train ``n_models`` surrogates from different seeds (:func:`train_members`) and reduce them.

    Parameters
    ----------
    x, y, n_models, settings, seed, regularizer_factory
        See :func:`train_members`.
    reduce
        ``"mean"`` or ``"min"``.

    Returns
    -------
    EnsembleSurrogate
        The ensemble.
    """
    members = train_members(x, y, n_models, settings, seed=seed, regularizer_factory=regularizer_factory)
    ens = EnsembleSurrogate(members, reduce)
    ens.eval()
    return ens


@torch.no_grad()
def predict(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """Evaluate a surrogate on numpy designs.

    Parameters
    ----------
    model
        The surrogate.
    x
        Designs, shape ``(n, d)``.

    Returns
    -------
    numpy.ndarray
        Predictions, shape ``(n,)``, float64.
    """
    dtype = next(model.parameters()).dtype
    return model(torch.as_tensor(as_2d("x", x), dtype=dtype)).double().numpy()
