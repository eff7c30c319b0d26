"""Client partitioners: IID, Dirichlet label skew and shards.

Each returns a list of index arrays, one per client, that together cover
every sample exactly once.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

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


# ----- partitioners that leave samples unused: sparse-and-scarce, cluster skew ----------------
# Unlike the ones above, these give each client a target label histogram and draw it from the
# pool without replacement; samples nobody asked for stay unused.


def _largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers summing to ``total`` in proportion to ``weights`` (largest-remainder rounding, ties by index)."""
    w = np.asarray(weights, dtype=float)
    if total <= 0 or w.sum() <= 0:
        return np.zeros(len(w), dtype=np.int64)
    raw = total * w / w.sum()
    out = np.floor(raw).astype(np.int64)
    rest = total - int(out.sum())
    order = np.argsort(-(raw - out), kind="stable")
    out[order[:rest]] += 1
    return out


@dataclass(frozen=True, kw_only=True)
class HistogramPlan:
    """A planned label histogram and what the pool of samples allowed of it.

    Attributes
    ----------
    planned
        ``(clients, classes)`` counts as drawn from the partitioner's law.
    counts
        The counts the split holds: ``planned`` with every class that asks for more samples than the pool
        has scaled down to the pool (largest-remainder rounding); equal to ``planned`` when nothing is short.
    """

    planned: np.ndarray
    counts: np.ndarray

    @property
    def capped(self) -> dict[int, int]:
        """Classes that were scaled down, and how many samples of each the plan lost."""
        lost = self.planned.sum(0) - self.counts.sum(0)
        return {int(c): int(lost[c]) for c in np.flatnonzero(lost)}


def _cap_to_pool(counts: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Scale down each class's column of ``counts`` that asks for more samples than the pool holds."""
    counts = counts.copy()
    for c in range(counts.shape[1]):
        if counts[:, c].sum() > available[c]:
            counts[:, c] = _largest_remainder(int(available[c]), counts[:, c])
    return counts


def shortages(labels: np.ndarray, counts: np.ndarray) -> dict[int, int]:
    """Classes of ``counts`` that ask for more samples than ``labels`` holds, and by how many."""
    counts = np.asarray(counts, dtype=np.int64)
    available = np.bincount(np.asarray(labels), minlength=counts.shape[1])[:counts.shape[1]]
    return {c: int(counts[:, c].sum() - available[c]) for c in range(counts.shape[1])
            if counts[:, c].sum() > available[c]}


def draw_histogram(labels: np.ndarray, counts: np.ndarray, seed: int = 0, resample: bool = False) -> list[np.ndarray]:
    """Draw ``counts[i, c]`` samples of class ``c`` for every client ``i``.

    Every class is drawn without replacement while its pool lasts.  A class asked for more samples than it
    has raises, unless ``resample``: then its whole pool is used once and the shortfall is drawn again
    from the pool with replacement (so some samples appear twice, on different clients or the same one).

    Raises
    ------
    ValueError
        If a class is asked for more samples than it has and ``resample`` is off.
    """
    labels = np.asarray(labels)
    counts = np.asarray(counts, dtype=np.int64)
    num_classes = counts.shape[1]
    short = shortages(labels, counts)
    if short and not resample:
        raise ValueError(f"classes {sorted(short)} are asked for more samples than they have "
                         f"(short by {[short[c] for c in sorted(short)]})")
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in range(len(counts))]
    for c in range(num_classes):
        members = np.flatnonzero(labels == c)
        pool = rng.permutation(members)
        if c in short:
            pool = rng.permutation(np.concatenate([pool, rng.choice(members, size=short[c], replace=True)]))
        cuts = np.cumsum(counts[:, c])[:-1]
        for i, chunk in enumerate(np.split(pool[: counts[:, c].sum()], cuts)):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def sparse_and_scarce_counts(labels: np.ndarray, num_clients: int, usage: float = 0.1, alpha: float = 0.1,
                             beta: float = 2000.0, seed: int = 0, on_shortage: str = "cap") -> HistogramPlan:
    """Label histogram of SAFA's sparse-and-scarce split, shape ``(clients, classes)``, and what was capped.

    Client ``i`` gets a volume ``0.1 u |D| / N + floor(q_i u |D|)`` with
    ``q ~ Dir(beta 1_N)`` (large ``beta``: near-equal volumes) and label
    proportions ``p_i ~ Dir(alpha 1_C)`` (small ``alpha``: few classes, i.e.
    sparse); its count of class ``c`` is ``floor(p_ic * volume_i)``.  Small
    ``u`` makes every client's data scarce.  Every client keeps at least one
    sample.  The volumes add up to about ``1.1 u |D|``, so with ``u`` near 1
    some classes are asked for more samples than they have: with
    ``on_shortage="cap"`` those are scaled down to the pool and the returned
    plan says which and by how much (:attr:`HistogramPlan.capped`); with
    ``"raise"`` the split refuses.

    Parameters
    ----------
    labels
        Integer class label of each sample.
    num_clients
        Number of clients ``N``.
    usage
        ``u`` in (0, 1]: share of the data the clients hold in total (about).
    alpha
        Label concentration (> 0).
    beta
        Volume concentration (> 0).
    seed
        Seed of the Dirichlet draws.
    on_shortage
        ``cap`` or ``raise`` (see above).

    Returns
    -------
    HistogramPlan
        The planned and the realised counts.

    Raises
    ------
    ValueError
        On parameters out of range, or with ``on_shortage="raise"`` when a class is asked for more samples
        than it has (the message names ``usage``, the classes and the shortfall).
    """
    labels = np.asarray(labels)
    _check(num_clients, len(labels))
    if on_shortage not in ("cap", "raise"):
        raise ValueError(f"on_shortage must be 'cap' or 'raise', got {on_shortage!r}")
    if not 0.0 < usage <= 1.0:
        raise ValueError(f"usage must lie in (0, 1], got {usage}")
    if alpha <= 0 or beta <= 0:
        raise ValueError(f"alpha and beta must be > 0, got alpha={alpha}, beta={beta}")
    rng = np.random.default_rng(seed)
    n, classes = len(labels), int(labels.max()) + 1
    q = rng.dirichlet(np.full(num_clients, beta))
    volume = np.floor(0.1 * usage * n / num_clients + np.floor(q * n * usage)).astype(np.int64)
    props = rng.dirichlet(np.full(classes, alpha), size=num_clients)
    counts = np.floor(props * volume[:, None]).astype(np.int64)
    empty = counts.sum(1) == 0
    counts[empty, props[empty].argmax(1)] = 1
    short = shortages(labels, counts)
    if short and on_shortage == "raise":
        raise ValueError(f"parameter 'usage' ({usage:g}) asks for more samples of classes {sorted(short)} than they "
                         f"have (short by {[short[c] for c in sorted(short)]}); lower usage, or let the split cap "
                         "them with on_shortage='cap'")
    return HistogramPlan(planned=counts, counts=_cap_to_pool(counts, np.bincount(labels, minlength=classes)))


