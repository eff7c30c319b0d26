"""Asynchronous bulk reading with double buffering for data-parallel training (after Lee et al., HiPC 2021).

Training samples live in a few HDF5 shards (h5py).  Every epoch, the
samples are cut into *blocks* of ``k`` mini-batches of contiguous samples
inside one shard; the blocks are shuffled globally and dealt round-robin to
the ``P`` processes (:func:`epoch_plan`).  Loaders (:class:`BlockLoader`):

* ``k = 1, threaded = False``: the synchronous baseline, one read per mini-batch
  on the training thread;
* ``k > 1, threaded = False``: bulk reading only (one read per block);
* ``threaded = True``: an I/O thread reads the next block into the second of
  two buffers while the trainer consumes the first, and the trainer waits
  only if that block is not ready.

Within a block, mini-batches are drawn in a shuffled sample order, so a
larger ``k`` also mixes samples more.  :class:`EmulatedStorage` puts every
read behind a per-operation latency and a bandwidth cap (``time.sleep``, which
releases the GIL, like h5py's reads), standing in for a parallel file system.
:func:`cosmo_fields` makes CosmoFlow-like 3-D Gaussian random fields whose
power-spectrum slope and amplitude are the regression targets;
:func:`neuron_traces` makes Neuron-Inverter-like membrane-voltage traces of
Izhikevich neurons whose four parameters are the targets.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import h5py
import numpy as np


def cosmo_fields(n: int, side: int, channels: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` Gaussian random fields of ``channels x side^3`` and their 4 targets.

    Channel ``c`` has the power spectrum ``A_c |k|^(-s_c)`` with
    ``s_c = slope + c * tilt`` and ``log A_c = log_amp + c * drift``; the targets
    are ``(slope, log_amp, tilt, drift)``, each drawn uniformly and scaled to
    about unit range.

    Returns
    -------
    tuple
        ``x`` of shape ``(n, channels, side, side, side)`` float32 and ``y`` of
        shape ``(n, 4)`` float32.
    """
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(side)
    kk = np.sqrt(k[:, None, None] ** 2 + k[None, :, None] ** 2 + k[None, None, :] ** 2)
    kk[0, 0, 0] = np.inf
    y = rng.uniform(-1, 1, size=(n, 4)).astype(np.float32)
    x = np.empty((n, channels, side, side, side), dtype=np.float32)
    for i in range(n):
        slope, log_amp, tilt, drift = 2.0 + y[i, 0], y[i, 1], 0.3 * y[i, 2], 0.3 * y[i, 3]
        for c in range(channels):
            amp = np.exp(log_amp + c * drift)
            power = amp * np.where(np.isinf(kk), 0.0, (kk * side) ** -(slope + c * tilt))
            noise = np.fft.fftn(rng.standard_normal((side, side, side)))
            x[i, c] = np.real(np.fft.ifftn(noise * np.sqrt(power))).astype(np.float32)
    return x, y


