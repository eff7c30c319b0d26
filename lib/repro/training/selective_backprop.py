"""Selective Backprop (Jiang et al., 2019): forward every sample, back-propagate only the high-loss ones.

Every candidate batch is forwarded without gradients; a sample is selected
when its loss lies in the top ``keep`` share of the recent loss history (its
percentile rank among the last ``history`` losses seen before its batch is at
least ``1 - keep``);
selected samples are queued and trained in full batches (forward and
backward again), and the queue's remainder is trained at the end of the epoch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Sampler

from repro.training.data import IndexedDataset
from repro.training.sample_loop import SampleStats, loader, model_device


@dataclass(frozen=True, kw_only=True)
class SelectivePass:
    """What one selective epoch did: the forwarded candidates' statistics and the pass counts."""

    stats: SampleStats
    forward_passes: int
    backward_passes: int


class LossHistory:
    """The last ``size`` losses, for percentile ranks."""

    def __init__(self, size: int = 1024) -> None:
        self.values: deque[float] = deque(maxlen=size)

    def percentile(self, loss: float) -> float:
        """Share of remembered losses below ``loss`` (1 while the history is empty)."""
        if not self.values:
            return 1.0
        return float(np.mean(np.asarray(self.values) < loss))

    def percentiles(self, losses: np.ndarray) -> np.ndarray:
        """Percentile ranks of a batch of losses against the history before the batch (1 while it is empty)."""
        if not self.values:
            return np.ones(len(losses))
        ordered = np.sort(np.asarray(self.values))
        return np.searchsorted(ordered, losses, side="left") / len(ordered)


def selective_epoch(model: nn.Module, opt: torch.optim.Optimizer, ds: IndexedDataset, sampler: Sampler,
                    batch_size: int, lr: float, keep: float, history: LossHistory) -> SelectivePass:
    """One Selective-Backprop epoch over the sampler's candidates.

    Parameters
    ----------
    model, opt, ds, sampler, batch_size, lr
        As for :func:`repro.training.sample_loop.train_epoch`.
    keep
        Target share of samples back-propagated (selection threshold ``1 - keep`` on the percentile).
    history
        The loss history, carried across epochs.
    """
    for group in opt.param_groups:
        group["lr"] = lr
    queue: list[int] = []
    parts, fwd, bwd = [], 0, 0
    dev = model_device(model)

    def step(ids: list[int]) -> None:
        nonlocal fwd, bwd
        model.train()
        _, x, y = ds[np.asarray(ids)]
        loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        fwd += len(ids)
        bwd += len(ids)

    for idx, x, y in loader(ds, sampler, batch_size):
        model.eval()
        with torch.no_grad():
            logits = model(x.to(dev))
            losses = F.cross_entropy(logits, y.to(dev), reduction="none").cpu()
            prob = F.softmax(logits, dim=1)
            conf, pred = (t.cpu() for t in prob.max(1))
        fwd += len(idx)
        parts.append(SampleStats(index=idx.numpy(), loss=losses.numpy().astype(np.float64), correct=(pred == y).numpy(),
                                 confidence=conf.numpy().astype(np.float64)))
        ranks = history.percentiles(losses.numpy())
        queue.extend(idx[torch.as_tensor(ranks >= 1.0 - keep)].tolist())
        history.values.extend(losses.tolist())
        while len(queue) >= batch_size:
            step(queue[:batch_size])
            del queue[:batch_size]
    if queue:
        step(queue)
    return SelectivePass(stats=SampleStats.concat(parts), forward_passes=fwd, backward_passes=bwd)
