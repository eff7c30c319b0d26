"""Collectives benchmarks (`make bench` imports ``run()``).

1. SimGrid wall time per point at the papers' scale (target: <= 60 s per point): a multi-leader
   allreduce on 32 nodes x 4 GPUs, the striped all-to-all and the direct one on a 16x16 2dfc, and
   halving-doubling on a 256-host distributed loop network.
2. Throughput of our mpi4py schedules against MPI's built-in collectives at 8 ranks (the worker's
   bench mode; ratio = MPI's time / our time, so above 1 means ours is faster).  The seconds column
   is our median time per collective.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from repro.collectives.algorithms import build_schedule
from repro.collectives.executors.launcher import run_mpi
from repro.collectives.executors.simgrid import simulate
from repro.collectives.experiments import build_platform, dln_platform, platform_key

TARGET_S = 60.0


def _sim_rows() -> list[tuple[str, float, str]]:
    cases = [
        ("multileader lr_lr, 32x4 GPUs, 256 MiB", platform_key("gpu_cluster", nodes=32, gpus_per_node=4),
         "lr_lr", 128, 64 * 2**20, {"k": 4}),
        ("multileader ring (lr), 32x4 GPUs, 256 MiB", platform_key("gpu_cluster", nodes=32, gpus_per_node=4),
         "ring", 128, 64 * 2**20, {}),
        ("2dfc striped all-to-all, 16x16, 256 KiB/pair",
         platform_key("two_dim_fc", rows=16, cols=16, bandwidth=25e9, latency=1e-6), "2dfc", 256, 65536,
         {"rows": 16}),
        ("direct all-to-all, 16x16, 256 KiB/pair",
         platform_key("two_dim_fc", rows=16, cols=16, bandwidth=25e9, latency=1e-6), "linear", 256, 65536, {}),
        ("halving-doubling on DLN, 256 hosts, 512 MiB",
         dln_platform("dln_mitigated", 256, 4, 12.5e9, 5e-7, 1e-7), "rabenseifner", 256, 128 * 2**20, {}),
    ]
    rows = []
    for label, key, algo, p, n, params in cases:
        pf = build_platform(key)
        sched = build_schedule(algo, p, n, **params)
        t0 = time.perf_counter()
        res = simulate(sched, pf, 4)
        wall = time.perf_counter() - t0
        rows.append((f"SimGrid point: {label}", wall,
                     f"{wall / TARGET_S:.2f} of the {TARGET_S:g} s target (engine {res.wall_s:.1f} s)"))
    return rows


def _mpi_rows() -> list[tuple[str, float, str]]:
    specs = "ring;lr_lr:k=4;lr_rab:k=4;lr_lr_pipe:k=4,segments=2;rabenseifner"
    a2a = "2dfc:rows=2;two_phase:rows=2;linear;pairwise;bruck"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for algos, nbytes in ((specs, 16 * 2**20), (a2a, 256 * 1024)):
            out = Path(tmp, "bench.json")
            run_mpi(["-m", "repro.collectives.executors.mpi_worker", "--mode", "bench", "--algos", algos, "--nbytes",
                     str(nbytes), "--dtypes", "float32", "--repeats", "5", "--out", str(out)], 8, timeout=600)
            for case in json.loads(out.read_text())["cases"]:
                what = "Allreduce" if case["kind"] == "allreduce" else "Alltoall"
                rows.append((f"mpi4py 8 ranks {case['algorithm']}{case['params'] or ''} vs MPI_{what}, "
                             f"{nbytes // 1024} KiB", case["ours_s"],
                             f"throughput ours/MPI = {case['mpi_s'] / case['ours_s']:.2f} "
                             f"(MPI {case['mpi_s'] * 1e3:.1f} ms; 8 ranks on this machine's cores)"))
    return rows


def run() -> list[tuple[str, float, str]]:
    """Rows of (name, seconds, ratio text)."""
    return _sim_rows() + _mpi_rows()


if __name__ == "__main__":
    for name, sec, ratio in run():
        print(f"{name:80s} {sec:9.3f} s  {ratio}")