def neuron_traces(n: int, steps: int, seed: int, dt: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """``n`` voltage traces of Izhikevich neurons under a noisy step current, and their 4 parameters.

    ``v' = 0.04 v^2 + 5 v + 140 - u + I``, ``u' = a (b v - u)``, and on a spike
    (``v >= 30`` mV) ``v <- c``, ``u <- u + d``; ``(a, b, c, d)`` are drawn
    around the regular-spiking values and returned scaled to ``[-1, 1]``.

    Returns
    -------
    tuple
        ``x`` of shape ``(n, 1, steps)`` float32 (mV / 100) and ``y`` of shape ``(n, 4)`` float32.
    """
    rng = np.random.default_rng(seed)
    y = rng.uniform(-1, 1, size=(n, 4))
    a = 0.02 + 0.01 * y[:, 0]
    b = 0.2 + 0.03 * y[:, 1]
    c = -65.0 + 5.0 * y[:, 2]
    d = 8.0 + 4.0 * y[:, 3]
    v = np.full(n, -65.0)
    u = b * v
    x = np.empty((n, 1, steps), dtype=np.float32)
    for t in range(steps):
        current = (10.0 if t > steps // 10 else 0.0) + rng.normal(0.0, 1.0, n)
        v = v + dt * (0.04 * v * v + 5 * v + 140 - u + current)
        u = u + dt * a * (b * v - u)
        spike = v >= 30.0
        x[:, 0, t] = np.where(spike, 30.0, v) / 100.0
        v = np.where(spike, c, v)
        u = np.where(spike, u + d, u)
    return x, y.astype(np.float32)


def write_shards(directory: str | Path, x: np.ndarray, y: np.ndarray, shards: int) -> list[Path]:
    """Split samples into ``shards`` HDF5 files (datasets ``x`` and ``y``, one chunk per sample)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, len(x), shards + 1).astype(int)
    paths = []
    for s, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        path = directory / f"shard{s:03d}.h5"
        with h5py.File(path, "w") as fh:
            fh.create_dataset("x", data=x[lo:hi], chunks=(1, *x.shape[1:]))
            fh.create_dataset("y", data=y[lo:hi])
        paths.append(path)
    return paths


@dataclass(frozen=True, kw_only=True)
class Block:
    """``count`` contiguous samples starting at ``start`` of shard ``shard`` (global ids from ``first``)."""

    shard: int
    start: int
    count: int
    first: int


def shard_sizes(paths: list[Path]) -> list[int]:
    """Samples per shard."""
    out = []
    for p in paths:
        with h5py.File(p, "r") as fh:
            out.append(int(fh["x"].shape[0]))
    return out


def epoch_plan(sizes: list[int], procs: int, rank: int, batch: int, k: int, seed: int, epoch: int) -> list[Block]:
    """The blocks rank ``rank`` reads in ``epoch``: global block shuffle, round-robin deal.

    Blocks hold ``k * batch`` contiguous samples of one shard (the last block
    of a shard may be shorter); every sample is in exactly one block, and
    every block goes to exactly one rank.
    """
    if min(procs, batch, k) < 1 or not 0 <= rank < procs:
        raise ValueError("procs, batch and k must be >= 1 and 0 <= rank < procs")
    blocks = []
    first = 0
    for s, n in enumerate(sizes):
        for start in range(0, n, k * batch):
            blocks.append(Block(shard=s, start=start, count=min(k * batch, n - start), first=first + start))
        first += n
    order = np.random.default_rng([seed, epoch]).permutation(len(blocks))
    return [blocks[i] for i in order[rank::procs]]


class EmulatedStorage:
    """Reads from HDF5 shards behind a per-operation latency and a bandwidth cap.

    Parameters
    ----------
    paths:
        The shard files.
    latency:
        Seconds added to every read operation.
    bandwidth:
        Bytes per second; a read of ``b`` bytes also sleeps ``b / bandwidth``.
    """

    def __init__(self, paths: list[Path], latency: float, bandwidth: float) -> None:
        self.files = [h5py.File(p, "r") for p in paths]
        self.latency, self.bandwidth = latency, bandwidth
        self.ops = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def read(self, shard: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Samples ``[start, stop)`` of ``shard``: ``(x, y)``; one operation."""
        with self._lock:  # h5py serialises anyway; one reader at a time keeps the emulation honest
            fh = self.files[shard]
            x, y = fh["x"][start:stop], fh["y"][start:stop]
            self.ops += 1
            self.bytes += x.nbytes + y.nbytes
            time.sleep(self.latency + (x.nbytes + y.nbytes) / self.bandwidth)
        return x, y

    def close(self) -> None:
        """Close the shard files."""
        for fh in self.files:
            fh.close()


@dataclass(kw_only=True)
class LoaderStats:
    """What an epoch of a loader cost: read operations, seconds the trainer waited, sample ids seen."""

    ops: int = 0
    wait_s: float = 0.0
    samples: list[int] = field(default_factory=list)


class BlockLoader:
    """Mini-batches from the blocks of an epoch plan, read in bulk, optionally by a background thread.

    Parameters
    ----------
    storage:
        Where blocks are read from.
    batch:
        Mini-batch size ``b``.
    threaded:
        Read the next block on an I/O thread into a second buffer (double buffering).
    seed:
        Seed of the in-block sample order.
    """

    def __init__(self, storage: EmulatedStorage, batch: int, threaded: bool, seed: int) -> None:
        self.storage, self.batch, self.threaded, self.seed = storage, batch, threaded, seed

    def _read(self, blk: Block) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x, y = self.storage.read(blk.shard, blk.start, blk.start + blk.count)
        return x, y, np.arange(blk.first, blk.first + blk.count)

    def _blocks(self, plan: list[Block], stats: LoaderStats) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if not self.threaded:
            for blk in plan:
                t0 = time.perf_counter()
                got = self._read(blk)
                stats.wait_s += time.perf_counter() - t0
                stats.ops += 1
                yield got
            return
        ready: queue.Queue = queue.Queue(maxsize=1)  # one filled buffer waiting + one being consumed

        def reader() -> None:
            try:
                for blk in plan:
                    ready.put(self._read(blk))
                ready.put(None)
            except BaseException as exc:  # hand the failure to the trainer
                ready.put(exc)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        while True:
            t0 = time.perf_counter()
            got = ready.get()
            stats.wait_s += time.perf_counter() - t0
            if got is None:
                break
            if isinstance(got, BaseException):
                raise got
            stats.ops += 1
            yield got
        thread.join()

    def epoch(self, plan: list[Block], epoch: int, stats: LoaderStats) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(x, y)`` mini-batches of an epoch; ``stats`` gathers ops, waiting time and sample ids."""
        for n, (x, y, ids) in enumerate(self._blocks(plan, stats)):
            order = np.random.default_rng([self.seed, epoch, n]).permutation(len(ids))
            for lo in range(0, len(ids), self.batch):
                pick = order[lo:lo + self.batch]
                stats.samples.extend(ids[pick].tolist())
                yield x[pick], y[pick]
