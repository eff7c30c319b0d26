"""Per-rank worker: ``mpiexec -n P python -m mpi4py -m repro.collectives.mpi_worker ...``.

Modes
-----
``check``
    For every algorithm x length x dtype: build a deterministic (seeded) input
    per rank, run our schedule with
    :func:`~repro.hpc.mpi.execute_mpi` and MPI's own
    ``Allreduce``/``Alltoall``, and compare (exactly for integers and for every
    all-to-all; for floating-point allreduce within the summation-order bound
    ``2 p eps sum_i |x_i|``).  Also checks that all ranks hold bit-identical
    allreduce results.  A spec whose node size or grid does not divide ``P``
    is recorded as skipped (:func:`~repro.collectives.algorithms.inapplicable`);
    any other bad argument fails the launch.
``bench``
    Times ours against MPI's built-in collective at one size (median over
    repeats of the slowest rank's time).
``kautz``
    The ``K(d, 2)`` multi-port schedules of :mod:`repro.collectives.kautz_mp`
    (``P = d(d+1)``; ``--cases`` from ``allreduce``, ``allgather``,
    ``reduce_scatter``) compared exactly (int64) with MPI's ``Allreduce``,
    ``Allgather`` and ``Reduce_scatter``.
``sparse``
    Mixed dense/sparse allreduces of :mod:`repro.collectives.sparse`
    (``--cases`` like ``sparse_ring_ring:k=4:density=0.015625``) on random
    sparse int64 vectors, compared exactly with MPI's dense ``Allreduce``; the
    bytes each rank sent are reported.

Rank 0 writes a JSON report atomically to ``--out``: ``ok`` is true only when
at least one case ran and every case that ran matched; ``n_cases`` counts the
cases that ran, ``n_skipped`` those that did not apply.  ``--sleep`` makes every
rank sleep first (to test launcher timeouts).  Run it through
:func:`launch_worker` (or :func:`~repro.hpc.launcher.run_mpi`),
which starts every rank under ``python -m mpi4py`` so that a rank that raises
aborts the whole job.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from repro import atomic
from repro.collectives import kautz_mp, sparse
from repro.collectives.algorithms import (
    ALGORITHMS,
    build_schedule,
    get_algorithm,
    inapplicable,
    parse_spec,
    resolve_params,
)
from repro.hpc.launcher import run_mpi
from repro.hpc.mpi import execute_mpi

MODES = ("check", "bench", "kautz", "sparse")
KAUTZ_CASES = ("allreduce", "allgather", "reduce_scatter")
MODULE = "repro.collectives.mpi_worker"


def make_input(kind: str, p: int, n: int, dtype: str, seed: int, rank: int, case: int) -> np.ndarray:
    """Deterministic input of one rank for one case.

    Integers are uniform in ``[-1000, 1000)``, floats standard normal; the
    length is ``n`` for an allreduce and ``p*n`` for an all-to-all.
    """
    rng = np.random.default_rng([seed, rank, case])
    length = n if kind == "allreduce" else p * n
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(-1000, 1000, size=length).astype(dt)
    return rng.standard_normal(length).astype(dt)


def expand_algos(text: str) -> list[str]:
    """Split ';'-separated specs; ``all``, ``allreduce`` and ``alltoall`` expand to the registry's names."""
    out: list[str] = []
    for item in filter(None, (x.strip() for x in text.split(";"))):
        if item in ("all", "allreduce", "alltoall"):
            out += [n for n, a in ALGORITHMS.items() if item == "all" or a.kind == item]
        else:
            out.append(item)
    return out


def mpi_collective(comm: Any, kind: str, x: np.ndarray) -> np.ndarray:
    """MPI's own ``Allreduce`` (sum) or ``Alltoall`` of ``x`` on ``comm``."""
    from mpi4py import MPI

    ref = np.empty_like(x)
    if kind == "allreduce":
        comm.Allreduce(x, ref, op=MPI.SUM)
    else:
        comm.Alltoall(x, ref)
    return ref


