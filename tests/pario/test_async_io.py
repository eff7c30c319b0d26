"""Loaders: each epoch delivers every sample of the rank's share exactly once, with the stated read count."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from repro.pario.async_io import (
    BlockLoader,
    EmulatedStorage,
    LoaderStats,
    cosmo_fields,
    epoch_plan,
    neuron_traces,
    shard_sizes,
    write_shards,
)
from repro.pario.ddp_train import Strategy, launch_training, process_group_backend, rank_device


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


class _SignallingStorage(EmulatedStorage):
    """Storage that sets ``second_read`` when a second block's read begins (no latency: order, not time)."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__(paths, latency=0.0, bandwidth=1e12)
        self.second_read = threading.Event()
        self.reads = 0

    def read(self, shard: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        self.reads += 1
        if self.reads == 2:
            self.second_read.set()
        return super().read(shard, start, stop)


@pytest.mark.parametrize("threaded", [False, True])
def test_only_the_thread_reads_the_next_block_while_the_trainer_holds_a_batch(shards: list[Path],
                                                                              threaded: bool) -> None:
    """Double buffering is an order of events: block 2's read starts before the trainer asks for more.

    The trainer holds its first batch and waits for the second read to begin.
    The synchronous loader cannot begin it (the trainer is not asking), so the
    short wait must time out; the threaded loader must begin it within a
    generous bound whatever the machine's load.  The time this saves is a
    ``make bench`` row (``bench/pario.py``), not a test.
    """
    plan = epoch_plan(shard_sizes(shards), 1, 0, 5, 2, seed=0, epoch=0)
    storage = _SignallingStorage(shards)
    batches = BlockLoader(storage, 5, threaded, seed=0).epoch(plan, 0, LoaderStats())
    next(batches)
    began = storage.second_read.wait(timeout=30.0 if threaded else 0.5)
    rest = list(batches)
    storage.close()
    assert began is threaded
    assert storage.reads == len(plan) and len(rest) > 0


def test_neuron_traces_spike_and_depend_on_parameters() -> None:
    x, y = neuron_traces(6, 2000, seed=0)
    assert x.shape == (6, 1, 2000) and y.shape == (6, 4) and np.all(np.abs(y) <= 1)
    spikes = (x[:, 0] >= 0.3).sum(axis=1)
    assert np.all(spikes > 0)
    assert len(set(spikes.tolist())) > 1  # different parameters, different firing


@pytest.mark.slow
def test_ddp_training_is_identical_for_same_sample_order(tmp_path: Path) -> None:
    x, y = neuron_traces(40, 512, seed=1)
    paths = write_shards(tmp_path, x[:32], y[:32], 2)
    rep = launch_training(
        {
            "shards": paths,
            "val_x": x[32:],
            "val_y": y[32:],
            "strategies": [Strategy(name="synchronous", k=1, threaded=False), Strategy(name="thread only", k=1, threaded=True)],
            "epochs": 2,
            "batch": 4,
            "lr": 1e-3,
            "seed": 0,
            "latency": 0.0,
            "bandwidth": 1e12,
        },
        procs=2,
        timeout=240,
    )
    sync, threaded = rep["ranks"][0]
    # same blocks, same in-block order: the thread changes when data arrives, not what the model sees
    assert [e["train_loss"] for e in sync["epochs"]] == [e["train_loss"] for e in threaded["epochs"]]
    assert sync["val_loss"] == threaded["val_loss"]


def test_ranks_share_a_process_group_backend_their_devices_allow() -> None:
    """CPU ranks use gloo; CUDA ranks use NCCL only with a GPU each (NCCL refuses two ranks on one GPU)."""
    cpu = rank_device("cpu", 1)
    assert cpu == torch.device("cpu")
    assert process_group_backend(cpu, 2) == "gloo"
    gpus = torch.cuda.device_count()
    assert process_group_backend(torch.device("cuda", 0), gpus + 1) == "gloo"
    if gpus:
        assert process_group_backend(torch.device("cuda", 0), gpus) == "nccl"
        assert rank_device("cuda", gpus) == torch.device("cuda", 0)