def sparse_and_scarce(labels: np.ndarray, num_clients: int, usage: float = 0.1, alpha: float = 0.1,
                      beta: float = 2000.0, seed: int = 0, on_shortage: str = "cap") -> list[np.ndarray]:
    """SAFA's sparse-and-scarce split: draws :func:`sparse_and_scarce_counts` from the samples.

    A capped class (``on_shortage="cap"``) is reported in a warning naming the classes and the samples the
    plan lost; ``"raise"`` refuses instead.
    """
    plan = sparse_and_scarce_counts(labels, num_clients, usage, alpha, beta, seed, on_shortage)
    if plan.capped:
        warnings.warn(f"sparse_and_scarce: usage={usage:g} asks for more samples of classes {sorted(plan.capped)} "
                      f"than they have; they are capped to the pool ({sum(plan.capped.values())} planned samples "
                      "dropped)", stacklevel=2)
    return draw_histogram(labels, plan.counts, seed=seed + 1)


def sparsity(hist: np.ndarray) -> float:
    """Share of (client, class) cells of a label histogram that are empty."""
    return float(np.mean(np.asarray(hist) == 0))


def scarcity(hist: np.ndarray, threshold: int = 50) -> float:
    """Share of clients holding at most ``threshold`` samples."""
    return float(np.mean(np.asarray(hist).sum(1) <= threshold))


def cluster_skew_counts(labels: np.ndarray, cluster_sizes: list[int], samples_per_client: int,
                        alpha: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Label histogram of a cluster-skewed split, and each client's cluster.

    Clients form groups of ``cluster_sizes``; every group draws one label
    distribution ``p_g ~ Dir(alpha 1_C)`` and each of its clients gets
    ``samples_per_client`` samples split over the classes by ``p_g``
    (largest-remainder rounding), so clients of a group share a distribution
    exactly.  The counts are the plan: a class may ask for more samples than
    it has (see :func:`cluster_skew`, which resamples it).

    Returns
    -------
    counts : ndarray
        ``(clients, classes)`` histogram.
    cluster : ndarray
        Group index of each client.
    """
    labels = np.asarray(labels)
    if not cluster_sizes or min(cluster_sizes) < 1:
        raise ValueError(f"cluster_sizes must be positive integers, got {cluster_sizes}")
    if samples_per_client < 1:
        raise ValueError(f"samples_per_client must be >= 1, got {samples_per_client}")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    _check(sum(cluster_sizes), len(labels))
    rng = np.random.default_rng(seed)
    classes = int(labels.max()) + 1
    cluster = np.repeat(np.arange(len(cluster_sizes)), cluster_sizes)
    dists = rng.dirichlet(np.full(classes, alpha), size=len(cluster_sizes))
    counts = np.stack([_largest_remainder(samples_per_client, dists[g]) for g in cluster])
    return counts, cluster


def cluster_skew(labels: np.ndarray, cluster_sizes: list[int], samples_per_client: int, alpha: float = 0.5,
                 seed: int = 0, on_shortage: str = "resample") -> list[np.ndarray]:
    """A cluster-skewed split (CADIS, FedDRL): draws :func:`cluster_skew_counts` from the samples.

    Every client gets exactly its planned histogram.  A class the plan asks for more often than it occurs
    is, with ``on_shortage="resample"``, drawn again with replacement once its pool is used up, and a
    warning names the classes and the realised per-class totals; with ``"raise"`` the split refuses.
    (Earlier versions silently scaled such classes down, so some clients got fewer samples than planned.)
    """
    if on_shortage not in ("resample", "raise"):
        raise ValueError(f"on_shortage must be 'resample' or 'raise', got {on_shortage!r}")
    counts, _ = cluster_skew_counts(labels, cluster_sizes, samples_per_client, alpha, seed)
    short = shortages(labels, counts)
    if short and on_shortage == "resample":
        warnings.warn(f"cluster_skew: classes {sorted(short)} run out of samples; {sum(short.values())} samples "
                      f"drawn again with replacement; realised per-class totals {counts.sum(0).tolist()}",
                      stacklevel=2)
    return draw_histogram(labels, counts, seed=seed + 1, resample=on_shortage == "resample")
