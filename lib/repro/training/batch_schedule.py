"""A controller that grows the mini-batch and the learning rate at run time.

Training starts at a small batch ``B0`` with its tuned rate ``eta0``.  At an
adjustment point the batch doubles (up to ``B_max``) and the rate is
multiplied by ``2 ** alpha`` (``alpha = 1``: linear scaling, ``0.5``: square
root), then ramps linearly from the old to the new rate over ``warmup_steps``
steps.  Adjustment points are either every ``interval`` epochs or when the
relative decrease of the epoch training loss over the last ``window`` epochs
falls below ``delta`` (a plateau); ``fixed`` never adjusts.  The trigger, the
scaling rule and the warm-up are reconstructions (the paper's text was not
available).  An epoch's batches come from torch's ``BatchSampler`` over a
``SubsetRandomSampler``, rebuilt with the current batch size, so every
sample is visited once per epoch whatever the batch (the last batch may be
short).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import BatchSampler, SubsetRandomSampler

TRIGGERS = ("fixed", "interval", "plateau")


@dataclass(frozen=True, kw_only=True)
class BatchSchedule:
    """The rule: initial batch and rate, cap, scaling exponent, trigger and post-switch warm-up."""

    initial_batch: int
    max_batch: int
    initial_lr: float
    alpha: float = 1.0
    trigger: str = "fixed"
    interval: int = 4
    window: int = 2
    delta: float = 0.02
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        if self.trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {TRIGGERS}, got {self.trigger!r}")
        if self.max_batch < self.initial_batch:
            raise ValueError("max_batch must be >= initial_batch")


@dataclass(frozen=True, kw_only=True)
class Switch:
    """One adjustment: after ``epoch``, the batch went from ``old_batch`` to ``new_batch`` and the rate likewise."""

    epoch: int
    old_batch: int
    new_batch: int
    old_lr: float
    new_lr: float


class BatchController:
    """Holds the current batch and rate and applies the schedule's adjustments."""

    def __init__(self, schedule: BatchSchedule) -> None:
        self.schedule = schedule
        self.batch = schedule.initial_batch
        self.lr = schedule.initial_lr
        self.switches: list[Switch] = []
        self.losses: list[float] = []
        self._ramp: tuple[float, float, int] | None = None  # (from, to, steps left)

    def batches(self, n: int, generator: torch.Generator) -> BatchSampler:
        """Return the epoch's batches of sample ids at the current batch size."""
        return BatchSampler(SubsetRandomSampler(range(n), generator=generator), self.batch, drop_last=False)

    def step_lr(self) -> float:
        """The learning rate of the next step (ramping after a switch)."""
        if self._ramp is None:
            return self.lr
        start, end, left = self._ramp
        w = self.schedule.warmup_steps
        lr = end - (end - start) * (left - 1) / w
        self._ramp = (start, end, left - 1) if left > 1 else None
        return lr

    def _due(self, epoch: int) -> bool:
        s = self.schedule
        if s.trigger == "interval":
            return (epoch + 1) % s.interval == 0
        if s.trigger == "plateau" and len(self.losses) > s.window:
            before, now = self.losses[-1 - s.window], self.losses[-1]
            return (before - now) / max(abs(before), 1e-12) < s.delta
        return False

    def end_epoch(self, epoch: int, train_loss: float) -> Switch | None:
        """Record the epoch's training loss and adjust if due; return the switch made, if any."""
        self.losses.append(train_loss)
        if self.batch >= self.schedule.max_batch or not self._due(epoch):
            return None
        old_b, old_lr = self.batch, self.lr
        self.batch = min(2 * self.batch, self.schedule.max_batch)
        self.lr = old_lr * (self.batch / old_b) ** self.schedule.alpha
        if self.schedule.warmup_steps > 0:
            self._ramp = (old_lr, self.lr, self.schedule.warmup_steps)
        self.losses.clear()  # a plateau is judged on the new batch's own epochs
        sw = Switch(epoch=epoch, old_batch=old_b, new_batch=self.batch, old_lr=old_lr, new_lr=self.lr)
        self.switches.append(sw)
        return sw
