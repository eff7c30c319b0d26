"""Multi-resolution training: generated scientific fields, a resolution pyramid and a plateau-triggered switch.

- :func:`gaussian_random_fields` stands in for CosmoFlow: 2-D log-normal
  Gaussian random fields with power spectrum ``P(k) = A k^-n_s exp(-(k/k_c)^2)``,
  drawn with numpy's FFT; the regression targets are ``(n_s, A)``.
- :func:`coarsen` builds a level of the pyramid by averaging ``k x k`` blocks
  (torch's ``avg_pool2d``), which keeps the global mean exactly.
- :class:`PlateauSwitch` decides when to leave the coarse data: when the best
  validation loss improved by less than ``delta`` (relative) over the last
  ``window`` epochs, at most once and never before ``window`` epochs, or at a
  fixed epoch (the ablation).
- :func:`field_cnn` is fully convolutional with global average pooling, so it
  accepts both resolutions and always outputs ``(B, 2)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True)
class FieldSet:
    """Fields ``(n, 1, size, size)`` (standardised) and standardised targets ``(n, 2)``."""

    fields: torch.Tensor
    targets: torch.Tensor


def gaussian_random_fields(n: int, size: int, rng: np.random.Generator, k_cut: float = 0.25,
                           slope_range: tuple[float, float] = (1.0, 3.0),
                           amp_range: tuple[float, float] = (0.5, 1.5)) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` log-normal fields on a ``size x size`` periodic grid.

    Parameters
    ----------
    n, size
        Number of fields and grid side.
    rng
        Random generator.
    k_cut
        Cut-off wavenumber ``k_c`` (cycles per pixel) of the Gaussian damping.
    slope_range, amp_range
        Uniform ranges of the spectral slope ``n_s`` and amplitude ``A``.

    Returns
    -------
    np.ndarray, np.ndarray
        Fields ``exp(g) - mean`` of shape ``(n, size, size)`` and parameters ``(n, 2)`` = ``(n_s, A)``.
    """
    slope = rng.uniform(*slope_range, size=n)
    amp = rng.uniform(*amp_range, size=n)
    f = np.fft.fftfreq(size)
    k = np.sqrt(f[:, None] ** 2 + f[None, :] ** 2)
    k[0, 0] = 1.0
    power = amp[:, None, None] * k[None] ** (-slope[:, None, None]) * np.exp(-(k[None] / k_cut) ** 2)
    power[:, 0, 0] = 0.0
    noise = np.fft.fft2(rng.standard_normal((n, size, size)))
    g = np.real(np.fft.ifft2(noise * np.sqrt(power)))
    g /= g.std(axis=(1, 2), keepdims=True) + 1e-12
    g *= np.sqrt(amp)[:, None, None] * 0.5
    field = np.exp(g)
    return field - field.mean(axis=(1, 2), keepdims=True), np.stack([slope, amp], axis=1)


def make_fieldsets(n_train: int, n_val: int, size: int, seed: int) -> tuple[FieldSet, FieldSet]:
    """Train and validation sets, standardised with the training statistics."""
    rng = np.random.default_rng(seed)
    x, y = gaussian_random_fields(n_train + n_val, size, rng)
    mu_y, sd_y = y[:n_train].mean(0), y[:n_train].std(0)
    sd_x = x[:n_train].std()
    xs = torch.as_tensor((x / sd_x)[:, None], dtype=torch.float32)
    ys = torch.as_tensor((y - mu_y) / sd_y, dtype=torch.float32)
    return FieldSet(fields=xs[:n_train], targets=ys[:n_train]), FieldSet(fields=xs[n_train:], targets=ys[n_train:])


def coarsen(fields: torch.Tensor, factor: int) -> torch.Tensor:
    """Average ``factor x factor`` blocks (the next level of the resolution pyramid)."""
    if factor == 1:
        return fields
    if fields.shape[-1] % factor or fields.shape[-2] % factor:
        raise ValueError(f"field side {tuple(fields.shape[-2:])} is not divisible by {factor}")
    return F.avg_pool2d(fields, factor)


def field_cnn(channels: tuple[int, ...] = (8, 16, 16, 32), seed: int = 0) -> nn.Sequential:
    """Fully convolutional regressor of the 2 field parameters.

    conv3x3 + BN + LeakyReLU blocks (max-pool after the first two), global average pooling and a linear
    head to the 2 targets.
    """
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    cin = 1
    for i, c in enumerate(channels):
        layers += [nn.Conv2d(cin, c, 3, padding=1), nn.BatchNorm2d(c), nn.LeakyReLU(0.1)]
        if i < 2:
            layers.append(nn.MaxPool2d(2))
        cin = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 2)]
    return nn.Sequential(*layers)


class PlateauSwitch:
    """Switch from coarse to fine data once, on a plateau of the validation loss or at a fixed epoch.

    Parameters
    ----------
    window
        Epochs looked back; no switch before ``window`` epochs have been seen.
    delta
        Relative improvement of the best loss over the window below which the curve has plateaued.
    max_coarse_epochs
        Switch at the latest after this many coarse epochs.
    fixed_epoch
        If set, ignore the plateau and switch after this many epochs (0: never coarse).
    """

    def __init__(self, window: int = 3, delta: float = 0.01, max_coarse_epochs: int = 10**9,
                 fixed_epoch: int | None = None) -> None:
        self.window, self.delta = window, delta
        self.max_coarse_epochs, self.fixed_epoch = max_coarse_epochs, fixed_epoch
        self.history: list[float] = []
        self.switched_at: int | None = 0 if fixed_epoch == 0 else None

    @property
    def coarse(self) -> bool:
        """Whether training is still on the coarse data."""
        return self.switched_at is None

    def update(self, val_loss: float) -> bool:
        """Record a coarse epoch's validation loss; return True when this call switches to fine data."""
        if not self.coarse:
            return False
        self.history.append(val_loss)
        e = len(self.history)
        if self.fixed_epoch is not None:
            due = e >= self.fixed_epoch
        else:
            due = e >= self.max_coarse_epochs
            if e > self.window:
                before = min(self.history[:-self.window])
                best = min(self.history)
                due = due or (before - best) / max(abs(before), 1e-12) < self.delta
        if due:
            self.switched_at = e
        return due
