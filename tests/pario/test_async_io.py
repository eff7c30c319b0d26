"""Loaders: each epoch delivers every sample of the rank's share exactly once, with the stated read count."""

from __future__ import annotations

import math
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from repro.pario.async_io import BlockLoader, EmulatedStorage, LoaderStats, cosmo_fields, epoch_plan, shard_sizes, write_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    x, y = cosmo_fields(50, 4, 2, seed=0)
    return write_shards(tmp_path_factory.mktemp("shards"), x, y, 3)


@pytest.mark.parametrize("procs", [1, 2, 3, 4])
@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_plan_partitions_the_samples(procs: int, k: int) -> None:
    sizes = [17, 16, 17]
    seen = []
    for rank in range(procs):
        plan = epoch_plan(sizes, procs, rank, 4, k, seed=1, epoch=2)
        seen += [i for b in plan for i in range(b.first, b.first + b.count)]
        assert all(b.count <= 4 * k for b in plan)
    assert sorted(seen) == list(range(50))
    n_blocks = sum(math.ceil(n / (4 * k)) for n in sizes)
    assert sum(len(epoch_plan(sizes, procs, r, 4, k, 1, 2)) for r in range(procs)) == n_blocks


@pytest.mark.parametrize("k,threaded", [(1, False), (1, True), (4, False), (4, True), (16, True)])
def test_loaders_deliver_each_sample_once(shards: list[Path], k: int, threaded: bool) -> None:
    storage = EmulatedStorage(shards, latency=0.0, bandwidth=1e12)
    plan = epoch_plan(shard_sizes(shards), 2, 0, 4, k, seed=3, epoch=0)
    stats = LoaderStats()
    batches = list(BlockLoader(storage, 4, threaded, seed=0).epoch(plan, 0, stats))
    storage.close()
    expected = sorted(i for b in plan for i in range(b.first, b.first + b.count))
    assert sorted(stats.samples) == expected and len(set(stats.samples)) == len(stats.samples)
    assert stats.ops == len(plan)
    assert all(len(x) <= 4 for x, _ in batches)
    # the data that arrives is the data of those samples
    x_all = np.concatenate([h5py.File(p, "r")["x"][:] for p in shards])
    got = np.concatenate([x for x, _ in batches])
    assert np.array_equal(got, x_all[stats.samples])


def test_thread_overlaps_io_with_compute(shards: list[Path]) -> None:
    plan = epoch_plan(shard_sizes(shards), 1, 0, 5, 2, seed=0, epoch=0)

    def epoch(threaded: bool, compute: float) -> tuple[float, float]:
        storage = EmulatedStorage(shards, latency=0.03, bandwidth=1e12)
        stats = LoaderStats()
        t0 = time.perf_counter()
        for _ in BlockLoader(storage, 5, threaded, seed=0).epoch(plan, 0, stats):
            time.sleep(compute)
        storage.close()
        return time.perf_counter() - t0, stats.wait_s

    io_only = 0.03 * len(plan)
    # no compute: the thread cannot make reading faster
    assert epoch(True, 0.0)[0] >= 0.9 * io_only
    # compute per block (2 batches x 0.02 s) above the read time: the trainer barely waits
    sync_t, sync_wait = epoch(False, 0.02)
    async_t, async_wait = epoch(True, 0.02)
    assert async_wait < 0.5 * sync_wait and async_t < sync_t
