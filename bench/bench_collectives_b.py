"""Collectives part B benchmarks (`make bench` imports ``run()``).

1. SimGrid wall time of one point at the papers' scale (target: <= 60 s per point): the Kautz
   multi-port allreduce on K(16,2) = 272 FPGAs and Rabenseifner on the 272-host Dragonfly, 1 MiB.
2. FEC decoders in python: one RS(544,514) codeword against the 20 Hamming SECDED blocks of the
   same frame (ratio = RS time / Hamming time; it says nothing about hardware latency).
3. Sparse allreduce dry run, 32 in-process ranks, 2^18 elements: sparse ring_ring at density 1/128
   against dense ring_ring (ratio = sparse / dense wall time, includes the merges' cost).
"""

from __future__ import annotations


import numpy as np
from timing import timed

TARGET_S = 60.0


def _timed(fn, repeat: int = 1) -> float:
    return timed(fn, repeat)  # one run by default: a paper-scale simulation point is slow


def _sim_rows() -> list[tuple[str, float, str]]:
    from repro.collectives.algorithms import build_schedule
    from repro.collectives.executors.simgrid import simulate
    from repro.collectives.kautz_experiments import NetworkSetup
    from repro.collectives.kautz_mp import kautz_allreduce

    setup = NetworkSetup(d=16, df_groups=17, df_routers=4, df_hosts_per_router=4)
    n = (1 << 20) // 4
    rows = []
    for name, sched, pf in [("Kautz K(16,2) multi-port allreduce, 1 MiB", kautz_allreduce(16, n),
                             setup.kautz_platform()),
                            ("Dragonfly 17x4x4 Rabenseifner, 1 MiB", build_schedule("rabenseifner", 272, n),
                             setup.dragonfly_platform())]:
        t = _timed(lambda: simulate(sched, pf, 4))
        rows.append((f"SimGrid point: {name}", t, f"{t / TARGET_S:.2f} of the {TARGET_S:g} s target"))
    return rows


def _fec_rows() -> list[tuple[str, float, str]]:
    from repro.collectives import fec

    rng = np.random.default_rng(0)
    rs = fec.ReedSolomon()
    cw = rs.encode(rng.integers(0, 1024, fec.RS_K))
    cw[rng.choice(fec.RS_N, 8, replace=False)] ^= 1
    ham = fec.Hamming(fec.BLOCK_BITS, True)
    blocks = ham.encode(rng.integers(0, 2, (fec.BLOCKS_PER_FRAME, fec.BLOCK_BITS)))
    blocks[:, 5] ^= 1
    t_rs = _timed(lambda: rs.decode(cw), 5)
    t_h = _timed(lambda: ham.decode(blocks), 5)
    return [("decode one RS(544,514) codeword, 8 symbol errors (python)", t_rs, f"RS / Hamming = {t_rs / t_h:.0f}x"),
            ("decode 20 Hamming SECDED blocks, 1 error each (numpy)", t_h, "")]


def _sparse_rows() -> list[tuple[str, float, str]]:
    from repro.collectives import sparse

    t_s = _timed(lambda: sparse.dry_run("sparse_ring_ring", 32, 1 << 18, 1 / 128, 0, k=4))
    t_d = _timed(lambda: sparse.dry_run("dense_ring_ring", 32, 1 << 18, 1 / 128, 0, k=4))
    return [("sparse ring_ring dry run, 32 ranks, 2^18, density 1/128", t_s, f"sparse / dense = {t_s / t_d:.2f}"),
            ("dense ring_ring dry run, 32 ranks, 2^18", t_d, "")]


def run() -> list[tuple[str, float, str]]:
    """All rows: (name, seconds, ratio text)."""
    return _sim_rows() + _fec_rows() + _sparse_rows()


if __name__ == "__main__":
    for row in run():
        print(f"{row[0]:<70} {row[1]:8.3f} s  {row[2]}")
