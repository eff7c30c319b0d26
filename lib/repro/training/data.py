"""Data for the training-systems chapters: an indexed dataset wrapper and generated classification sets.

:class:`IndexedDataset` returns ``(index, x, y)`` so that a training loop can
keep per-sample state (losses, confidences) and a sampler can hand out index
arrays.  It is a ``torch.utils.data.Dataset`` (usable with a ``DataLoader``)
and also takes a whole index array at once, the fast path the simulators use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset


class IndexedDataset(Dataset):
    """Features and labels held as tensors, indexed by sample id.

    Parameters
    ----------
    x
        Features, shape ``(n, ...)``.
    y
        Integer labels, shape ``(n,)``.
    """

    def __init__(self, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor) -> None:
        self.x = torch.as_tensor(np.asarray(x, dtype=np.float32))
        self.y = torch.as_tensor(np.asarray(y, dtype=np.int64))
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} rows but y has {len(self.y)}")

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int | np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return ``(index, x[index], y[index])``; ``index`` may be an integer or an integer array of any shape."""
        idx = torch.as_tensor(index, dtype=torch.long)
        return idx, self.x[idx], self.y[idx]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Batch fetch for ``DataLoader`` (one gather instead of one call per sample)."""
        idx, x, y = self[np.asarray(indices)]
        return [(idx[i], x[i], y[i]) for i in range(len(idx))]

    @property
    def sample_bytes(self) -> int:
        """Bytes of one sample's features and label, the unit of data-exchange accounting."""
        return int(self.x[0].numel() * self.x.element_size() + self.y.element_size())


@dataclass(frozen=True, kw_only=True)
class Split:
    """A train and a test :class:`IndexedDataset` with the number of classes."""

    train: IndexedDataset
    test: IndexedDataset
    num_classes: int

    @property
    def num_features(self) -> int:
        """Features per sample (flattened)."""
        return int(self.train.x[0].numel())


def synthetic_classification(n_samples: int, n_features: int, n_informative: int, n_classes: int, *,
                             class_sep: float = 1.0, n_clusters_per_class: int = 2, flip_y: float = 0.01,
                             test_fraction: float = 0.2, seed: int = 0) -> Split:
    """scikit-learn's ``make_classification``, standardised on the training part and split stratified.

    Parameters
    ----------
    n_samples, n_features, n_informative, n_classes, class_sep, n_clusters_per_class, flip_y
        Passed to :func:`sklearn.datasets.make_classification`.
    test_fraction
        Share of samples held out for testing.
    seed
        Seed of the generator and of the split.

    Returns
    -------
    Split
        The standardised train and test sets.
    """
    x, y = make_classification(n_samples=n_samples, n_features=n_features, n_informative=n_informative,
                               n_redundant=0, n_classes=n_classes, n_clusters_per_class=n_clusters_per_class,
                               class_sep=class_sep, flip_y=flip_y, random_state=seed)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, stratify=y, random_state=seed)
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-8
    return Split(train=IndexedDataset((xtr - mu) / sd, ytr), test=IndexedDataset((xte - mu) / sd, yte), num_classes=n_classes)
