"""A Brownian-bridge diffusion model with classifier-free guidance (BBDM-style), for any family.

Public API (stable):
    ``BridgeSchedule(n_timesteps, m_min, m_max, max_var)``: the ``m_t`` / ``var_t`` schedule;
        ``q_sample`` and ``bridge_marginal`` draw the forward bridge.
    ``train_bridge(denoiser, x_source, x_target, cond, BridgeTraining(schedule=..., epochs=..., ...),
        pairs_for_epoch=None) -> BridgeTrainResult`` (``model``, ``ema_model``, ``history``).
    ``bridge_sample(denoiser, x_source, cond, BridgeSampling(schedule=..., n_steps=..., eta=..., guidance=...))``:
        reverse walk from source to target estimates.
    ``MLPDenoiser(dim, cond_dim, hidden, n_timesteps, activation)``: a vector denoiser; any module
        ``denoiser(x_t, t, cond)`` works (condition tensors may be vectors or image-shaped maps).
    Helpers: ``guided_prediction`` (classifier-free guidance), ``drop_condition``, ``sampling_steps``, ``EMA``.

Devices: the denoiser computes wherever it was moved (``denoiser.to(device)``).
:func:`train_bridge` and :func:`bridge_sample` draw every random number (batch
orders, steps, noise, condition drops) on the CPU and move the batches to the
denoiser's device, so a run sees the same draws on every device;
:func:`bridge_sample` returns its samples on ``x_source``'s device.

General over shapes: designs are tensors ``(B, ...)`` (vectors for offline
optimisation, images for an image-to-image translation), and the denoiser is any module called as
``denoiser(x_t, t, cond)`` with integer steps ``t`` of shape ``(B,)`` and a
conditioning tensor ``cond`` of shape ``(B, c)`` (or ``None``).

Convention (ROOT / BBDM)
------------------------
The bridge runs between a *target* ``x_0`` (e.g. a high-scoring design, or a
PET image) at ``t = 0`` and a *source* ``x_T`` (a low-scoring design, a CT
image) at ``t = T - 1``.  With ``m_t`` rising linearly from ``m_min`` to
``m_max`` and ``var_t = 2 max_var (m_t - m_t^2)``, the forward marginal is

    x_t = (1 - m_t) x_0 + m_t x_T + sqrt(var_t) eps.

So in normalised time ``s = t / (T - 1)`` the marginal hits the target at
``s = 0`` and the source at ``s = 1`` exactly when ``m_min = 0`` and
``m_max = 1`` (ROOT's defaults 0.001 / 0.999 leave a variance of ~0.002 at the
ends).  The network regresses the ``"grad"`` objective
``x_t - x_0 = m_t (x_T - x_0) + sqrt(var_t) eps``.

Sampling starts at ``x_T = x_source`` and walks a decreasing sub-sequence of
steps; ``eta`` scales the injected noise, and ``eta = 0`` is deterministic.
Classifier-free guidance: during training ``cond`` is replaced by a null
condition (zeros by default, as ROOT) with probability ``p_uncond``; at
sampling ``pred = (1 + w) f(x, t, cond) - w f(x, t, null)``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from repro.models import ACTIVATIONS
from repro.validation import (
    check_choice,
    check_nonneg,
    check_open_interval,
    check_positive,
    check_positive_int,
)

PairSource = Callable[[int], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]
"""``epoch -> (x_source, x_target, cond)``: fresh training pairs for one epoch of :func:`train_bridge`."""


@dataclass(frozen=True, kw_only=True)
class BridgeSchedule:
    """The bridge's ``m_t`` and ``var_t`` over ``t = 0 .. T-1``.

    Attributes
    ----------
    n_timesteps
        ``T``.
    m_min, m_max
        ``m_0`` and ``m_{T-1}`` (``0 <= m_min < m_max <= 1``).
    max_var
        Peak variance scale: ``var_t = 2 max_var (m_t - m_t^2)``, at most
        ``max_var / 2`` (at ``m_t = 0.5``).
    """

    n_timesteps: int = 1000
    m_min: float = 0.001
    m_max: float = 0.999
    max_var: float = 1.0

    def __post_init__(self) -> None:
        check_positive_int("n_timesteps", self.n_timesteps, minimum=2)
        if not (0.0 <= self.m_min < self.m_max <= 1.0):
            raise ValueError(f"m_min and m_max must satisfy 0 <= m_min < m_max <= 1, got m_min={self.m_min}, m_max={self.m_max}")
        check_nonneg("max_var", self.max_var)

    @property
    def m(self) -> torch.Tensor:
        """``m_t`` for every step, float64, shape ``(T,)``."""
        return torch.linspace(self.m_min, self.m_max, self.n_timesteps, dtype=torch.float64)

    @property
    def var(self) -> torch.Tensor:
        """``var_t`` for every step, float64, shape ``(T,)`` (clamped at 0)."""
        m = self.m
        return torch.clamp(2.0 * self.max_var * (m - m * m), min=0.0)


def _bcast(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape a per-sample vector ``(B,)`` to broadcast against ``like`` ``(B, ...)``."""
    return v.to(device=like.device, dtype=like.dtype).reshape(-1, *([1] * (like.ndim - 1)))


