"""Data for the training-systems chapters: an indexed dataset wrapper and generated classification sets.

:class:`IndexedDataset` returns ``(index, x, y)`` so that a training loop can
keep per-sample state (losses, confidences) and a sampler can hand out index
arrays.  It is a ``torch.utils.data.Dataset`` (usable with a ``DataLoader``)
and also takes a whole index array at once, the fast path the simulators use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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
    """A train and a test :class:`IndexedDataset` with the number of classes, and optionally a validation set.

    ``val`` is held out of ``train`` for choosing hyper-parameters (``None`` when no share was asked for).
    """

    train: IndexedDataset
    test: IndexedDataset
    num_classes: int
    val: IndexedDataset | None = None

    @property
    def num_features(self) -> int:
        """Features per sample (flattened)."""
        return int(self.train.x[0].numel())


def split_sizes(n_samples: int, test_fraction: float = 0.2, validation_fraction: float = 0.0) -> tuple[int, int, int]:
    """Training, validation and test sizes of :func:`synthetic_classification` (the test share first, rounded up).

    Parameters
    ----------
    n_samples
        Samples generated.
    test_fraction
        Share of all samples held out for testing.
    validation_fraction
        Share of the remaining (training) samples held out for validation.

    Returns
    -------
    tuple of int
        ``(train, validation, test)``, summing to ``n_samples``.
    """
    n_test = math.ceil(test_fraction * n_samples)
    n_val = math.ceil(validation_fraction * (n_samples - n_test))
    return n_samples - n_test - n_val, n_val, n_test


@dataclass(frozen=True, kw_only=True)
class GeneratedSet:
    """How :func:`generated_split` draws a classification set with scikit-learn's ``make_classification``.

    Attributes
    ----------
    n_samples, n_features, n_informative, n_classes, class_sep, n_clusters_per_class, flip_y
        Passed to :func:`sklearn.datasets.make_classification` (no redundant features).
    test_fraction
        Share of samples held out for testing.
    validation_fraction
        Share of the training part held out (stratified) as ``Split.val``; 0 holds out none.
    """

    n_samples: int
    n_features: int
    n_informative: int
    n_classes: int
    class_sep: float = 1.0
    n_clusters_per_class: int = 2
    flip_y: float = 0.01
    test_fraction: float = 0.2
    validation_fraction: float = 0.0


def generated_split(spec: GeneratedSet, seed: int) -> Split:
    """The set ``spec`` describes, drawn with ``seed``, standardised on the training part and split stratified.

    Parameters
    ----------
    spec
        The generator's settings and the held-out shares.
    seed
        Seed of the generator and of the splits.

    Returns
    -------
    Split
        The standardised train, test (and validation) sets, sized as :func:`split_sizes` says; with no
        validation share, the same sets as before that option existed.
    """
    x, y = make_classification(n_samples=spec.n_samples, n_features=spec.n_features, n_informative=spec.n_informative,
                               n_redundant=0, n_classes=spec.n_classes, n_clusters_per_class=spec.n_clusters_per_class,
                               class_sep=spec.class_sep, flip_y=spec.flip_y, random_state=seed)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=spec.test_fraction, stratify=y, random_state=seed)
    val_part: tuple[np.ndarray, np.ndarray] | None = None
    if spec.validation_fraction > 0:
        _, n_val, _ = split_sizes(spec.n_samples, spec.test_fraction, spec.validation_fraction)
        xtr, xva, ytr, yva = train_test_split(xtr, ytr, test_size=n_val, stratify=ytr, random_state=seed)
        val_part = (xva, yva)
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-8
    val = None if val_part is None else IndexedDataset((val_part[0] - mu) / sd, val_part[1])
    return Split(train=IndexedDataset((xtr - mu) / sd, ytr), test=IndexedDataset((xte - mu) / sd, yte),
                 num_classes=spec.n_classes, val=val)


def synthetic_classification(n_samples: int, n_features: int, n_informative: int, n_classes: int, *, seed: int = 0,
                             **options: Any) -> Split:
    """:func:`generated_split` with the set's settings as arguments (``options``: the other :class:`GeneratedSet` fields).

    Parameters
    ----------
    n_samples, n_features, n_informative, n_classes
        Passed to :func:`sklearn.datasets.make_classification`.
    seed
        Seed of the generator and of the split.
    options
        ``class_sep``, ``n_clusters_per_class``, ``flip_y``, ``test_fraction``, ``validation_fraction``.
    """
    return generated_split(GeneratedSet(n_samples=n_samples, n_features=n_features, n_informative=n_informative,
                                        n_classes=n_classes, **options), seed)
