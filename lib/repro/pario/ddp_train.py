"""Data-parallel training on sharded HDF5 with each loading strategy: ``torch.distributed`` (gloo).

The ranks are started by the shared MPI launcher
(:func:`repro.hpc.launcher.run_mpi`, so a failing rank ends
the job and a hang hits the timeout); rank 0 picks a TCP port and broadcasts
it over MPI, then every rank joins a gloo process group and trains the same
small 3-D CNN with ``DistributedDataParallel``.  For every strategy the model
starts from the same seed; per epoch we record the epoch time, the time the
trainer waited for data and the read operations, and at the end the
validation loss.  Rank 0 writes the JSON report.

The job's ``device`` (``cpu``, ``cuda`` or ``auto``) places each rank's model
and batches; the samples are read and the weights initialised on the CPU.  On
CUDA, rank ``r`` takes GPU ``r mod n``; the process group is NCCL when every
rank has a GPU of its own and gloo otherwise (NCCL refuses two ranks on one
GPU, and gloo reduces CUDA tensors through host memory), see
:func:`process_group_backend`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from repro import atomic
from repro.devices import resolve_device, synchronize
from repro.hpc.launcher import run_mpi
from repro.pario.async_io import BlockLoader, EmulatedStorage, LoaderStats, epoch_plan, shard_sizes


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """A loading strategy: blocks of ``k`` mini-batches, read on the training thread or by an I/O thread."""

    name: str
    k: int
    threaded: bool


def strategies(ks: Sequence[int]) -> list[Strategy]:
    """The synchronous baseline, bulk reading alone, the I/O thread alone, and both, for every ``k > 1``."""
    out = [Strategy(name="synchronous", k=1, threaded=False), Strategy(name="thread only", k=1, threaded=True)]
    for k in ks:
        if k > 1:
            out += [Strategy(name=f"bulk k={k}", k=k, threaded=False), Strategy(name=f"bulk k={k} + thread", k=k, threaded=True)]
    return out


class CosmoNet(nn.Module):
    """A small 3-D CNN regressing the 4 targets of a CosmoFlow-like field."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv3d(channels, 8, 3, stride=2, padding=1), nn.LeakyReLU(0.1),
            nn.Conv3d(8, 16, 3, stride=2, padding=1), nn.LeakyReLU(0.1),
            nn.AdaptiveAvgPool3d(1), nn.Flatten())
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted targets of a batch of fields."""
        return self.head(self.features(x))


class NeuronNet(nn.Module):
    """A small 1-D CNN regressing the 4 parameters of a neuron from its voltage trace."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(channels, 8, 9, stride=4, padding=4), nn.LeakyReLU(0.1),
            nn.Conv1d(8, 16, 9, stride=4, padding=4), nn.LeakyReLU(0.1),
            nn.AdaptiveAvgPool1d(8), nn.Flatten())
        self.head = nn.Linear(16 * 8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted parameters of a batch of traces."""
        return self.head(self.features(x))


def make_model(sample_ndim: int, channels: int) -> nn.Module:
    """:class:`CosmoNet` for 3-D fields (4-D samples), :class:`NeuronNet` for traces (2-D samples)."""
    return CosmoNet(channels) if sample_ndim == 4 else NeuronNet(channels)


def rank_device(device: str, rank: int) -> torch.device:
    """The device of rank ``rank`` for a ``device`` parameter: the CPU, or GPU ``rank mod n`` of the ``n`` there are."""
    dev = resolve_device(device)
    return torch.device("cuda", rank % torch.cuda.device_count()) if dev.type == "cuda" else dev


def process_group_backend(device: torch.device, world: int) -> str:
    """``nccl`` when ranks on CUDA each have a GPU of their own, else ``gloo`` (CPU tensors, or ranks sharing a GPU)."""
    return "nccl" if device.type == "cuda" and torch.cuda.device_count() >= world else "gloo"


def _train_one(strategy: Strategy, job: dict[str, Any], paths: list[Path], sizes: list[int],
               device: torch.device) -> dict[str, Any]:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(job["seed"])
    net = make_model(len(job["sample_shape"]), job["sample_shape"][0]).to(device)
    model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.Adam(model.parameters(), lr=job["lr"])
    storage = EmulatedStorage(paths, job["latency"], job["bandwidth"])
    loader = BlockLoader(storage, job["batch"], strategy.threaded, job["seed"] + rank)
    epochs = []
    for epoch in range(job["epochs"]):
        plan = epoch_plan(sizes, world, rank, job["batch"], strategy.k, job["seed"], epoch)
        stats = LoaderStats()
        dist.barrier()
        t0 = time.perf_counter()
        losses = []
        for x, y in loader.epoch(plan, epoch, stats):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(torch.from_numpy(x).to(device)), torch.from_numpy(y).to(device))
            loss.backward()
            opt.step()
            losses.append(float(loss))
        synchronize(device)
        epoch_s = time.perf_counter() - t0
        epochs.append({"epoch": epoch, "epoch_s": epoch_s, "wait_s": stats.wait_s, "ops": stats.ops,
                       "train_loss": float(np.mean(losses)), "samples": stats.samples,
                       "expected_ops": len(plan)})
        dist.barrier()
    storage.close()
    with torch.no_grad():
        xv, yv = torch.from_numpy(np.asarray(job["val_x"], dtype=np.float32)), torch.from_numpy(
            np.asarray(job["val_y"], dtype=np.float32))
        val = float(nn.functional.mse_loss(model.module(xv.to(device)), yv.to(device)))
    return {"strategy": strategy.name, "k": strategy.k, "threaded": strategy.threaded, "epochs": epochs,
            "val_loss": val}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of every rank (started by ``run_mpi``)."""
    ap = argparse.ArgumentParser(prog="repro.pario.ddp_train")
    ap.add_argument("--job", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    job = json.loads(args.job.read_text())
    with np.load(job["val_file"]) as val:
        job["val_x"], job["val_y"] = val["x"], val["y"]
    port = comm.bcast(job.get("port") or 29500 + os.getpid() % 20000, root=0)
    device = rank_device(job.get("device", "cpu"), rank)
    dist.init_process_group(process_group_backend(device, world), init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    paths = [Path(p) for p in job["shards"]]
    sizes = shard_sizes(paths)
    job["sample_shape"] = list(np.asarray(job["val_x"]).shape[1:])
    latencies = job.get("latencies", [job.get("latency")])
    rows = [{**_train_one(Strategy(**s), {**job, "latency": lat}, paths, sizes, device), "latency": lat}
            for lat in latencies for s in job["strategies"]]
    gathered = comm.gather(rows, root=0)
    dist.destroy_process_group()
    if rank == 0:
        atomic.write_json(args.out, {"world": world, "ranks": gathered})
    return 0


def launch_training(job: dict[str, Any], procs: int = 2, timeout: float = 300.0) -> dict[str, Any]:
    """Train every strategy of ``job`` on ``procs`` processes; return rank 0's report.

    ``job``: ``shards`` (paths), ``val_x``/``val_y`` (arrays; their sample shape picks the model),
    ``strategies`` (:class:`Strategy`), ``epochs``, ``batch``, ``lr``, ``seed``, ``latencies`` (s per
    read; every strategy is trained at each, in one launch; a single ``latency`` also works), ``bandwidth``
    (bytes/s), and optionally ``device`` (``cpu`` by default, ``cuda`` or ``auto``).  Every row of the
    report carries its ``latency``.
    """
    with tempfile.TemporaryDirectory(prefix="repro-ddp-") as tmp:
        val = Path(tmp, "val.npz")
        np.savez(val, x=np.asarray(job["val_x"]), y=np.asarray(job["val_y"]))
        body = {k: v for k, v in job.items() if k not in ("val_x", "val_y")}
        body["strategies"] = [s.__dict__ for s in job["strategies"]]
        body["shards"] = [str(p) for p in job["shards"]]
        body["val_file"] = str(val)
        jpath, out = Path(tmp, "job.json"), Path(tmp, "report.json")
        jpath.write_text(json.dumps(body))
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        run_mpi(["-m", "repro.pario.ddp_train", "--job", str(jpath), "--out", str(out)], procs, timeout, env=env)
        return json.loads(out.read_text())


if __name__ == "__main__":
    sys.exit(main())
