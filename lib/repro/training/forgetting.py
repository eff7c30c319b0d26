"""Pruning by forgetting events (Toneva et al., ICLR 2019), as KAKURENBO's authors run it as a baseline.

A *forgetting event* is a sample that the model predicted correctly at its previous presentation and
predicts wrongly now.  The authors' baseline (github.com/TruongThaoNguyen/kakurenbo at 6cb9f88,
``ImageNet/pytorch_cifar100_WRN-28-10_forget_original.py``) counts the events of every sample from the
training forward passes of the first ``static_epochs`` epochs (20 of 200), then removes the ``fraction``
of samples with the fewest events (``torch.sort`` of the counts, ties in index order) for the rest of the
same run, with no learning-rate compensation and no way back.
"""

from __future__ import annotations

import numpy as np

from repro.training.kakurenbo import Selection
from repro.training.sample_loop import SampleStats


class ForgettingCounter:
    """Per-sample forgetting events counted from training passes, and the pruned set they decide.

    Parameters
    ----------
    n
        Number of training samples.
    """

    def __init__(self, n: int) -> None:
        self.events = np.zeros(n, dtype=np.int64)
        self.correct = np.zeros(n, dtype=bool)
        self.pruned: np.ndarray | None = None

    def update(self, stats: SampleStats) -> None:
        """Count the samples a pass found wrong after a correct previous presentation; remember the new state."""
        idx = stats.index
        self.events[idx] += self.correct[idx] & ~stats.correct
        self.correct[idx] = stats.correct

    def prune(self, fraction: float) -> Selection:
        """Remove the ``floor(fraction * n)`` samples with the fewest events (ties: lower index first), for good."""
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"the pruned fraction must lie in [0, 1), got {fraction}")
        n = len(self.events)
        k = int(np.floor(fraction * n))
        self.pruned = np.sort(np.argsort(self.events, kind="stable")[:k])
        return self.selection()

    def selection(self) -> Selection:
        """The epoch's split: every sample before pruning, the kept ones after."""
        n = len(self.events)
        hidden = self.pruned if self.pruned is not None else np.empty(0, dtype=np.int64)
        mask = np.ones(n, dtype=bool)
        mask[hidden] = False
        return Selection(visible=np.flatnonzero(mask), hidden=hidden, candidates=len(hidden), moved_back=0)
