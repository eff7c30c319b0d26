"""Parallel I/O benchmarks (``bench/run.py`` imports ``run()``).

1. Our two-phase collective write against MPI's own ``Write_at_all`` on the same pattern (an
   irregular E3SM-like map, 8 MiB, 8 ranks, 2 aggregators, on this host): seconds = our median
   write time, ratio = MPI's time / ours (above 1: ours is faster), for two kernels and for TAM.
2. SimGrid wall time per paper-scale point (target: <= 60 s per point) on the zoned Dragonfly of the
   tpio-spreadout paper profile (64 ranks per node, 64 KiB per rank): the balanced spread-out exchange at
   1024 and 4096 ranks, and TAM's layer 2 at 16 nodes x 64.  The unordered exchange at 1024 ranks (16k
   flows at once, the paper profiles' costliest SimGrid point) is left out: SimGrid's flow solver took
   18 minutes for it (measured once, under load), which would dominate `make bench`.
3. The endpoint model at 16384 ranks: pattern, round tables and times of five kernels.
4. The async-io loader's double buffering: one epoch with 30 ms per read and 20 ms of compute per
   batch (two batches per block), read synchronously and on a thread; seconds = the epoch's wall
   time, ratio = the trainer's waiting time against the synchronous loader's (ideally near 0).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from repro.pario.async_io import BlockLoader, EmulatedStorage, LoaderStats, cosmo_fields, epoch_plan, shard_sizes, write_shards
from repro.pario.exchange_sim import DragonflyConstants, irregular_pattern, model_time, platform_for, simulate_kernel
from repro.pario.intranode import IntraNodeLayout
from repro.pario.kernels import EndpointModel
from repro.pario.mpi_worker import launch
from repro.pario.tam_model import simulate_layer2

TARGET_S = 60.0
PLATFORM = DragonflyConstants(bandwidth=10e9, global_bandwidth=5e9, link_latency=100e-9, switch_latency=100e-9, alpha=1.5e-6)


def _mpi_rows() -> list[tuple[str, float, str]]:
    job = {"decomp": {"kind": "irregular", "file_size": 8 << 20, "mean_run": 64, "seed": 0}, "aggregators": 2,
           "kernels": ["unordered", "balanced:2"], "repeats": 5, "tam": {"ranks_per_node": 4, "per_node": [1]}}
    rep = launch(8, job, timeout=600)
    mpi = rep["mpi"]["write_s"]
    rows = [(f"two-phase write, {w['kernel']}, 8 ranks, 8 MiB irregular", w["total_s"],
             f"{mpi / w['total_s']:.2f}x MPI Write_at_all throughput") for w in rep["writes"]]
    rows += [(f"TAM write, k={t['per_node']} per 4-rank node, 8 ranks", t["total_s"],
              f"{mpi / t['total_s']:.2f}x MPI Write_at_all throughput") for t in rep["tam"]]
    rows.append(("MPI Write_at_all (ROMIO), same pattern", mpi, "1.00x"))
    return rows


def _sim_point(name: str, p: int, kernel: str) -> tuple[str, float, str]:
    pat = irregular_pattern(p, 64, 65536, 256, 0)
    t0 = time.perf_counter()
    sim = simulate_kernel(pat, kernel, platform_for(p, 64, PLATFORM))
    wall = time.perf_counter() - t0
    return (f"SimGrid {name}, {p} ranks ({sim.messages} messages), zoned Dragonfly", wall, f"{wall / TARGET_S:.2f}x target")


def _sim_rows() -> list[tuple[str, float, str]]:
    rows = [_sim_point("balanced:32 exchange", p, "balanced:32") for p in (1024, 4096)]
    pat = irregular_pattern(1024, 64, 65536, 256, 0)
    t0 = time.perf_counter()
    simulate_layer2(pat, IntraNodeLayout(p=1024, ranks_per_node=64, per_node=1), platform_for(1024, 64, PLATFORM))
    wall = time.perf_counter() - t0
    rows.append(("SimGrid TAM layer 2, 16 nodes x 64, k=1", wall, f"{wall / TARGET_S:.2f}x target"))
    return rows


def _model_rows() -> list[tuple[str, float, str]]:
    t0 = time.perf_counter()
    pat = irregular_pattern(16384, 64, 32768, 256, 0)
    model = EndpointModel(alpha=1.5e-6, bandwidth=10e9, o0=2e-7, o1=1e-9)
    for kernel in ("unordered", "scattered:32", "balanced:8", "balanced:32", "balanced:128"):
        model_time(pat, kernel, model)
    wall = time.perf_counter() - t0
    return [("endpoint model, 16384 ranks, 5 kernels", wall, f"{wall / TARGET_S:.2f}x target")]


READ_LATENCY_S = 0.03
COMPUTE_PER_BATCH_S = 0.02


def _loader_epoch(shards: list[Path], threaded: bool) -> tuple[float, float]:
    """Wall seconds of one epoch with emulated compute, and the seconds the trainer waited for data."""
    plan = epoch_plan(shard_sizes(shards), 1, 0, 5, 2, seed=0, epoch=0)
    storage, stats = EmulatedStorage(shards, latency=READ_LATENCY_S, bandwidth=1e12), LoaderStats()
    start = time.perf_counter()
    for _ in BlockLoader(storage, 5, threaded, seed=0).epoch(plan, 0, stats):
        time.sleep(COMPUTE_PER_BATCH_S)
    storage.close()
    return time.perf_counter() - start, stats.wait_s


def _overlap_rows() -> list[tuple[str, float, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        x, y = cosmo_fields(50, 4, 2, seed=0)
        shards = write_shards(tmp, x, y, 3)
        sync_wall, sync_wait = _loader_epoch(shards, threaded=False)
        thread_wall, thread_wait = _loader_epoch(shards, threaded=True)
    return [("async-io loader, synchronous reads, one epoch", sync_wall, f"waits {sync_wait:.2f} s (1.00x)"),
            ("async-io loader, reads on a thread, one epoch", thread_wall,
             f"waits {thread_wait:.2f} s ({thread_wait / sync_wait:.2f}x the synchronous wait)")]


def run() -> list[tuple[str, float, str]]:
    """Every parallel I/O benchmark row: (name, seconds, ratio)."""
    return _mpi_rows() + _sim_rows() + _model_rows() + _overlap_rows()
