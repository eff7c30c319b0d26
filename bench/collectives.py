"""Collectives benchmarks (``bench/run.py`` imports ``run()``).

1. SimGrid wall time per point at the papers' scale (target: <= 60 s per point): a multi-leader
   allreduce on 32 nodes x 4 GPUs, the striped all-to-all and the direct one on a 16x16 2dfc,
   halving-doubling on a 256-host distributed loop network, the Kautz multi-port allreduce on
   K(16,2) = 272 FPGAs and Rabenseifner on the 272-host Dragonfly.
2. Throughput of our mpi4py schedules against MPI's built-in collectives at 8 ranks (the worker's
   bench mode; ratio = MPI's time / our time, so above 1 means ours is faster).  The seconds column
   is our median time per collective.
3. FEC decoders in python: one RS(544,514) codeword against the 20 Hamming SECDED blocks of the
   same frame (ratio = RS time / Hamming time; it says nothing about hardware latency).
4. Sparse allreduce dry run, 32 in-process ranks, 2^18 elements: sparse ring_ring at density 1/128
   against dense ring_ring (ratio = sparse / dense wall time, includes the merges' cost).
"""

from __future__ import annotations

import time

import numpy as np
from timing import timed

from repro.collectives import fec, sparse
from repro.collectives.algorithms import build_schedule
from repro.collectives.chapters.dln_allreduce import platform as dln_platform
from repro.collectives.chapters.kautz_fpga import NetworkSetup
from repro.collectives.kautz_mp import kautz_allreduce
from repro.collectives.mpi_worker import launch_worker
from repro.collectives.sweep import build_platform, platform_key
from repro.hpc.simgrid import simulate

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
    points = [(label, build_schedule(algo, p, n, **params), build_platform(key))
              for label, key, algo, p, n, params in cases]
    setup = NetworkSetup(d=16, df_groups=17, df_routers=4, df_hosts_per_router=4)
    n = (1 << 20) // 4
    points += [("Kautz K(16,2) multi-port allreduce, 1 MiB", kautz_allreduce(16, n), setup.kautz_platform()),
               ("Dragonfly 17x4x4 Rabenseifner, 1 MiB", build_schedule("rabenseifner", 272, n),
                setup.dragonfly_platform())]
    rows = []
    for label, sched, pf in points:
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
    for algos, nbytes in ((specs, 16 * 2**20), (a2a, 256 * 1024)):
        report = launch_worker("bench", 8, ["--algos", algos, "--nbytes", str(nbytes), "--dtypes", "float32",
                                            "--repeats", "5"], timeout=600)
        for case in report["cases"]:
            what = "Allreduce" if case["kind"] == "allreduce" else "Alltoall"
            rows.append((f"mpi4py 8 ranks {case['algorithm']}{case['params'] or ''} vs MPI_{what}, "
                         f"{nbytes // 1024} KiB", case["ours_s"],
                         f"throughput ours/MPI = {case['mpi_s'] / case['ours_s']:.2f} "
                         f"(MPI {case['mpi_s'] * 1e3:.1f} ms; 8 ranks on this machine's cores)"))
    return rows


def _fec_rows() -> list[tuple[str, float, str]]:
    rng = np.random.default_rng(0)
    rs = fec.ReedSolomon()
    cw = rs.encode(rng.integers(0, 1024, fec.RS_K))
    cw[rng.choice(fec.RS_N, 8, replace=False)] ^= 1
    ham = fec.Hamming(fec.BLOCK_BITS, True)
    blocks = ham.encode(rng.integers(0, 2, (fec.BLOCKS_PER_FRAME, fec.BLOCK_BITS)))
    blocks[:, 5] ^= 1
    t_rs = timed(lambda: rs.decode(cw), 5)
    t_h = timed(lambda: ham.decode(blocks), 5)
    return [("decode one RS(544,514) codeword, 8 symbol errors (python)", t_rs, f"RS / Hamming = {t_rs / t_h:.0f}x"),
            ("decode 20 Hamming SECDED blocks, 1 error each (numpy)", t_h, "")]


def _sparse_rows() -> list[tuple[str, float, str]]:
    t_s = timed(lambda: sparse.dry_run("sparse_ring_ring", 32, 1 << 18, 1 / 128, 0, k=4), 1)
    t_d = timed(lambda: sparse.dry_run("dense_ring_ring", 32, 1 << 18, 1 / 128, 0, k=4), 1)
    return [("sparse ring_ring dry run, 32 ranks, 2^18, density 1/128", t_s, f"sparse / dense = {t_s / t_d:.2f}"),
            ("dense ring_ring dry run, 32 ranks, 2^18", t_d, "")]


def run() -> list[tuple[str, float, str]]:
    """Rows of (name, seconds, ratio text)."""
    return _sim_rows() + _mpi_rows() + _fec_rows() + _sparse_rows()


if __name__ == "__main__":
    for row in run():
        print(f"{row[0]:<70} {row[1]:8.3f} s  {row[2]}")
