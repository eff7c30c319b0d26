"""Per-rank exactness worker for the part-B schedules: ``mpiexec -n P python -m repro.collectives.worker_b``.

Cases (``--cases``, ';'-separated):

``kautz_allreduce``, ``kautz_allgather``, ``kautz_reduce_scatter``
    The ``K(d, 2)`` multi-port schedules of :mod:`repro.collectives.kautz_mp`
    (``P = d(d+1)``) run with :func:`~repro.collectives.mpi_exec.execute_mpi`
    and compared, exactly (int64), with MPI's own ``Allreduce``,
    ``Allgather`` and ``Reduce_scatter``.
``sparse:<algorithm>:k=<k>:density=<q>``
    A mixed dense/sparse allreduce of :mod:`repro.collectives.sparse`
    (ring, ring_ring, recursive doubling, split allgather, dense ring) on
    random sparse int64 vectors, compared exactly with MPI's dense ``Allreduce``;
    the byte count each rank sent is reported.

Rank 0 writes a JSON report (``ok``, one row per case) to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

import numpy as np


def _ints(rng: np.random.Generator, size: int) -> np.ndarray:
    return rng.integers(-1000, 1000, size=size).astype(np.int64)


def kautz_case(comm: Any, name: str, n: int, seed: int) -> dict[str, Any]:
    """Run one Kautz schedule and MPI's built-in counterpart; return this rank's comparison."""
    from mpi4py import MPI

    from repro.collectives import kautz_mp
    from repro.collectives.mpi_exec import execute_mpi

    p, rank = comm.Get_size(), comm.Get_rank()
    d = kautz_mp.degree_for(p)
    rng = np.random.default_rng([seed, rank, n])
    if name == "kautz_allreduce":
        sched = kautz_mp.kautz_allreduce(d, n)
        x = _ints(rng, n)
        ref = np.empty_like(x)
        comm.Allreduce(x, ref, op=MPI.SUM)
    elif name == "kautz_allgather":
        sched = kautz_mp.kautz_allgather(d, n)
        x = _ints(rng, n)
        ref = np.empty(p * n, dtype=x.dtype)
        comm.Allgather(x, ref)
    elif name == "kautz_reduce_scatter":
        sched = kautz_mp.kautz_reduce_scatter(d, n)
        x = _ints(rng, n)
        counts = list(sched.block_lengths)
        ref = np.empty(counts[rank], dtype=x.dtype)
        comm.Reduce_scatter(x, ref, recvcounts=counts, op=MPI.SUM)
    else:
        raise ValueError(f"unknown case {name!r}")
    ours = execute_mpi(sched, comm, x)
    if name == "kautz_reduce_scatter":
        off = int(sched.offsets[rank])
        ours = ours[off:off + counts[rank]]
    return {"case": name, "p": p, "d": d, "n": n, "ok": bool(np.array_equal(ours, ref)),
            "steps": len(sched.comm_steps())}


def sparse_case(comm: Any, spec: str, n: int, seed: int) -> dict[str, Any]:
    """Run one sparse allreduce variant against MPI's dense ``Allreduce``."""
    from mpi4py import MPI

    from repro.collectives import sparse

    _, algo, *opts = spec.split(":")
    kw = {k: v for k, v in (o.split("=") for o in opts)}
    k = int(kw.get("k", 1))
    density = float(kw.get("density", 0.01))
    p, rank = comm.Get_size(), comm.Get_rank()
    x = sparse.random_sparse_vector(n, density, seed=seed, rank=rank)
    dense = x.to_dense()
    ref = np.empty_like(dense)
    comm.Allreduce(dense, ref, op=MPI.SUM)
    comm_log = sparse.MPIComm(comm)
    out = sparse.allreduce(algo, comm_log, x, k=k)
    ok = bool(np.array_equal(out.to_dense(), ref))
    return {"case": spec, "p": p, "n": n, "ok": ok, "bytes_sent": comm_log.bytes_sent,
            "messages": comm_log.messages, "result_dense": out.is_dense}


def launch(cases: Sequence[str], nprocs: int, lengths: Sequence[int] = (0, 1, 7, 1003), seed: int = 0,
           timeout: float = 120.0) -> dict[str, Any]:
    """Run this worker under ``mpiexec -n nprocs`` (via :func:`run_mpi`) and return rank 0's report.

    Raises :class:`~repro.collectives.launcher.MPIRunError` on a crash or timeout.
    """
    import json
    import tempfile

    from repro.collectives.launcher import run_mpi

    if not cases:
        raise ValueError("cases must not be empty")
    with tempfile.TemporaryDirectory(prefix="repro-worker-b-") as tmp:
        out = Path(tmp) / "report.json"
        run_mpi(["-m", "repro.collectives.worker_b", "--cases", ";".join(cases), "--lengths",
                 ",".join(str(int(n)) for n in lengths), "--seed", str(seed), "--out", str(out)],
                nprocs, timeout=timeout)
        return json.loads(out.read_text())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of the worker."""
    ap = argparse.ArgumentParser(prog="python -m repro.collectives.worker_b", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="';'-separated case names (see the module docstring)")
    ap.add_argument("--lengths", default="0,1,7,1003", help="comma-separated vector / block lengths")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="JSON report written by rank 0")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point run by every rank; aborts all ranks if one crashes."""
    args = parse_args(argv)
    from mpi4py import MPI

    from repro import atomic

    comm = MPI.COMM_WORLD
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        lengths = [int(v) for v in args.lengths.split(",") if v]
        for case in filter(None, (c.strip() for c in args.cases.split(";"))):
            for n in lengths:
                run = sparse_case if case.startswith("sparse:") else kautz_case
                row = run(comm, case, n, args.seed)
                oks = comm.gather(row["ok"], root=0)
                sent = comm.gather(row.get("bytes_sent"), root=0)
                if comm.Get_rank() == 0:
                    row.update(ok=all(oks), failed_ranks=[r for r, o in enumerate(oks) if not o])
                    if row.get("bytes_sent") is not None:
                        row["bytes_sent_per_rank"] = sent
                    rows.append(row)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(2)
    if comm.Get_rank() == 0:
        atomic.write_json(args.out, {"p": comm.Get_size(), "ok": all(r["ok"] for r in rows), "cases": rows,
                                     "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
                                     "elapsed_s": time.perf_counter() - t0})
    return 0


if __name__ == "__main__":
    sys.exit(main())
