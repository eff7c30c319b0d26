"""Client partitioners: IID, Dirichlet label skew and shards.

Each returns a list of index arrays, one per client, that together cover
every sample exactly once.
"""

from __future__ import annotations

import numpy as np


def _check(num_clients: int, n: int) -> None:
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if n < num_clients:
        raise ValueError(f"cannot split {n} samples over {num_clients} clients")


def iid(labels: np.ndarray, num_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Shuffle and split into ``num_clients`` near-equal parts."""
    labels = np.asarray(labels)
    _check(num_clients, len(labels))
    perm = np.random.default_rng(seed).permutation(len(labels))
    return [np.sort(p) for p in np.array_split(perm, num_clients)]


def dirichlet(
    labels: np.ndarray, num_clients: int, alpha: float, seed: int = 0, min_size: int = 2, max_tries: int = 100
) -> list[np.ndarray]:
    """Dirichlet label skew: each class is spread over clients by ``Dir(alpha)``.

    Small ``alpha`` gives each client few classes; large ``alpha`` tends to IID.
    Draws are repeated until every client holds at least ``min_size`` samples.

    Parameters
    ----------
    labels
        Integer class label of each sample.
    num_clients
        Number of clients.
    alpha
        Concentration (> 0).
    seed
        Seed of the draw.
    min_size
        Minimum samples per client.
    max_tries
        Redraws allowed before giving up.

    Raises
    ------
    ValueError
        On ``alpha <= 0`` or when ``min_size`` cannot be met.
    """
    labels = np.asarray(labels)
    _check(num_clients, len(labels))
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            props = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(props)[:-1] * len(idx)).astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out
    raise ValueError(f"no Dirichlet({alpha}) split gave every client >= {min_size} samples in {max_tries} tries")


def shards(labels: np.ndarray, num_clients: int, shards_per_client: int = 2, seed: int = 0) -> list[np.ndarray]:
    """McMahan et al.'s pathological split: sort by label, cut into shards, deal ``shards_per_client`` each."""
    labels = np.asarray(labels)
    _check(num_clients * shards_per_client, len(labels))
    rng = np.random.default_rng(seed)
    order = np.argsort(labels, kind="stable")
    pieces = np.array_split(order, num_clients * shards_per_client)
    deal = rng.permutation(len(pieces)).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([pieces[j] for j in row])) for row in deal]


def label_histogram(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Counts of each class on each client, shape ``(clients, classes)``."""
    labels = np.asarray(labels)
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def partition(labels: np.ndarray, num_clients: int, scheme: str, seed: int = 0, alpha: float = 0.1) -> list[np.ndarray]:
    """Dispatch by name: ``iid``, ``dirichlet`` or ``shards``."""
    if scheme == "iid":
        return iid(labels, num_clients, seed)
    if scheme == "dirichlet":
        return dirichlet(labels, num_clients, alpha, seed)
    if scheme == "shards":
        return shards(labels, num_clients, seed=seed)
    raise ValueError(f"unknown partition scheme {scheme!r}")
