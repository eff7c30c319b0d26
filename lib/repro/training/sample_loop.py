"""One training epoch driven by a sampler, with per-sample statistics and pass counting.

The sample-selection methods (plain uniform SGD, KAKURENBO's hiding sampler,
importance sampling) differ only in the ``torch.utils.data.Sampler`` that
orders an epoch and in optional per-sample loss weights; they share this loop,
which records each trained sample's loss, prediction accuracy (argmax equals
label) and prediction confidence (largest softmax probability over the
classes) from the training forward pass itself, and counts forward and
backward sample-passes.  Batches are gathered on the CPU and moved to the
model's device; the statistics come back as CPU arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Sampler

from repro.training.data import IndexedDataset


@dataclass(frozen=True, kw_only=True)
class SampleStats:
    """Per-sample statistics of the samples one pass touched (aligned arrays)."""

    index: np.ndarray
    loss: np.ndarray
    correct: np.ndarray
    confidence: np.ndarray

    @staticmethod
    def concat(parts: list["SampleStats"]) -> "SampleStats":
        """Join several passes' statistics."""
        if not parts:
            return SampleStats(index=np.empty(0, np.int64), loss=np.empty(0), correct=np.empty(0, bool), confidence=np.empty(0))
        return SampleStats(**{f: np.concatenate([getattr(p, f) for p in parts])
                              for f in ("index", "loss", "correct", "confidence")})


def _stats(idx: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, losses: torch.Tensor) -> SampleStats:
    with torch.no_grad():
        prob = F.softmax(logits, dim=1)  # over classes (the released script uses dim=0, over the batch)
        conf, pred = prob.max(dim=1)
        return SampleStats(index=idx.numpy(), loss=losses.detach().cpu().numpy().astype(np.float64),
                           correct=(pred == y).cpu().numpy(), confidence=conf.cpu().numpy().astype(np.float64))


def model_device(model: nn.Module) -> torch.device:
    """The device holding ``model``'s parameters (where its batches must go)."""
    return next(model.parameters()).device


def loader(ds: IndexedDataset, sampler: Sampler, batch_size: int) -> DataLoader:
    """A ``DataLoader`` over the indexed dataset in the sampler's order (the last batch may be short)."""
    return DataLoader(ds, batch_size=batch_size, sampler=sampler, drop_last=False)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, ds: IndexedDataset, sampler: Sampler,
                batch_size: int, lr: float, weights: np.ndarray | None = None) -> SampleStats:
    """One epoch of SGD over the samples the sampler yields.

    Parameters
    ----------
    model, opt
        Model and optimiser.
    ds
        The training set.
    sampler
        Orders (and selects) the epoch's sample ids.
    batch_size
        Mini-batch size.
    lr
        Learning rate for the epoch.
    weights
        Optional per-sample loss weights indexed by sample id (importance-sampling correction);
        the batch loss is then the mean of ``weight * loss``.

    Returns
    -------
    SampleStats
        Loss, correctness and confidence of every trained sample, from the training forward pass.
    """
    for group in opt.param_groups:
        group["lr"] = lr
    model.train()
    dev = model_device(model)
    parts = []
    for idx, x, y in loader(ds, sampler, batch_size):
        x, y = x.to(dev), y.to(dev)
        logits = model(x)
        losses = F.cross_entropy(logits, y, reduction="none")
        loss = losses.mean() if weights is None else (losses * torch.as_tensor(weights[idx.numpy()], dtype=losses.dtype,
                                                                              device=dev)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        parts.append(_stats(idx, logits, y, losses))
    return SampleStats.concat(parts)


@torch.no_grad()
def forward_stats(model: nn.Module, ds: IndexedDataset, ids: np.ndarray, batch_size: int = 1024) -> SampleStats:
    """Forward-only statistics of the samples ``ids`` (no update)."""
    model.eval()
    dev = model_device(model)
    parts = []
    for start in range(0, len(ids), batch_size):
        idx, x, y = ds[ids[start:start + batch_size]]
        x, y = x.to(dev), y.to(dev)
        logits = model(x)
        parts.append(_stats(idx, logits, y, F.cross_entropy(logits, y, reduction="none")))
    return SampleStats.concat(parts)


@torch.no_grad()
def accuracy(model: nn.Module, ds: IndexedDataset) -> float:
    """Test accuracy (%) of ``model`` on ``ds``."""
    model.eval()
    dev = model_device(model)
    return 100.0 * float((model(ds.x.to(dev)).argmax(1) == ds.y.to(dev)).float().mean())
