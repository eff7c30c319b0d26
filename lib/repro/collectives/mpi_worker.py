"""Per-rank worker: ``mpiexec -n P python -m repro.collectives.mpi_worker ...``.

Modes
-----
``check``
    For every algorithm x length x dtype: build a deterministic (seeded) input
    per rank, run our schedule with :func:`~repro.collectives.mpi_exec.execute_mpi`
    and MPI's own ``Allreduce``/``Alltoall``, and compare (exactly for integers
    and for every all-to-all; for floating-point allreduce within the
    summation-order bound ``2 p eps sum_i |x_i|``).  Also checks that all ranks
    hold bit-identical allreduce results.
``bench``
    Times ours against MPI's built-in collective at one size (median over
    repeats of the slowest rank's time).

Rank 0 writes a JSON report atomically (temporary file + ``os.replace``) to
``--out``.  ``--sleep`` makes every rank sleep first (to test launcher timeouts).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from repro.collectives.algorithms import ALGORITHMS, build_schedule, get_algorithm, parse_spec, resolve_params
from repro.collectives.mpi_exec import execute_mpi


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


def _expand_algos(text: str) -> list[str]:
    """Comma/semicolon-separated specs; ``all``, ``allreduce`` and ``alltoall`` expand."""
    out: list[str] = []
    for item in filter(None, (x.strip() for x in text.split(";"))):
        if item in ("all", "allreduce", "alltoall"):
            out += [n for n, a in ALGORITHMS.items() if item == "all" or a.kind == item]
        else:
            out.append(item)
    return out


def _mpi_reference(comm: Any, kind: str, x: np.ndarray) -> np.ndarray:
    from mpi4py import MPI

    ref = np.empty_like(x)
    if kind == "allreduce":
        comm.Allreduce(x, ref, op=MPI.SUM)
    else:
        comm.Alltoall(x, ref)
    return ref


def check_case(comm: Any, spec: str, n: int, dtype: str, seed: int, case: int) -> dict[str, Any]:
    """Run one correctness case on every rank; return rank 0's summary (others: partial)."""
    from mpi4py import MPI

    p, rank = comm.Get_size(), comm.Get_rank()
    name, params = parse_spec(spec)
    algo = get_algorithm(name)
    row: dict[str, Any] = {"algorithm": name, "spec": spec, "kind": algo.kind, "n": n, "dtype": dtype, "p": p}
    try:
        params = resolve_params(name, p, params)
        sched = build_schedule(name, p, n, **params)
    except ValueError as exc:  # same on every rank: the case does not apply to this p
        row.update(params=params, skipped=str(exc), ok=None)
        return row
    row["params"] = params
    x = make_input(algo.kind, p, n, dtype, seed, rank, case)
    ours = execute_mpi(sched, comm, x)
    ref = _mpi_reference(comm, algo.kind, x)
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
    oks = comm.gather(ok, root=0)
    errs = comm.gather(err, root=0)
    if rank == 0:
        row.update(
            ok=all(oks),
            failed_ranks=[r for r, o in enumerate(oks) if not o],
            max_abs_err=max(errs),
            tol=tol,
            steps=sched.num_steps,
            ranks_identical=(len(set(digests)) == 1) if algo.kind == "allreduce" else None,
        )
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

    def timed(fn: Any) -> float:
        times = []
        fn()  # warm-up
        for _ in range(repeats):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        return float(np.median(times))

    ours = timed(lambda: execute_mpi(sched, comm, x))
    mpi = timed(lambda: _mpi_reference(comm, algo.kind, x))
    return {"algorithm": name, "params": params, "kind": algo.kind, "p": p, "nbytes": nbytes,
            "dtype": dtype, "ours_s": ours, "mpi_s": mpi, "ratio": ours / mpi if mpi > 0 else None}


def _write_report(path: Path, report: dict[str, Any]) -> None:
    from repro import atomic

    atomic.write_json(path, report)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments of the worker."""
    ap = argparse.ArgumentParser(prog="python -m repro.collectives.mpi_worker", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["check", "bench"], default="check")
    ap.add_argument("--algos", default="all",
                    help="';'-separated specs, e.g. 'ring;lr_lr:k=2;2dfc:rows=2' or 'all'/'allreduce'/'alltoall'")
    ap.add_argument("--lengths", default="0,1,7,1003",
                    help="check: comma-separated vector lengths (allreduce) / block lengths (all-to-all)")
    ap.add_argument("--a2a-lengths", default=None, help="check: block lengths for all-to-all (default: --lengths)")
    ap.add_argument("--dtypes", default="int64,float64")
    ap.add_argument("--nbytes", type=int, default=1 << 20, help="bench: bytes (vector, or per-pair block)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sleep", type=float, default=0.0, help="sleep this long first (timeout tests)")
    ap.add_argument("--out", type=Path, required=True, help="JSON report written by rank 0")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point run by every rank.

    Returns 0 unless something crashed (then every rank is aborted); the
    report's ``ok`` field is the verdict of the comparisons.
    """
    args = parse_args(argv)
    if args.sleep > 0:
        time.sleep(args.sleep)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        specs = _expand_algos(args.algos)
        dtypes = [d for d in args.dtypes.split(",") if d]
        if args.mode == "check":
            lengths = [int(v) for v in args.lengths.split(",") if v]
            a2a_lengths = [int(v) for v in (args.a2a_lengths or args.lengths).split(",") if v]
            case = 0
            for spec in specs:
                kind = get_algorithm(parse_spec(spec)[0]).kind
                for n in lengths if kind == "allreduce" else a2a_lengths:
                    for dtype in dtypes:
                        rows.append(check_case(comm, spec, n, dtype, args.seed, case))
                        case += 1
        else:
            for spec in specs:
                rows.append(bench_case(comm, spec, args.nbytes, dtypes[0], args.repeats, args.seed))
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(2)
    if rank == 0:
        ran = [r for r in rows if r.get("ok") is not None or args.mode == "bench"]
        ok = all(r["ok"] for r in ran) if args.mode == "check" else True
        report = {
            "mode": args.mode,
            "p": comm.Get_size(),
            "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
            "ok": ok,
            "cases": rows,
            "n_cases": len(ran),
            "n_skipped": len(rows) - len(ran),
            "elapsed_s": time.perf_counter() - t0,
        }
        _write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