def bridge_marginal(
    x_target: torch.Tensor, x_source: torch.Tensor, m: torch.Tensor, var: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """``(1 - m) x_target + m x_source + sqrt(var) noise`` with per-sample ``m``, ``var``.

    Parameters
    ----------
    x_target, x_source, noise
        Tensors of shape ``(B, ...)``.
    m, var
        Shape ``(B,)`` (or scalars).

    Returns
    -------
    torch.Tensor
        ``x_t``, shape ``(B, ...)``.
    """
    m = _bcast(torch.as_tensor(m).expand(x_target.shape[0]), x_target)
    var = _bcast(torch.as_tensor(var).expand(x_target.shape[0]), x_target)
    return (1.0 - m) * x_target + m * x_source + torch.sqrt(var) * noise


def q_sample(
    schedule: BridgeSchedule,
    x_target: torch.Tensor,
    x_source: torch.Tensor,
    t: torch.Tensor,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``x_t`` from the forward bridge and return it with the ``"grad"`` objective.

    Parameters
    ----------
    schedule
        The bridge schedule.
    x_target, x_source
        Endpoints, shape ``(B, ...)``.
    t
        Integer steps in ``[0, T)``, shape ``(B,)``.
    noise
        Standard normal noise (drawn from ``generator`` if omitted).
    generator
        Random generator for the noise.

    Returns
    -------
    x_t, objective
        ``x_t`` and ``x_t - x_target = m_t (x_source - x_target) + sqrt(var_t) noise``.
    """
    if noise is None:
        noise = torch.randn(x_target.shape, generator=generator, dtype=x_target.dtype).to(x_target.device)
    t = torch.as_tensor(t, dtype=torch.long, device="cpu")
    if t.min() < 0 or t.max() >= schedule.n_timesteps:
        raise ValueError(f"t must lie in [0, {schedule.n_timesteps}), got values in [{int(t.min())}, {int(t.max())}]")
    m, var = schedule.m[t], schedule.var[t]
    x_t = bridge_marginal(x_target, x_source, m, var, noise)
    mb, vb = _bcast(m, x_target), _bcast(var, x_target)
    return x_t, mb * (x_source - x_target) + torch.sqrt(vb) * noise


class MLPDenoiser(nn.Module):
    """ROOT's MLP denoiser: ``[x_t, t / T, cond] -> hidden... -> dim`` (Swish by default).

    Parameters
    ----------
    dim
        Design dimension.
    cond_dim
        Width of the conditioning vector (0 for none).
    hidden
        Hidden widths (ROOT: three layers of 1024).
    n_timesteps
        ``T``, used to scale the step input to ``[0, 1)``.
    activation
        Activation name (``"silu"`` is Swish).
    """

    def __init__(
        self,
        dim: int,
        cond_dim: int = 0,
        hidden: Sequence[int] = (256, 256, 256),
        n_timesteps: int = 1000,
        activation: str = "silu",
    ) -> None:
        super().__init__()
        self.dim = check_positive_int("dim", dim)
        self.cond_dim = check_positive_int("cond_dim", cond_dim, minimum=0)
        self.n_timesteps = check_positive_int("n_timesteps", n_timesteps)
        check_choice("activation", activation, tuple(ACTIVATIONS))
        layers: list[nn.Module] = []
        width = dim + 1 + cond_dim
        for h in hidden:
            layers += [nn.Linear(width, h), ACTIVATIONS[activation]()]
            width = h
        layers.append(nn.Linear(width, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """Predict the objective, shape ``(B, dim)``."""
        tt = (t.to(x_t.dtype) / self.n_timesteps)[:, None]
        parts = [x_t, tt]
        if self.cond_dim:
            if cond is None:
                raise ValueError(f"cond is required: this denoiser was built with cond_dim={self.cond_dim}")
            parts.append(cond.to(x_t.dtype))
        return self.net(torch.cat(parts, dim=1))


class EMA:
    """Exponential moving average of a model's parameters (buffers are copied).

    Parameters
    ----------
    model
        The model to track; a frozen deep copy is kept in :attr:`model`.
    decay
        ``theta_ema <- decay theta_ema + (1 - decay) theta``.
    """

    def __init__(self, model: nn.Module, decay: float = 0.995) -> None:
        self.decay = check_open_interval("decay", decay, -1e-12, 1.0)
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Blend ``model``'s current parameters into the average."""
        for pe, p in zip(self.model.parameters(), model.parameters()):
            pe.mul_(self.decay).add_(p.detach(), alpha=1.0 - self.decay)
        for be, b in zip(self.model.buffers(), model.buffers()):
            be.copy_(b)

    @torch.no_grad()
    def reset(self, model: nn.Module) -> None:
        """Copy ``model``'s parameters into the average."""
        for pe, p in zip(self.model.parameters(), model.parameters()):
            pe.copy_(p.detach())


def drop_condition(
    cond: torch.Tensor, p_uncond: float, generator: torch.Generator, null_cond: torch.Tensor | None = None
) -> torch.Tensor:
    """Replace each row of ``cond`` by the null condition with probability ``p_uncond``.

    Parameters
    ----------
    cond
        Conditions, shape ``(B, c)``.
    p_uncond
        Drop probability in ``[0, 1]``.
    generator
        Random generator.
    null_cond
        The null condition, broadcastable to ``cond`` (zeros if omitted).

    Returns
    -------
    torch.Tensor
        The conditions with dropped rows replaced.
    """
    if not 0.0 <= p_uncond <= 1.0:
        raise ValueError(f"p_uncond must lie in [0, 1], got {p_uncond}")
    null = torch.zeros_like(cond) if null_cond is None else torch.as_tensor(null_cond, dtype=cond.dtype,
                                                                             device=cond.device).expand_as(cond)
    drop = torch.rand(cond.shape[0], generator=generator) < p_uncond
    return torch.where(_bcast(drop, cond).bool(), null, cond)


@dataclass(kw_only=True)
class BridgeTrainResult:
    """A trained bridge denoiser.

    Attributes
    ----------
    model
        The denoiser after the last step.
    ema_model
        The EMA copy (use it for sampling), or ``model`` when EMA is off.
    history
        One dict per epoch: ``epoch``, ``loss``.
    """

    model: nn.Module
    ema_model: nn.Module
    history: list[dict[str, float]] = field(default_factory=list)


def _check_pairs(x_source: torch.Tensor, x_target: torch.Tensor, cond: torch.Tensor | None) -> int:
    """The number of training pairs, after checking that the three tensors agree."""
    if x_source.shape != x_target.shape:
        raise ValueError(
            f"x_source and x_target must have the same shape, got {tuple(x_source.shape)} and {tuple(x_target.shape)}"
        )
    n = x_source.shape[0]
    if n < 1:
        raise ValueError("x_source must hold at least one pair")
    if cond is not None and cond.shape[0] != n:
        raise ValueError(f"cond must have {n} rows, got {cond.shape[0]}")
    return n


@dataclass(frozen=True, kw_only=True)
class BridgeTraining:
    """How :func:`train_bridge` trains a denoiser.

    Attributes
    ----------
    schedule
        Bridge schedule.
    epochs, batch_size, lr
        Optimisation settings (Adam).
    p_uncond
        Classifier-free-guidance drop probability.
    loss
        ``"l1"`` or ``"l2"``.
    ema_decay
        EMA decay, or ``None`` to disable.
    ema_start
        Steps before the EMA starts tracking (it copies the model until then).
    null_cond
        The null condition (zeros by default).
    seed
        Seed of batches, steps, noise and condition drops.
    """

    schedule: BridgeSchedule = field(default_factory=BridgeSchedule)
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    p_uncond: float = 0.15
    loss: str = "l1"
    ema_decay: float | None = 0.995
    ema_start: int = 0
    null_cond: torch.Tensor | None = None
    seed: int = 0


def train_bridge(
    denoiser: nn.Module,
    x_source: torch.Tensor,
    x_target: torch.Tensor,
    cond: torch.Tensor | None = None,
    settings: BridgeTraining | None = None,
    *,
    pairs_for_epoch: PairSource | None = None,
) -> BridgeTrainResult:
    """Train ``denoiser`` to regress the bridge objective on ``(x_source, x_target)`` pairs.

    Each step draws ``t ~ U{0..T-1}`` and ``eps ~ N(0, I)`` per pair, forms
    ``x_t`` by :func:`q_sample`, drops conditions with probability ``p_uncond``
    and takes an Adam step on the L1 (ROOT) or L2 error.

    Parameters
    ----------
    denoiser
        Any module ``(x_t, t, cond) -> objective``; trained in place.
    x_source, x_target
        Paired endpoints, shape ``(n, ...)``.
    cond
        Conditions ``(n, c)``, or ``None`` for an unconditional bridge.
    settings
        Schedule, optimisation, guidance dropping, EMA and seed (default :class:`BridgeTraining`).
    pairs_for_epoch
        If given, called as ``pairs_for_epoch(epoch)`` before every epoch
        after the first; the epoch then trains on the ``(x_source, x_target,
        cond)`` it returns (any number of pairs) instead of the pairs passed
        in, which serve epoch 0 only.  ``None`` (the default) trains every
        epoch on the same pairs.

    Returns
    -------
    BridgeTrainResult
        The trained model, its EMA copy and the loss log.

    Notes
    -----
    The pairs may live on the CPU; each batch is drawn there and moved to
    the denoiser's device for the forward and backward passes.
    """
    cfg = settings or BridgeTraining()
    schedule, p_uncond, loss, null_cond, ema_decay, ema_start = (cfg.schedule, cfg.p_uncond, cfg.loss, cfg.null_cond,
                                                                   cfg.ema_decay, cfg.ema_start)
    epochs, batch_size, lr, seed = cfg.epochs, cfg.batch_size, cfg.lr, cfg.seed
    n = _check_pairs(x_source, x_target, cond)
    epochs = check_positive_int("epochs", epochs)
    batch_size = check_positive_int("batch_size", batch_size)
    lr = check_positive("lr", lr)
    check_choice("loss", loss, ("l1", "l2"))
    gen = torch.Generator().manual_seed(int(seed))
    dev = next(denoiser.parameters()).device
    opt = torch.optim.Adam(denoiser.parameters(), lr=lr)
    ema = EMA(denoiser, ema_decay) if ema_decay is not None else None
    history: list[dict[str, float]] = []
    step = 0
    denoiser.train()
    for epoch in range(epochs):
        if pairs_for_epoch is not None and epoch > 0:
            x_source, x_target, cond = pairs_for_epoch(epoch)
            n = _check_pairs(x_source, x_target, cond)
        perm = torch.randperm(n, generator=gen)
        total, batches = 0.0, 0
        for start in range(0, n, batch_size):
            idx = perm[start : start + batch_size]
            xs, xt = x_source[idx], x_target[idx]
            t = torch.randint(0, schedule.n_timesteps, (len(idx),), generator=gen)
            x_t, objective = q_sample(schedule, xt, xs, t, generator=gen)
            c = None if cond is None else drop_condition(cond[idx], p_uncond, gen, null_cond).to(dev)
            pred = denoiser(x_t.to(dev), t.to(dev), c)
            err = pred - objective.to(dev)
            batch_loss = err.abs().mean() if loss == "l1" else (err * err).mean()
            opt.zero_grad(set_to_none=True)
            batch_loss.backward()
            opt.step()
            step += 1
            if ema is not None:
                if step <= ema_start:
                    ema.reset(denoiser)
                else:
                    ema.update(denoiser)
            total += float(batch_loss.detach())
            batches += 1
        history.append({"epoch": float(epoch), "loss": total / batches})
    denoiser.eval()
    return BridgeTrainResult(model=denoiser, ema_model=ema.model if ema is not None else denoiser, history=history)


def sampling_steps(n_timesteps: int, n_steps: int) -> list[int]:
    """A decreasing sub-sequence of steps from ``T - 1`` to 0 (about ``n_steps`` long, distinct)."""
    n_steps = check_positive_int("n_steps", n_steps, minimum=2)
    raw = np.linspace(n_timesteps - 1, 0, min(n_steps, n_timesteps)).round().astype(int)
    return list(dict.fromkeys(int(v) for v in raw))


@torch.no_grad()
def guided_prediction(
    denoiser: nn.Module,
    x_t: torch.Tensor,
    t: torch.Tensor,
    cond: torch.Tensor | None,
    guidance: float,
    null_cond: torch.Tensor | None = None,
) -> torch.Tensor:
    """Classifier-free guidance ``(1 + w) f(x, t, cond) - w f(x, t, null)``.

    With ``w = 0`` (or no condition) this is exactly the conditional prediction.
    """
    pred = denoiser(x_t, t, cond)
    if cond is None or guidance == 0.0:
        return pred
    null = torch.zeros_like(cond) if null_cond is None else torch.as_tensor(null_cond, dtype=cond.dtype,
                                                                             device=cond.device).expand_as(cond)
    return (1.0 + guidance) * pred - guidance * denoiser(x_t, t, null)


@dataclass(frozen=True, kw_only=True)
class BridgeSampling:
    """How :func:`bridge_sample` walks the reverse bridge.

    Attributes
    ----------
    schedule
        The training schedule.
    n_steps
        Number of sampling steps (skip sampling).
    eta
        Noise scale (>= 0).
    guidance
        CFG weight ``w`` (ROOT: -1.5).
    null_cond
        Null condition (zeros by default).
    variance
        ``"bbdm"`` or ``"ddim"``.
    seed
        Seed of the injected noise.
    """

    schedule: BridgeSchedule = field(default_factory=BridgeSchedule)
    n_steps: int = 200
    eta: float = 0.2
    guidance: float = 0.0
    null_cond: torch.Tensor | None = None
    variance: str = "bbdm"
    seed: int = 0


@torch.no_grad()
def bridge_sample(
    denoiser: nn.Module,
    x_source: torch.Tensor,
    cond: torch.Tensor | None = None,
    settings: BridgeSampling | None = None,
) -> torch.Tensor:
    """Run the reverse bridge from ``x_source`` to an estimate of the target.

    For consecutive steps ``t > s`` of :func:`sampling_steps`: predict the
    objective ``o`` (with guidance), ``x0 = x_t - o``,
    ``e = (x_t - (1 - m_t) x0 - m_t x_T) / sqrt(var_t)`` (0 when ``var_t = 0``),
    ``sigma^2 = (var_t - var_s (1 - m_t)^2 / (1 - m_s)^2) var_s / var_t``, and

        x_s = (1 - m_s) x0 + m_s x_T + sqrt(var_s - c) e + eta sigma z,

    with ``c = sigma^2`` (``variance="bbdm"``, as the BBDM/ROOT code) or
    ``c = eta^2 sigma^2`` (``"ddim"``, the variance-preserving form).  At
    ``t = 0`` the sampler returns ``x0``.  ``eta = 0`` draws no noise, so it is
    deterministic.

    Parameters
    ----------
    denoiser
        Trained denoiser.
    x_source
        Starting points ``x_T``, shape ``(B, ...)``.
    cond
        Conditions ``(B, c)`` or ``None``.
    settings
        Schedule, steps, noise, guidance and seed (default :class:`BridgeSampling`).

    Returns
    -------
    torch.Tensor
        The samples, shape ``(B, ...)``, on ``x_source``'s device (the walk runs on the denoiser's).
    """
    cfg = settings or BridgeSampling()
    schedule, n_steps, guidance, null_cond, variance, seed = (cfg.schedule, cfg.n_steps, cfg.guidance, cfg.null_cond,
                                                              cfg.variance, cfg.seed)
    eta = check_nonneg("eta", cfg.eta)
    check_choice("variance", variance, ("bbdm", "ddim"))
    steps = sampling_steps(schedule.n_timesteps, n_steps)
    m_all, var_all = schedule.m, schedule.var
    gen = torch.Generator().manual_seed(int(seed))
    dev = next(denoiser.parameters()).device
    y = x_source.to(dev)
    x = y.clone()
    cond = None if cond is None else cond.to(dev)
    b = x.shape[0]
    for i, t in enumerate(steps):
        tt = torch.full((b,), t, dtype=torch.long, device=dev)
        x0 = x - guided_prediction(denoiser, x, tt, cond, guidance, null_cond)
        if i == len(steps) - 1:
            return x0.to(x_source.device)
        s = steps[i + 1]
        m_t, m_s = float(m_all[t]), float(m_all[s])
        v_t, v_s = float(var_all[t]), float(var_all[s])
        if v_t > 0:
            e = (x - (1.0 - m_t) * x0 - m_t * y) / np.sqrt(v_t)
            sigma2 = max((v_t - v_s * (1.0 - m_t) ** 2 / (1.0 - m_s) ** 2) * v_s / v_t, 0.0)
        else:
            e = torch.zeros_like(x)
            sigma2 = v_s
        c = sigma2 if variance == "bbdm" else eta**2 * sigma2
        x = (1.0 - m_s) * x0 + m_s * y + np.sqrt(max(v_s - c, 0.0)) * e
        if eta > 0 and sigma2 > 0:
            x = x + eta * np.sqrt(sigma2) * torch.randn(x.shape, generator=gen, dtype=x.dtype).to(dev)
    return x.to(x_source.device)
