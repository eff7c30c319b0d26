"""KAKURENBO: adaptively hiding the least important samples from an epoch.

Per sample the method keeps the loss ``L_i``, the prediction accuracy
``PA_i`` (argmax equals label) and the prediction confidence ``PC_i`` (largest
softmax probability), refreshed every epoch.  At epoch ``e > 0``:

1. the maximum hidden fraction is ``F_e = F * d(e)``, with ``d`` stepping
   through 1.0, 0.8, 0.6, 0.4 at 30%, 60% and 80% of the epochs (the
   authors' 200-epoch CIFAR schedule at 60/120/160);
2. the candidates are the ``floor(F_e N)`` samples with the lowest loss;
3. **move-back**: a candidate is hidden only if ``PA_i = 1`` and
   ``PC_i >= tau``; the others go back to the training list;
4. the training list is visited uniformly without replacement; its samples'
   statistics come from the training forward pass;
5. after the epoch a forward-only pass refreshes the hidden samples'
   statistics so they can return;
6. the learning rate is divided by ``1 - F_e`` (the code scales by the
   maximum fraction, not the realised one).

:class:`HidingState` holds the statistics and the selection;
:func:`hidden_fraction` and :func:`lr_compensation` are the schedule.  The
sampler of an epoch is torch's ``SubsetRandomSampler`` over the visible ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import SubsetRandomSampler

from repro.training.sample_loop import SampleStats

FRACTION_STEPS = ((0.3, 1.0), (0.6, 0.8), (0.8, 0.6), (1.01, 0.4))
"""(end of the stage as a share of the epochs, multiplier of F) -- 60/120/160/200 of a 200-epoch run."""


def hidden_fraction(epoch: int, epochs: int, max_fraction: float) -> float:
    """``F_e``: the maximum fraction hidden at ``epoch`` (0 at epoch 0, when no statistics exist)."""
    if epoch == 0:
        return 0.0
    for end, mult in FRACTION_STEPS:
        if epoch < end * epochs:
            return max_fraction * mult
    return max_fraction * FRACTION_STEPS[-1][1]


def lr_compensation(fraction: float) -> float:
    """The learning-rate multiplier ``1 / (1 - F_e)`` for fewer SGD steps per epoch."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"hidden fraction must lie in [0, 1), got {fraction}")
    return 1.0 / (1.0 - fraction)


@dataclass(frozen=True, kw_only=True)
class Selection:
    """One epoch's split of the sample ids."""

    visible: np.ndarray
    hidden: np.ndarray
    candidates: int
    moved_back: int


class HidingState:
    """Per-sample statistics and the hiding rule.

    Parameters
    ----------
    n
        Number of training samples.
    threshold
        Confidence threshold ``tau`` of the move-back rule.
    move_back
        Apply the move-back rule (hide only confident, correct candidates);
        ``False`` hides every candidate (the ablation).
    """

    def __init__(self, n: int, threshold: float = 0.7, move_back: bool = True) -> None:
        self.loss = np.full(n, np.inf)
        self.correct = np.zeros(n, dtype=bool)
        self.confidence = np.zeros(n)
        self.updated = np.full(n, -1)
        self.threshold = threshold
        self.move_back = move_back

    def update(self, stats: SampleStats, epoch: int) -> None:
        """Store the statistics of the samples a pass touched, stamped with ``epoch``."""
        self.loss[stats.index] = stats.loss
        self.correct[stats.index] = stats.correct
        self.confidence[stats.index] = stats.confidence
        self.updated[stats.index] = epoch

    def allreduce(self, group=None) -> None:
        """Combine the ranks' statistics (each rank filled only its own samples; the others stay zero).

        Every rank must call this with statistics where untouched entries are 0;
        the sum over ranks then holds every sample's value once (as the authors
        do with Horovod's allreduce).
        """
        for name in ("loss", "confidence"):
            t = torch.as_tensor(getattr(self, name))
            dist.all_reduce(t, group=group)
            setattr(self, name, t.numpy())
        c = torch.as_tensor(self.correct.astype(np.int64))
        dist.all_reduce(c, group=group)
        self.correct = c.numpy() > 0

    def select(self, fraction: float) -> Selection:
        """Split the ids for an epoch with maximum hidden fraction ``fraction``."""
        n = len(self.loss)
        k = int(np.floor(fraction * n))
        order = np.argsort(self.loss, kind="stable")
        cand = order[:k]
        if self.move_back:
            keep_hidden = self.correct[cand] & (self.confidence[cand] >= self.threshold)
            hidden = cand[keep_hidden]
        else:
            hidden = cand
        mask = np.ones(n, dtype=bool)
        mask[hidden] = False
        return Selection(visible=np.flatnonzero(mask), hidden=np.sort(hidden), candidates=k, moved_back=k - len(hidden))


def visible_sampler(selection: Selection, generator: torch.Generator) -> SubsetRandomSampler:
    """Uniform sampling without replacement of the visible ids (torch's ``SubsetRandomSampler``)."""
    return SubsetRandomSampler(selection.visible.tolist(), generator=generator)


def random_hiding(n: int, count: int, rng: np.random.Generator) -> Selection:
    """The control: hide ``count`` ids chosen uniformly at random."""
    hidden = np.sort(rng.choice(n, size=count, replace=False))
    mask = np.ones(n, dtype=bool)
    mask[hidden] = False
    return Selection(visible=np.flatnonzero(mask), hidden=hidden, candidates=count, moved_back=0)
