"""Chapter ``async-io``: an I/O thread reading many samples at once, double-buffered (Lee et al., HiPC 2021).

:func:`runs` writes synthetic CosmoFlow-like fields to sharded HDF5, then for
every storage latency and seed trains the same model on 2 processes
(``torch.distributed`` gloo, started by the shared MPI launcher) with every
loading strategy of :func:`repro.pario.ddp_train.strategies`: synchronous
per-batch reads, bulk reads alone, the I/O thread alone, and both.  Storage
is emulated (:class:`repro.pario.async_io.EmulatedStorage`): every read
pays a latency and a bandwidth cap.  The ranks compute on the ``device``
parameter's device; on CUDA the process group is NCCL only where every rank
has its own GPU, and stays gloo where they share one
(:func:`repro.pario.ddp_train.process_group_backend`).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.pario.async_io import cosmo_fields, neuron_traces, write_shards
from repro.pario.ddp_train import launch_training, strategies

SYNC = "synchronous"


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Data, model and storage settings.

    Attributes
    ----------
    workload:
        ``"cosmoflow"`` (3-D fields) or ``"neuron"`` (voltage traces).
    samples, val_samples:
        Training and validation samples.
    side, channels:
        Field size (``side^3`` per channel) and channels of the CosmoFlow-like fields.
    trace_steps:
        Time steps of a neuron trace.
    shards:
        HDF5 files the training samples are split into.
    batch, ks, epochs, lr:
        Mini-batch size, block sizes ``k`` (in mini-batches), epochs, Adam's learning rate.
    bandwidth:
        Emulated storage bandwidth (bytes/s).
    procs:
        Data-parallel processes.
    device:
        Where the ranks compute: ``cpu``, ``cuda`` or ``auto``.
    """

    workload: str
    samples: int
    val_samples: int
    side: int
    channels: int
    trace_steps: int
    shards: int
    batch: int
    ks: tuple[int, ...]
    epochs: int
    lr: float
    bandwidth: float
    procs: int
    device: str = "cpu"


@dataclass(frozen=True, kw_only=True)
class EpochRecord:
    """One epoch of one strategy on one rank."""

    latency: float
    seed: int
    rank: int
    strategy: str
    k: int
    threaded: bool
    epoch: int
    epoch_s: float
    wait_s: float
    ops: int
    expected_ops: int
    train_loss: float
    val_loss: float
    samples: tuple[int, ...]