def check_case(comm: Any, spec: str, n: int, dtype: str, seed: int, case: int) -> dict[str, Any]:
    """Run one correctness case on every rank; return rank 0's summary (others: partial).

    Raises
    ------
    ValueError, KeyError
        For a bad spec (unknown algorithm or parameter, invalid value); only a
        node size or grid that does not divide the rank count makes a skipped row.
    """
    from mpi4py import MPI

    p, rank = comm.Get_size(), comm.Get_rank()
    name, params = parse_spec(spec)
    algo = get_algorithm(name)
    params = resolve_params(name, p, params)
    row: dict[str, Any] = {"algorithm": name, "spec": spec, "kind": algo.kind, "n": n, "dtype": dtype, "p": p,
                           "params": params}
    reason = inapplicable(name, p, params)
    if reason is not None:  # same on every rank: the case does not apply to this p
        row.update(skipped=reason, ok=None)
        return row
    sched = build_schedule(name, p, n, **params)
    x = make_input(algo.kind, p, n, dtype, seed, rank, case)
    ours = execute_mpi(sched, comm, x)
    ref = mpi_collective(comm, algo.kind, x)
    err = float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64)), initial=0.0))
    dt = np.dtype(dtype)
    if algo.kind == "allreduce" and dt.kind == "f":
        abs_sum = np.empty_like(x)
        comm.Allreduce(np.abs(x), abs_sum, op=MPI.SUM)
        bound = 2 * p * np.finfo(dt).eps * abs_sum.astype(np.float64)
        ok = bool(np.all(np.abs(ours.astype(np.float64) - ref.astype(np.float64)) <= bound))
        tol = float(np.max(bound, initial=0.0))
    else:
        ok = bool(np.array_equal(ours, ref))
        tol = 0.0
    digests = comm.gather(hashlib.sha1(ours.tobytes()).hexdigest(), root=0)
    errs = comm.gather(err, root=0)
    row.update(ok=ok, max_abs_err=err, tol=tol, steps=sched.num_steps)
    gather_ok(comm, row)
    if rank == 0:
        row.update(max_abs_err=max(errs),
                   ranks_identical=(len(set(digests)) == 1) if algo.kind == "allreduce" else None)
    return row


