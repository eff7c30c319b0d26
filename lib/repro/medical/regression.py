"""The L1 regression baseline: a UNet mapping CT straight to PET (Pix2Pix without its GAN).

It uses the same :class:`repro.medical.unet.UNet` as CPDM's denoiser (no step
embedding, no condition maps), so the CPDM ablation compares a one-shot
regression with the bridge at equal network size.
"""

from __future__ import annotations

import numpy as np
import torch

from repro.medical.cpdm import to_signed, to_unit
from repro.medical.unet import UNet, UNetConfig, UNetFit, fit_unet


def train_regression(
    ct01: np.ndarray, pet01: np.ndarray, config: UNetConfig, *, epochs: int, batch_size: int, lr: float, seed: int,
    device: torch.device | str = "cpu",
) -> UNet:
    """Fit ``PET = UNet(CT)`` with an L1 loss and Adam.

    Parameters
    ----------
    ct01, pet01
        Paired normalised images ``(n, H, W)``.
    config
        Network shape (must have no step embedding and no condition channels).
    epochs, batch_size, lr
        Optimisation settings.
    seed
        Seed of the weights and the batch order.
    device
        Where it trains (weights are initialised and batches ordered on the CPU).

    Returns
    -------
    UNet
        The trained network (in eval mode, on ``device``).
    """
    if config.n_timesteps or config.cond_channels:
        raise ValueError("the regression UNet takes the CT alone: n_timesteps and cond_channels must be 0")
    fit = UNetFit(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, device=device, desc="L1 regression UNet")
    return fit_unet(config, to_signed(ct01), to_signed(pet01), l1_loss, fit)


def l1_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean absolute error of a batch."""
    return (output - target).abs().mean()


@torch.no_grad()
def predict(net: UNet, ct01: np.ndarray) -> np.ndarray:
    """PET estimates ``(n, H, W)`` in ``[0, 1]`` from normalised CT (computed on the network's device)."""
    return to_unit(net(to_signed(ct01).to(next(net.parameters()).device)))