def make_data(cfg: RunConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training plus validation samples of the configured workload."""
    n = cfg.samples + cfg.val_samples
    if cfg.workload == "cosmoflow":
        return cosmo_fields(n, cfg.side, cfg.channels, seed)
    if cfg.workload == "neuron":
        return neuron_traces(n, cfg.trace_steps, seed)
    raise ValueError(f"unknown workload {cfg.workload!r}")


def runs(cfg: RunConfig, latencies: list[float], seeds: list[int], timeout: float = 600.0) -> list[EpochRecord]:
    """Train every strategy for every latency and seed; one 2-process launch per (latency, seed)."""
    out = []
    for seed in seeds:
        x, y = make_data(cfg, seed)
        with tempfile.TemporaryDirectory(prefix="repro-asyncio-") as tmp:
            paths = write_shards(tmp, x[:cfg.samples], y[:cfg.samples], cfg.shards)
            for latency in tqdm(latencies, desc=f"training runs, seed {seed}"):
                job = {"shards": paths, "val_x": x[cfg.samples:], "val_y": y[cfg.samples:],
                       "strategies": strategies(cfg.ks), "epochs": cfg.epochs, "batch": cfg.batch, "lr": cfg.lr,
                       "seed": seed, "latency": latency, "bandwidth": cfg.bandwidth,
                       "device": cfg.device}
                rep = launch_training(job, cfg.procs, timeout)
                for rank, rows in enumerate(rep["ranks"]):
                    for row in rows:
                        for e in row["epochs"]:
                            out.append(
                                EpochRecord(
                                    latency=latency,
                                    seed=seed,
                                    rank=rank,
                                    strategy=row["strategy"],
                                    k=row["k"],
                                    threaded=row["threaded"],
                                    epoch=e["epoch"],
                                    epoch_s=e["epoch_s"],
                                    wait_s=e["wait_s"],
                                    ops=e["ops"],
                                    expected_ops=e["expected_ops"],
                                    train_loss=e["train_loss"],
                                    val_loss=row["val_loss"],
                                    samples=tuple(e["samples"]),
                                )
                            )
    return out


def frame(records: list[EpochRecord]) -> pd.DataFrame:
    """Epoch records as a table (without the sample lists), epoch time split into waiting and the rest."""
    df = pd.DataFrame([{k: v for k, v in r.__dict__.items() if k != "samples"} for r in records])
    df["compute_s"] = df.epoch_s - df.wait_s
    return df


def best_async(df: pd.DataFrame) -> str:
    """The bulk + thread strategy with the largest ``k`` (the paper's method at its most aggregated)."""
    names = df[(df.threaded) & (df.k > 1)].sort_values("k").strategy.unique()
    return str(names[-1])


def sample_faults(records: list[EpochRecord], n_samples: int) -> dict[int, int]:
    """Per seed, the count of faulty epochs.

    An epoch is faulty when a strategy repeats a sample, misses one, delivers another multiset than
    the synchronous loader, or makes a read count that differs from the plan's block count.
    """
    faults: dict[int, int] = {}
    by_key: dict[tuple, list[int]] = {}
    for r in records:
        faults.setdefault(r.seed, 0)
        by_key.setdefault((r.latency, r.seed, r.strategy, r.epoch), []).extend(r.samples)
        faults[r.seed] += int(r.ops != r.expected_ops)
        faults[r.seed] += int(len(set(r.samples)) != len(r.samples))
    for (lat, seed, strategy, epoch), ids in by_key.items():
        sync = sorted(by_key[(lat, seed, SYNC, epoch)])
        faults[seed] += int(sorted(ids) != sync) + int(sorted(ids) != list(range(n_samples)))
    return faults


def claims(records: list[EpochRecord], n_samples: int, seeds: list[int]) -> dict[str, list[float]]:
    """Per-seed values of every claim of the chapter (see its registry file)."""
    df = frame(records)
    slow = df[df.latency == df.latency.max()]
    method = best_async(df)
    # an epoch ends when its slowest rank ends
    ep = slow.groupby(["seed", "strategy", "epoch"]).epoch_s.max().groupby(["seed", "strategy"]).sum()
    val = slow.groupby(["seed", "strategy"]).val_loss.first()
    faults = sample_faults(records, n_samples)
    return {
        "epoch_time_reduction": [float(100 * (1 - ep[s, method] / ep[s, SYNC])) for s in seeds],
        "val_loss_change": [float(100 * (val[s, method] / val[s, SYNC] - 1)) for s in seeds],
        "same_samples": [float(faults[s]) for s in seeds],
    }


def breakdown_figure(df: pd.DataFrame) -> plt.Figure:
    """Epoch time split into waiting for data and the rest, per strategy, one panel per latency."""
    mean = (
        df.groupby(["latency", "seed", "strategy", "epoch"])[["wait_s", "compute_s", "epoch_s"]]
        .max()
        .groupby(["latency", "strategy"])
        .mean()
        .reset_index()
    )
    lats = sorted(mean.latency.unique())
    order = list(dict.fromkeys(df.strategy))
    fig, axes = plt.subplots(1, len(lats), figsize=(5.5 * len(lats), 4), squeeze=False, sharey=True)
    for ax, lat in zip(axes[0], lats):
        sub = mean[mean.latency == lat].set_index("strategy").loc[order]
        x = np.arange(len(order))
        ax.bar(x, sub.compute_s, label="the rest: training, gradient exchange, waiting for the other rank")
        ax.bar(x, sub.wait_s, bottom=sub.compute_s, label="waiting for data")
        ax.set_xticks(x)
        ax.set_xticklabels(order, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"storage latency {lat * 1e3:g} ms per read")
    axes[0][0].set_ylabel("epoch time, s (slowest rank, mean over epochs)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def loss_figure(df: pd.DataFrame) -> plt.Figure:
    """Training loss per epoch of every strategy at the largest latency (mean over ranks and seeds)."""
    slow = df[df.latency == df.latency.max()]
    curve = slow.groupby(["strategy", "epoch"], sort=False).train_loss.mean().reset_index()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for strategy, grp in curve.groupby("strategy", sort=False):
        ax.plot(grp.epoch + 1, grp.train_loss, marker="o", label=strategy)
    ax.set(xlabel="epoch", ylabel="training loss (MSE)", title="loss curves")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
