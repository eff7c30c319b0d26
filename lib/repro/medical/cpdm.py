"""CPDM: CT-to-PET translation by a Brownian bridge guided by two condition maps.

The bridge itself is the shared :mod:`repro.bridge` (the one copy the
offline-optimisation family uses too); this module adds what CPDM puts around
it, in pixel space instead of the paper's VQGAN latent space:

- the **attenuation map** ``exp(-mu(HU))`` of the CT
  (:func:`repro.medical.attenuation.attenuation_map`), rescaled affinely to
  ``[-1, 1]`` over its possible range (CPDM passes it through a learned
  rescaler, of which an affine map is the simplest case);
- the **attention map**: a small segmentation UNet trained with a Dice loss
  to predict the PET hot-spot mask ``1[PET > threshold]`` from the CT, its
  output binarised at 0.5;
- the denoiser, a :class:`repro.medical.unet.UNet` that takes the chosen
  maps as extra input channels beside ``x_t``.

Images are normalised to ``[0, 1]`` (:func:`repro.medical.phantom.normalise_ct`
and ``normalise_pet``) and mapped to ``[-1, 1]`` for the bridge, which runs
from the PET (``t = 0``) to the CT (``t = T - 1``).  With no map this is the
plain BBDM backbone of the ablation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from repro.bridge import BridgeSampling, BridgeSchedule, BridgeTraining, bridge_sample, train_bridge
from repro.medical.attenuation import KVP_140, attenuation_map
from repro.medical.phantom import HU_MAX, HU_MIN
from repro.medical.unet import UNet, UNetConfig, UNetFit, dice_loss, fit_unet

_A_LOW = float(np.exp(-KVP_140.knots[1][-1]))  # exp(-mu) at the densest bone the model knows


@dataclass(frozen=True, kw_only=True)
class MapChoice:
    """Which of CPDM's condition maps a bridge gets.

    Attributes
    ----------
    attenuation, attention
        Whether the attenuation map and the attention map are input channels.
    """

    attenuation: bool = False
    attention: bool = False

    @property
    def channels(self) -> int:
        """Number of condition channels."""
        return int(self.attenuation) + int(self.attention)


def to_signed(img01: np.ndarray) -> torch.Tensor:
    """``[0, 1]`` images ``(n, H, W)`` as ``[-1, 1]`` tensors ``(n, 1, H, W)``."""
    return torch.from_numpy(np.asarray(img01, dtype=np.float32) * 2.0 - 1.0)[:, None]


def to_unit(signed: torch.Tensor) -> np.ndarray:
    """Inverse of :func:`to_signed`, clipped to ``[0, 1]``: ``(n, H, W)`` float32."""
    return np.clip((signed[:, 0].cpu().numpy() + 1.0) / 2.0, 0.0, 1.0).astype(np.float32)


def attenuation_channel(ct_hu: np.ndarray) -> np.ndarray:
    """``exp(-mu(HU))`` of ``(n, H, W)`` CT, rescaled from ``[exp(-mu_max), 1]`` to ``[-1, 1]``."""
    a = attenuation_map(np.clip(ct_hu, HU_MIN, HU_MAX))
    return (2.0 * (a - _A_LOW) / (1.0 - _A_LOW) - 1.0).astype(np.float32)


def train_segmenter(
    ct01: np.ndarray, hot: np.ndarray, config: UNetConfig, *, epochs: int, batch_size: int, lr: float, seed: int,
    device: torch.device | str = "cpu",
) -> UNet:
    """Train the attention-map segmenter: CT ``(n, H, W)`` to hot-spot mask, Dice loss, Adam.

    Parameters
    ----------
    ct01
        Normalised CT.
    hot
        Boolean hot-spot masks of the PET, same shape.
    config
        Network shape (one input and one output channel, no step embedding).
    epochs, batch_size, lr
        Optimisation settings.
    seed
        Seed of the initial weights and the batch order.
    device
        Where it trains (weights are initialised and batches ordered on the CPU).

    Returns
    -------
    UNet
        The trained segmenter (in eval mode, on ``device``).
    """
    target = torch.from_numpy(np.asarray(hot, dtype=np.float32))[:, None]
    fit = UNetFit(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, device=device, desc="attention segmenter")
    return fit_unet(config, to_signed(ct01), target, dice_loss, fit)


@torch.no_grad()
def attention_channel(segmenter: UNet, ct01: np.ndarray) -> np.ndarray:
    """The binarised (at 0.5) predicted hot-spot mask, as ``{-1, 1}`` float32 ``(n, H, W)``."""
    dev = next(segmenter.parameters()).device
    prob = torch.sigmoid(segmenter(to_signed(ct01).to(dev)))[:, 0].cpu().numpy()
    return np.where(prob > 0.5, 1.0, -1.0).astype(np.float32)


def condition_stack(maps: MapChoice, attenuation: np.ndarray, attention: np.ndarray | None) -> torch.Tensor | None:
    """Stack the chosen maps ``(n, H, W)`` into condition channels ``(n, C, H, W)`` (``None`` for none)."""
    chosen = []
    if maps.attenuation:
        chosen.append(attenuation)
    if maps.attention:
        if attention is None:
            raise ValueError("the attention map was requested but not computed")
        chosen.append(attention)
    return torch.from_numpy(np.stack(chosen, axis=1)) if chosen else None


@dataclass(frozen=True, kw_only=True)
class BridgeSettings:
    """Training and sampling settings of a CPDM/BBDM bridge.

    Attributes
    ----------
    schedule
        The bridge schedule (CPDM: T = 1000, m from 0.001 to 0.999, s = 1).
    epochs, batch_size, lr
        Optimisation (L1 objective, Adam, no EMA at this scale).
    sample_steps
        Skip-sampling steps (CPDM: 200).
    eta
        Sampling noise scale (CPDM: 1).
    """

    schedule: BridgeSchedule
    epochs: int
    batch_size: int
    lr: float
    sample_steps: int
    eta: float = 1.0


def train_translator(
    maps: MapChoice,
    ct01: np.ndarray,
    pet01: np.ndarray,
    cond: torch.Tensor | None,
    unet: UNetConfig,
    settings: BridgeSettings,
    seed: int,
    device: torch.device | str = "cpu",
) -> UNet:
    """Train a bridge denoiser from CT to PET with the chosen condition maps.

    Parameters
    ----------
    maps
        The condition maps (none: BBDM; both: CPDM).
    ct01, pet01
        Paired normalised images ``(n, H, W)``.
    cond
        The condition channels from :func:`condition_stack` (``None`` for none).
    unet
        Denoiser shape; its ``cond_channels`` is set from ``maps`` and its step
        embedding from the schedule.
    settings
        Bridge settings.
    seed
        Seed of the weights, batches, steps and noise.
    device
        Where it trains (every random draw stays on the CPU, see :mod:`repro.bridge`).

    Returns
    -------
    UNet
        The trained denoiser, on ``device``.
    """
    torch.manual_seed(int(seed))
    config = UNetConfig(
        in_channels=unet.in_channels,
        cond_channels=maps.channels,
        out_channels=unet.out_channels,
        base=unet.base,
        levels=unet.levels,
        n_timesteps=settings.schedule.n_timesteps,
    )
    training = BridgeTraining(schedule=settings.schedule, epochs=settings.epochs, batch_size=settings.batch_size,
                              lr=settings.lr, p_uncond=0.0, loss="l1", ema_decay=None, seed=seed)
    denoiser = UNet(config).to(device)
    train_bridge(denoiser, to_signed(ct01), to_signed(pet01), cond, training)
    return denoiser


def translate(denoiser: UNet, ct01: np.ndarray, cond: torch.Tensor | None, settings: BridgeSettings, seed: int) -> np.ndarray:
    """Sample PET estimates ``(n, H, W)`` in ``[0, 1]`` from normalised CT by the reverse bridge (on the denoiser's device)."""
    sampling = BridgeSampling(schedule=settings.schedule, n_steps=settings.sample_steps, eta=settings.eta, seed=seed)
    out = bridge_sample(denoiser, to_signed(ct01), cond, sampling)
    return to_unit(out)
