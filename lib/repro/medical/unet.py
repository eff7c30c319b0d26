"""A small 2D UNet with condition channels, and the attention-map segmenter.

One architecture serves three roles in the CPDM chapter, so the ablation
compares conditioning and objective, not network size:

- the bridge denoiser: ``unet(x_t, t, cond)`` with a sinusoidal step
  embedding and the condition maps (attenuation, attention) concatenated to
  ``x_t`` as extra input channels, as CPDM concatenates its encoded maps;
- the L1 regression baseline (a Pix2Pix generator without the GAN):
  ``unet(ct)`` with no step embedding;
- the attention-map segmenter: ``unet(ct)`` with one logit channel, trained
  with a Dice loss against the PET hot-spot mask and binarised at 0.5.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from repro.medical.runs import save_network


@dataclass(frozen=True, kw_only=True)
class UNetConfig:
    """Shape of a :class:`UNet`.

    Attributes
    ----------
    in_channels
        Image channels (``x_t`` for the denoiser, CT for the others).
    cond_channels
        Condition maps concatenated to the input (0 for none).
    out_channels
        Output channels.
    base
        Channels at full resolution; doubled at each level.
    levels
        Downsampling steps (the image side must be divisible by ``2**levels``).
    n_timesteps
        Bridge steps ``T`` for the step embedding, or 0 for a plain image-to-image net.
    """

    in_channels: int = 1
    cond_channels: int = 0
    out_channels: int = 1
    base: int = 16
    levels: int = 2
    n_timesteps: int = 0

    def __post_init__(self) -> None:
        if min(self.in_channels, self.out_channels, self.base, self.levels) < 1 or self.cond_channels < 0 or self.n_timesteps < 0:
            raise ValueError(f"invalid UNetConfig {self}")


def step_embedding(t: torch.Tensor, dim: int, n_timesteps: int) -> torch.Tensor:
    """Sinusoidal embedding of integer steps ``t`` (shape ``(B,)``) into ``(B, dim)``."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / max(half - 1, 1))
    angles = (t.float() * (1000.0 / n_timesteps))[:, None] * freqs[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class _Block(nn.Module):
    """Two 3x3 convolutions with group norm and SiLU; the step embedding is added in between."""

    def __init__(self, c_in: int, c_out: int, emb_dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm1 = nn.GroupNorm(min(8, c_out), c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.norm2 = nn.GroupNorm(min(8, c_out), c_out)
        self.emb = nn.Linear(emb_dim, c_out) if emb_dim else None
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor | None) -> torch.Tensor:
        h = F.silu(self.norm1(self.conv1(x)))
        if self.emb is not None and emb is not None:
            h = h + self.emb(emb)[:, :, None, None]
        h = F.silu(self.norm2(self.conv2(h)))
        return h + self.skip(x)


class UNet(nn.Module):
    """Encoder-decoder with skip connections; see the module docstring for its roles.

    Parameters
    ----------
    config
        The network's shape.
    """

    def __init__(self, config: UNetConfig) -> None:
        super().__init__()
        self.config = config
        emb_dim = 4 * config.base if config.n_timesteps else 0
        self.emb_mlp = (
            nn.Sequential(nn.Linear(config.base, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim)) if emb_dim else None
        )
        widths = [config.base * 2**i for i in range(config.levels + 1)]
        self.stem = nn.Conv2d(config.in_channels + config.cond_channels, widths[0], 3, padding=1)
        self.down = nn.ModuleList(_Block(widths[i], widths[i + 1], emb_dim) for i in range(config.levels))
        self.mid = _Block(widths[-1], widths[-1], emb_dim)
        self.up = nn.ModuleList(_Block(widths[i + 1] + widths[i + 1], widths[i], emb_dim) for i in reversed(range(config.levels)))
        self.first = _Block(widths[0], widths[0], emb_dim)
        self.head = nn.Conv2d(widths[0], config.out_channels, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor | None = None, cond: torch.Tensor | None = None) -> torch.Tensor:
        """Map ``(B, in, H, W)`` (plus ``(B, cond, H, W)`` maps and steps ``(B,)``) to ``(B, out, H, W)``."""
        cfg = self.config
        if cfg.cond_channels:
            if cond is None or cond.shape[1] != cfg.cond_channels:
                got = None if cond is None else cond.shape[1]
                raise ValueError(f"this UNet needs {cfg.cond_channels} condition channels, got {got}")
            x = torch.cat([x, cond.to(x.dtype)], dim=1)
        emb = None
        if self.emb_mlp is not None:
            if t is None:
                raise ValueError("this UNet embeds bridge steps: pass t")
            emb = self.emb_mlp(step_embedding(t, cfg.base, cfg.n_timesteps))
        h = self.first(self.stem(x), emb)
        skips = []
        for block in self.down:
            skips.append(h)
            h = block(F.avg_pool2d(h, 2) if skips else h, emb)
        h = self.mid(h, emb)
        for block, skip in zip(self.up, reversed(skips)):
            h = F.interpolate(h, scale_factor=2, mode="nearest")
            h = block(torch.cat([h, _widen(skip, h.shape[1])], dim=1), emb)
        return self.head(h)


def _widen(skip: torch.Tensor, channels: int) -> torch.Tensor:
    """Zero-pad a skip tensor's channels up to ``channels`` (skips are narrower than the decoder)."""
    extra = channels - skip.shape[1]
    return F.pad(skip, (0, 0, 0, 0, 0, extra)) if extra > 0 else skip


def dice_loss(logits: torch.Tensor, target: torch.Tensor, eps: float = 1.0) -> torch.Tensor:
    """Soft Dice loss ``1 - (2 |P T| + eps) / (|P| + |T| + eps)`` per image, averaged.

    Parameters
    ----------
    logits
        Segmentation logits ``(B, 1, H, W)``.
    target
        Binary masks of the same shape.
    eps
        Smoothing that makes an empty prediction of an empty mask a perfect score.

    Returns
    -------
    torch.Tensor
        A scalar in ``[0, 1]``.
    """
    p = torch.sigmoid(logits).flatten(1)
    t = target.float().flatten(1)
    inter = (p * t).sum(1)
    return (1.0 - (2.0 * inter + eps) / (p.sum(1) + t.sum(1) + eps)).mean()


@dataclass(frozen=True, kw_only=True)
class UNetFit:
    """How :func:`fit_unet` trains.

    Attributes
    ----------
    epochs, batch_size, lr
        Optimisation settings (minibatch Adam).
    seed
        Seed of the initial weights (drawn on the CPU) and of the batch order.
    device
        Where it trains.
    desc
        Progress-bar label.
    """

    epochs: int
    batch_size: int
    lr: float
    seed: int
    device: torch.device | str = "cpu"
    desc: str = "UNet"


def fit_unet(
    config: UNetConfig, x: torch.Tensor, y: torch.Tensor, loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    fit: UNetFit,
) -> UNet:
    """Train a fresh plain UNet (no step embedding) to map ``x`` to ``y`` by minibatch Adam.

    Parameters
    ----------
    config
        Network shape.
    x, y
        Inputs and targets ``(n, C, H, W)`` on the CPU; batches are moved to ``fit.device``.
    loss
        ``loss(output, target)``, a scalar to minimise.
    fit
        Epochs, batch size, learning rate, seed, device and progress label.

    Returns
    -------
    UNet
        The trained network (in eval mode, on ``fit.device``).
    """
    torch.manual_seed(int(fit.seed))
    net = UNet(config).to(fit.device)
    gen = torch.Generator().manual_seed(int(fit.seed))
    opt = torch.optim.Adam(net.parameters(), lr=fit.lr)
    net.train()
    for _ in tqdm(range(fit.epochs), desc=fit.desc, leave=False):
        perm = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), fit.batch_size):
            idx = perm[start : start + fit.batch_size]
            batch_loss = loss(net(x[idx].to(fit.device)), y[idx].to(fit.device))
            opt.zero_grad(set_to_none=True)
            batch_loss.backward()
            opt.step()
    return net.eval()


def save_unet(net: UNet, path: str | Path, meta: dict[str, Any]) -> Path:
    """Write a checkpoint: the weights, the :class:`UNetConfig` and ``meta`` (plain values only).

    Parameters
    ----------
    net
        The network.
    path
        Destination file (its folder is created).
    meta
        Extra plain values stored beside the weights (seed, parameters).

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    return save_network(net, path, {"config": asdict(net.config), **meta})


def load_unet(path: str | Path) -> UNet:
    """Rebuild a network written by :func:`save_unet` (in eval mode), without retraining."""
    ckpt = torch.load(Path(path), weights_only=True)
    net = UNet(UNetConfig(**ckpt["config"]))
    net.load_state_dict(ckpt["state_dict"])
    return net.eval()
