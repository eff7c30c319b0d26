"""Data shuffling for data-parallel training: global, local and partial-local, with exchange accounting.

The N training samples live in M disjoint shards, one per worker (node-local
storage).  Before each epoch:

- **local shuffling** (LS) keeps every shard and permutes it locally;
- **partial-local shuffling** (PLS, fraction Q) has every worker pick
  ``round(Q * N / M)`` of its samples uniformly at random; the picked samples
  form one pool that is permuted uniformly and dealt back in equal parts, so
  every shard keeps its size; only samples dealt to another worker travel;
- **global shuffling** (GS) is PLS with Q = 1: the whole set is re-dealt,
  which is a fresh uniformly random partition.

Q = 0 is LS and Q = 1 is GS by construction of one operator,
:func:`partial_exchange`.  The pool-and-deal rule is our reconstruction of the
paper's balanced exchange (it lets a picked sample stay home, so the expected
share that travels is ``Q (M - 1) / M``); the paper's exact destination rule
was not available.

Every exchange returns an :class:`ExchangeRecord` with the samples picked,
the samples that moved, their bytes and the peak per-worker storage.

Workers that never see the whole data set (LS, small Q) also hold BatchNorm
running statistics of their own shard only; :func:`averaged_bn_statistics`
evaluates a replica with its workers' statistics averaged, as an allreduce of
the BatchNorm buffers before the test pass would, instead of one worker's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from repro.partition import partition
from repro.training.simulator import ReplicaBank


@dataclass(frozen=True, kw_only=True)
class ExchangeRecord:
    """Communication accounting of one exchange.

    Attributes
    ----------
    picked_per_worker
        Samples each worker put into the pool (``round(Q * n_local)``).
    sent_per_worker, received_per_worker
        Samples each worker sent to / received from other workers.
    bytes_moved
        Total bytes that crossed between workers.
    peak_storage
        Largest number of samples a worker holds during the exchange
        (its shard plus what it receives before deleting what it sent).
    """

    picked_per_worker: tuple[int, ...]
    sent_per_worker: tuple[int, ...]
    received_per_worker: tuple[int, ...]
    bytes_moved: int
    peak_storage: int

    @property
    def samples_moved(self) -> int:
        """Samples that changed worker."""
        return int(sum(self.sent_per_worker))


def initial_shards(labels: np.ndarray, workers: int, scheme: str, seed: int) -> list[np.ndarray]:
    """Split sample ids into ``workers`` equal shards, ``iid`` or label-``skewed`` (sorted by label, dealt in blocks).

    Shards are truncated to a common size ``N // workers`` so that every
    worker runs the same number of steps.
    """
    n_local = len(labels) // workers
    if scheme == "iid":
        parts = partition(labels, workers, "iid", seed=seed)
    elif scheme == "skewed":
        order = np.argsort(labels, kind="stable")
        parts = [order[w * n_local:(w + 1) * n_local] for w in range(workers)]
    else:
        raise ValueError(f"unknown shard scheme {scheme!r}; use 'iid' or 'skewed'")
    return [np.sort(np.asarray(p[:n_local], dtype=np.int64)) for p in parts]


def partial_exchange(shards: list[np.ndarray], q: float, rng: np.random.Generator,
                     sample_bytes: int = 1) -> tuple[list[np.ndarray], ExchangeRecord]:
    """One partial exchange: every worker pools ``round(q * n_local)`` random samples; the pool is re-dealt.

    Parameters
    ----------
    shards
        Equal-sized arrays of sample ids, one per worker.
    q
        Exchange fraction Q in [0, 1].
    rng
        Random generator (shared by all workers, so every rank computes the same exchange).
    sample_bytes
        Size of one sample, for the byte count.

    Returns
    -------
    list[np.ndarray], ExchangeRecord
        The new shards (sorted ids, same sizes) and the accounting.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"exchange fraction must lie in [0, 1], got {q}")
    m = len(shards)
    n_local = len(shards[0])
    if any(len(s) != n_local for s in shards):
        raise ValueError("shards must have equal sizes")
    k = int(round(q * n_local))
    picked = [rng.choice(s, size=k, replace=False) if k else s[:0] for s in shards]
    pool = np.concatenate(picked)
    origin = np.repeat(np.arange(m), k)
    perm = rng.permutation(len(pool))
    pool, origin = pool[perm], origin[perm]
    dest = np.repeat(np.arange(m), k)  # the shuffled pool is dealt back in equal parts
    new_shards = []
    for w in range(m):
        kept = np.setdiff1d(shards[w], picked[w], assume_unique=True)
        new_shards.append(np.sort(np.concatenate([kept, pool[dest == w]])))
    moved = origin != dest
    sent = tuple(int(np.sum(moved & (origin == w))) for w in range(m))
    received = tuple(int(np.sum(moved & (dest == w))) for w in range(m))
    record = ExchangeRecord(
        picked_per_worker=(k,) * m,
        sent_per_worker=sent,
        received_per_worker=received,
        bytes_moved=int(moved.sum()) * sample_bytes,
        peak_storage=n_local + max(received, default=0),
    )
    return new_shards, record


def epoch_plan(shards: list[np.ndarray], batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """Each worker permutes its own shard and cuts it into batches; the last partial batch is dropped.

    Returns
    -------
    np.ndarray
        Sample ids of shape ``(steps, workers, batch_size)``, ``steps = n_local // batch_size``.
    """
    n_local = len(shards[0])
    steps = n_local // batch_size
    if steps == 0:
        raise ValueError(f"a shard of {n_local} samples holds no batch of {batch_size}")
    orders = [rng.permutation(s)[: steps * batch_size].reshape(steps, batch_size) for s in shards]
    return np.stack(orders, axis=1)


def label_spread(labels: np.ndarray, shards: list[np.ndarray], num_classes: int) -> float:
    """Total-variation distance between the workers' label histograms and the global one, averaged over workers.

    0 means every shard has the global label mix; values near 1 mean disjoint classes.
    """
    overall = np.bincount(labels, minlength=num_classes) / len(labels)
    tv = [0.5 * np.abs(np.bincount(labels[s], minlength=num_classes) / len(s) - overall).sum() for s in shards]
    return float(np.mean(tv))


@contextlib.contextmanager
def averaged_bn_statistics(bank: ReplicaBank) -> Iterator[ReplicaBank]:
    """Within the block, every worker of every replica holds its replica's workers' mean BatchNorm statistics.

    Each BatchNorm layer's running mean and running variance are replaced by their mean over the S workers of
    the replica (an allreduce-average of the buffers), so an evaluation inside the block, which reads worker
    0's statistics, uses the workers' average instead; the buffers are restored on leaving the block.
    The variance is the mean of the workers' variances, as averaging the buffers gives, not the pooled
    variance of their union (which would add the spread of the workers' means).
    """
    names = [f"running_{kind}{k}" for k in range(len(bank.momentum_bn)) for kind in ("mean", "var")]
    saved = {n: getattr(bank, n).clone() for n in names}
    try:
        with torch.no_grad():
            for n in names:
                buf = getattr(bank, n)
                buf.copy_(buf.mean(dim=1, keepdim=True).expand_as(buf))
        yield bank
    finally:
        with torch.no_grad():
            for n, value in saved.items():
                getattr(bank, n).copy_(value)