def bench_case(comm: Any, spec: str, nbytes: int, dtype: str, repeats: int, seed: int) -> dict[str, Any]:
    """Median time (slowest rank) of ours and of MPI's built-in at ``nbytes``.

    ``nbytes`` is the allreduce vector size, or the per-pair block size of an
    all-to-all.
    """
    from mpi4py import MPI

    p, rank = comm.Get_size(), comm.Get_rank()
    name, params = parse_spec(spec)
    algo = get_algorithm(name)
    params = resolve_params(name, p, params)
    n = max(nbytes // np.dtype(dtype).itemsize, 0)
    sched = build_schedule(name, p, n, **params)
    x = make_input(algo.kind, p, n, dtype, seed, rank, 0)

    def timed(fn: Callable[[], Any]) -> float:
        times = []
        fn()  # warm-up
        for _ in range(repeats):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        return float(np.median(times))

    ours = timed(lambda: execute_mpi(sched, comm, x))
    mpi = timed(lambda: mpi_collective(comm, algo.kind, x))
    return {"algorithm": name, "params": params, "kind": algo.kind, "p": p, "nbytes": nbytes,
            "dtype": dtype, "ours_s": ours, "mpi_s": mpi, "ratio": ours / mpi if mpi > 0 else None}


def _int_input(rng: np.random.Generator, size: int) -> np.ndarray:
    return rng.integers(-1000, 1000, size=size).astype(np.int64)


def kautz_case(comm: Any, name: str, n: int, seed: int) -> dict[str, Any]:
    """Run one ``K(d, 2)`` schedule (``name`` in :data:`KAUTZ_CASES`) and MPI's built-in counterpart.

    Raises
    ------
    ValueError
        If ``name`` is unknown or the rank count is not ``d(d+1)``.
    """
    from mpi4py import MPI

    if name not in KAUTZ_CASES:
        raise ValueError(f"unknown Kautz case {name!r}; known: {KAUTZ_CASES}")
    p, rank = comm.Get_size(), comm.Get_rank()
    d = kautz_mp.degree_for(p)
    rng = np.random.default_rng([seed, rank, n])
    x = _int_input(rng, n)
    if name == "allreduce":
        sched = kautz_mp.kautz_allreduce(d, n)
        ref = np.empty_like(x)
        comm.Allreduce(x, ref, op=MPI.SUM)
    elif name == "allgather":
        sched = kautz_mp.kautz_allgather(d, n)
        ref = np.empty(p * n, dtype=x.dtype)
        comm.Allgather(x, ref)
    else:
        sched = kautz_mp.kautz_reduce_scatter(d, n)
        counts = list(sched.block_lengths)
        ref = np.empty(counts[rank], dtype=x.dtype)
        comm.Reduce_scatter(x, ref, recvcounts=counts, op=MPI.SUM)
    ours = execute_mpi(sched, comm, x)
    if name == "reduce_scatter":
        off = int(sched.offsets[rank])
        ours = ours[off:off + counts[rank]]
    row = {"case": f"kautz_{name}", "p": p, "d": d, "n": n, "ok": bool(np.array_equal(ours, ref)),
           "steps": len(sched.comm_steps())}
    return gather_ok(comm, row)


def parse_sparse_case(spec: str) -> tuple[str, int, float]:
    """``"<algorithm>:k=<k>:density=<q>"`` -> ``(algorithm, k, density)`` (``k`` default 1, density 0.01).

    Raises
    ------
    ValueError
        For an unknown algorithm or option.
    """
    algo, *opts = spec.split(":")
    if algo not in sparse.ALGORITHMS:
        raise ValueError(f"unknown sparse algorithm {algo!r}; known: {sparse.ALGORITHMS}")
    kw = dict(o.split("=", 1) for o in opts)
    unknown = set(kw) - {"k", "density"}
    if unknown:
        raise ValueError(f"sparse case {spec!r}: unknown options {sorted(unknown)}")
    return algo, int(kw.get("k", 1)), float(kw.get("density", 0.01))


def sparse_case(comm: Any, spec: str, n: int, seed: int) -> dict[str, Any]:
    """Run one sparse allreduce variant against MPI's dense ``Allreduce``."""
    from mpi4py import MPI

    algo, k, density = parse_sparse_case(spec)
    p, rank = comm.Get_size(), comm.Get_rank()
    x = sparse.random_sparse_vector(n, density, seed=seed, rank=rank)
    dense = x.to_dense()
    ref = np.empty_like(dense)
    comm.Allreduce(dense, ref, op=MPI.SUM)
    comm_log = sparse.MPIComm(comm)
    out = sparse.allreduce(algo, comm_log, x, k=k)
    row = {"case": spec, "algorithm": algo, "k": k, "density": density, "p": p, "n": n,
           "ok": bool(np.array_equal(out.to_dense(), ref)), "bytes_sent": comm_log.bytes_sent,
           "messages": comm_log.messages, "result_dense": out.is_dense}
    sent = comm.gather(comm_log.bytes_sent, root=0)
    if rank == 0:
        row["bytes_sent_per_rank"] = sent
    return gather_ok(comm, row)


def gather_ok(comm: Any, row: dict[str, Any]) -> dict[str, Any]:
    """Replace ``row["ok"]`` on rank 0 by the verdict of every rank and list the ranks that failed."""
    oks = comm.gather(row["ok"], root=0)
    if comm.Get_rank() == 0:
        row.update(ok=all(oks), failed_ranks=[r for r, o in enumerate(oks) if not o])
    return row


def run_cases(comm: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every case of ``args.mode``, in order (rank 0's rows are complete, other ranks' partial)."""
    lengths = [int(v) for v in args.lengths.split(",") if v]
    rows: list[dict[str, Any]] = []
    if args.mode == "check":
        dtypes = [d for d in args.dtypes.split(",") if d]
        a2a_lengths = [int(v) for v in (args.a2a_lengths or args.lengths).split(",") if v]
        case = 0
        for spec in expand_algos(args.algos):
            kind = get_algorithm(parse_spec(spec)[0]).kind
            for n in lengths if kind == "allreduce" else a2a_lengths:
                for dtype in dtypes:
                    rows.append(check_case(comm, spec, n, dtype, args.seed, case))
                    case += 1
    elif args.mode == "bench":
        dtype = args.dtypes.split(",")[0]
        rows = [bench_case(comm, spec, args.nbytes, dtype, args.repeats, args.seed)
                for spec in expand_algos(args.algos)]
    else:
        run = kautz_case if args.mode == "kautz" else sparse_case
        for case in filter(None, (c.strip() for c in args.cases.split(";"))):
            rows += [run(comm, case, n, args.seed) for n in lengths]
    return rows


def summarise(mode: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and verdict of a report: ``ok`` needs at least one case run and every run case matching."""
    ran = rows if mode == "bench" else [r for r in rows if r.get("ok") is not None]
    ok = bool(ran) and (mode == "bench" or all(r["ok"] for r in ran))
    return {"ok": ok, "n_cases": len(ran), "n_skipped": len(rows) - len(ran)}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of the worker."""
    ap = argparse.ArgumentParser(prog=f"python -m mpi4py -m {MODULE}", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=MODES, default="check")
    ap.add_argument("--algos", default="all",
                    help="check/bench: ';'-separated specs, e.g. 'ring;lr_lr:k=2;2dfc:rows=2' or "
                         "'all'/'allreduce'/'alltoall'")
    ap.add_argument("--cases", default="", help="kautz/sparse: ';'-separated cases (see the module docstring)")
    ap.add_argument("--lengths", default="0,1,7,1003",
                    help="comma-separated vector lengths (allreduce, Kautz, sparse) / block lengths (all-to-all)")
    ap.add_argument("--a2a-lengths", default=None, help="check: block lengths for all-to-all (default: --lengths)")
    ap.add_argument("--dtypes", default="int64,float64")
    ap.add_argument("--nbytes", type=int, default=1 << 20, help="bench: bytes (vector, or per-pair block)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sleep", type=float, default=0.0, help="sleep this long first (timeout tests)")
    ap.add_argument("--out", type=Path, required=True, help="JSON report written by rank 0")
    args = ap.parse_args(argv)
    if args.mode in ("kautz", "sparse") and not args.cases.strip():
        ap.error(f"--mode {args.mode} needs --cases")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point run by every rank.

    An exception in any rank propagates; under ``python -m mpi4py`` it aborts
    every rank and the launch fails with its traceback.  The report's ``ok``
    field is the verdict of the comparisons.
    """
    args = parse_args(argv)
    if args.sleep > 0:
        time.sleep(args.sleep)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    t0 = time.perf_counter()
    rows = run_cases(comm, args)
    if comm.Get_rank() == 0:
        report = {"mode": args.mode, "p": comm.Get_size(),
                  "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
                  **summarise(args.mode, rows), "cases": rows, "elapsed_s": time.perf_counter() - t0}
        atomic.write_json(args.out, report)
    return 0


def launch_worker(mode: str, nprocs: int, options: Sequence[str], timeout: float = 120.0) -> dict[str, Any]:
    """Run this worker under ``mpiexec -n nprocs`` and return rank 0's report.

    Parameters
    ----------
    mode:
        One of :data:`MODES`.
    nprocs:
        Ranks.
    options:
        Further command-line options of the worker (everything but ``--mode`` and ``--out``).
    timeout:
        Wall-clock limit of the launch in seconds.

    Returns
    -------
    dict
        The JSON report (``ok``, ``n_cases``, ``n_skipped``, ``cases``, ...).

    Raises
    ------
    repro.hpc.launcher.MPIRunError
        On a crash of any rank (with its traceback) or a timeout.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    with tempfile.TemporaryDirectory(prefix="repro-mpi-worker-") as tmp:
        out = Path(tmp) / "report.json"
        run_mpi(["-m", MODULE, "--mode", mode, *map(str, options), "--out", str(out)], nprocs, timeout=timeout)
        return json.loads(out.read_text())


if __name__ == "__main__":
    sys.exit(main())
