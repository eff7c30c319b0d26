"""Per-rank program: ``mpiexec -n P python -m mpi4py -m repro.pario.mpi_worker --job J --out O``.

For one decomposition it writes the file once with MPI's own
``Write_at_all`` (ROMIO's two-phase, ``cb_nodes`` = our aggregator count) and
once with our two-phase write per kernel, then checks on rank 0 that every
file is byte-identical to MPI's and to the known pattern, and reads every
rank's bytes back with ``Read_at_all``.  Times are the slowest rank's,
median over repeats.  Rank 0 writes a JSON report atomically.

The job (JSON) holds ``decomp`` (fields of :class:`~repro.pario.decomp.DecompSpec`),
``aggregators``, ``stripe``, ``kernels`` (e.g. ``["unordered", "balanced:4"]``),
``repeats``, ``workdir``, optionally ``fail_rank`` (that rank raises before
the exchange, to test that a failing rank ends the job) and optionally ``tam``:
``{"ranks_per_node": ppn, "per_node": [k, ...], "kernel": null or "balanced:2"}``
for two-layer (intra-node) aggregation writes, each compared with MPI's file
and read back through the INAs.  A job with a ``chunked`` field instead writes
chunked, compressed variables (see :func:`chunked_job`).

:func:`launch` runs it through the shared launcher and returns the report;
:func:`launch_irregular` launches one job per rank count, running every seed of an
irregular decomposition.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from repro import atomic
from repro.hpc.launcher import run_mpi
from repro.pario import mpiio
from repro.pario.chunked import block_cyclic_slabs, read_table, read_variable, synthetic_field, variable_from_fields
from repro.pario.decomp import DecompSpec, expected_file, payload
from repro.pario.intranode import IntraNodeLayout
from repro.pario.kernels import KernelSpec
from repro.pario.mpi_chunked import chunked_read, chunked_write, contiguous_requests
from repro.pario.mpi_tam import tam_read, tam_write
from repro.pario.mpi_twophase import two_phase_write


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _slowest(comm: Any, seconds: float) -> float:
    from mpi4py import MPI

    return float(comm.allreduce(seconds, op=MPI.MAX))


def run_job(comm: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Run every write of ``job`` on ``comm``; rank 0 gets the full report, others a partial one."""
    if "chunked" in job:
        return chunked_job(comm, job["chunked"], Path(job["workdir"]))
    if "decomps" in job:
        rest = {k: v for k, v in job.items() if k != "decomps"}
        return {"cases": [run_job(comm, {**rest, "decomp": d}) for d in job["decomps"]]}
    if "chunked_cases" in job:
        return {"cases": [chunked_job(comm, case, Path(job["workdir"])) for case in job["chunked_cases"]]}
    rank, p = comm.Get_rank(), comm.Get_size()
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in job["decomp"].items()}
    spec = DecompSpec(**fields)
    decomp = spec.build(p)
    mine = decomp.ranks[rank]
    data = payload(mine)
    A = int(job["aggregators"])
    stripe = job.get("stripe")
    repeats = int(job.get("repeats", 1))
    workdir = Path(job["workdir"])
    hints: dict[str, Any] = {"cb_nodes": A, "romio_cb_write": "enable", "romio_cb_read": "enable"}
    if stripe:
        hints["striping_unit"] = stripe
    expected = hashlib.sha256(expected_file(decomp)).hexdigest() if rank == 0 else ""
    report: dict[str, Any] = {"p": p, "decomposition": decomp.name, "file_size": decomp.file_size,
                              "aggregators": A, "stripe": stripe,
                              "pieces_total": int(comm.allreduce(mine.count)), "writes": []}
    mpi_path = workdir / "mpi_write_at_all.bin"
    times = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        mpiio.write_all(comm, str(mpi_path), mine, data, hints)
        times.append(_slowest(comm, time.perf_counter() - t0))
    back = mpiio.read_all(comm, str(mpi_path), mine, hints)
    read_ok = bool(comm.allreduce(int(not np.array_equal(back, data)))) is False
    mpi_digest = _digest(mpi_path) if rank == 0 else ""
    report["mpi"] = {"write_s": float(np.median(times)), "read_back_ok": read_ok,
                     "equals_pattern": mpi_digest == expected if rank == 0 else None}
    for text in job["kernels"]:
        kernel = KernelSpec.parse(text)
        if job.get("fail_rank", -1) == rank:
            raise RuntimeError(f"injected failure on rank {rank} before the {kernel.label} exchange")
        path = workdir / f"twophase_{kernel.name}_{kernel.window or 0}.bin"
        parts = []
        for _ in range(repeats):
            comm.Barrier()
            timing = two_phase_write(comm, str(path), mine, data, kernel, A, stripe)
            parts.append([_slowest(comm, x) for x in (timing.plan_s, timing.exchange_s, timing.write_s,
                                                       timing.total_s)])
        back = mpiio.read_all(comm, str(path), mine, hints)
        read_ok = not comm.allreduce(int(not np.array_equal(back, data)))
        med = np.median(np.array(parts), axis=0)
        row = {"kernel": kernel.label, "window": kernel.window, "rounds": timing.rounds,
               "messages": timing.messages, "plan_s": med[0], "exchange_s": med[1], "write_s": med[2],
               "total_s": med[3], "read_back_ok": bool(read_ok)}
        if rank == 0:
            digest = _digest(path)
            row.update(identical_to_mpi=digest == mpi_digest, equals_pattern=digest == expected)
        report["writes"].append(row)
    case = WriteCase(mine=mine, data=data, workdir=workdir, repeats=repeats, hints=hints, mpi_digest=mpi_digest,
                     expected=expected)
    report["tam"] = [tam_case(comm, job["tam"], k, case) for k in (job.get("tam") or {}).get("per_node", [])]
    if job.get("independent"):
        report["independent"] = independent_case(comm, case)
    return report


@dataclass(frozen=True, kw_only=True)
class WriteCase:
    """What every write of one irregular job shares: this rank's pieces, where to write, what to compare with.

    Attributes
    ----------
    mine, data:
        This rank's requests and their bytes.
    workdir:
        Where the files go.
    repeats:
        Timed repetitions (median kept).
    hints:
        MPI-IO hints of the all-rank reference write (and of the read-back).
    mpi_digest, expected:
        On rank 0, the digest of MPI's own all-rank file and of the known pattern (empty elsewhere).
    """

    mine: Any
    data: np.ndarray
    workdir: Path
    repeats: int
    hints: dict[str, Any]
    mpi_digest: str
    expected: str


def _took_part(comm: Any, before: int) -> int:
    """Ranks that opened a file through :func:`repro.pario.mpiio.open_file` since ``before`` (this rank's count)."""
    return int(comm.allreduce(int(mpiio.opens() > before)))


def tam_case(comm: Any, tam: dict[str, Any], per_node: int, case: WriteCase) -> dict[str, Any]:
    """One two-layer write with ``per_node`` INAs per node: times, counts and the file check (rank 0).

    ``participants`` counts the ranks that really opened the file for the write (through
    :func:`repro.pario.mpiio.open_file`), not the algorithm's own flag of who is an INA.
    """
    rank = comm.Get_rank()
    layout = IntraNodeLayout(p=comm.Get_size(), ranks_per_node=int(tam["ranks_per_node"]), per_node=per_node)
    kernel = tam.get("kernel")
    path = case.workdir / f"tam_{per_node}.bin"
    parts = []
    before = mpiio.opens()
    for _ in range(case.repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        timing = tam_write(comm, str(path), case.mine, case.data, layout, kernel=kernel)
        parts.append([_slowest(comm, x) for x in (timing.gather_s, timing.io_s, time.perf_counter() - t0)])
    participants = _took_part(comm, before)
    back = tam_read(comm, str(path), case.mine, layout)
    med = np.median(np.array(parts), axis=0)
    row = {"per_node": per_node, "ranks_per_node": layout.ranks_per_node, "nodes": layout.nodes,
           "layer2": kernel or "MPI Write_at_all",
           "participants": participants,
           "pieces_in": int(comm.allreduce(timing.pieces_in)), "pieces_out": int(comm.allreduce(timing.pieces_out)),
           "layer1_messages": int(comm.allreduce(timing.layer1_messages)),
           "layer1_bytes": int(comm.allreduce(timing.layer1_bytes)),
           "gather_s": med[0], "io_s": med[1], "total_s": med[2],
           "read_back_ok": not comm.allreduce(int(not np.array_equal(back, case.data)))}
    if rank == 0:
        digest = _digest(path)
        row.update(identical_to_mpi=digest == case.mpi_digest, equals_pattern=digest == case.expected)
    return row


def independent_case(comm: Any, case: WriteCase) -> dict[str, Any]:
    """Independent I/O, no aggregation: every rank writes each of its extents with ``Write_at``.

    Times, the ranks that opened the file, the read-back and (rank 0) the file check against MPI's.
    """
    path = case.workdir / "independent.bin"
    times = []
    before = mpiio.opens()
    for _ in range(case.repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        mpiio.independent_write(comm, str(path), case.mine, case.data)
        times.append(_slowest(comm, time.perf_counter() - t0))
    participants = _took_part(comm, before)
    back = mpiio.read_all(comm, str(path), case.mine, case.hints)
    row = {"write_s": float(np.median(times)), "participants": participants,
           "writes": int(comm.allreduce(int(case.mine.count))),
           "read_back_ok": not comm.allreduce(int(not np.array_equal(back, case.data)))}
    if comm.Get_rank() == 0:
        digest = _digest(path)
        row.update(identical_to_mpi=digest == case.mpi_digest, equals_pattern=digest == case.expected)
    return row


def chunked_job(comm: Any, job: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Write chunked variables in every mode and uncompressed, read them back collectively; rank 0 checks files.

    ``job``: ``variables`` (fields of :class:`~repro.pario.chunked.Variable`), ``grid`` ``[pr, pc]``,
    ``tile``, ``seed``, ``modes`` (``"per-request"``, ``"aggregated"``), ``repeats``, and optionally
    ``keep`` (a path: rank 0 copies the aggregated file there).  After each mode's write every rank reads
    its hyperslabs back with :func:`~repro.pario.mpi_chunked.chunked_read` in the same mode (one round per
    variable, or one for all); ``read_differing`` counts the variables some rank read back differently.
    """
    rank = comm.Get_rank()
    variables = [variable_from_fields(d) for d in job["variables"]]
    grid, tile = tuple(job["grid"]), tuple(job["tile"])
    fields = [synthetic_field(v, job["seed"] + i) for i, v in enumerate(variables)]
    slabs = [block_cyclic_slabs(v, rank, grid, tile) for v in variables]
    pieces = [[f[s.index()] for s in ss] for f, ss in zip(fields, slabs)]
    repeats = int(job.get("repeats", 1))
    raw_bytes = sum(f.nbytes for f in fields)
    out: dict[str, Any] = {"p": comm.Get_size(), "variables": len(variables), "raw_bytes": raw_bytes, "modes": []}
    digests = {}
    for mode in job["modes"]:
        path = workdir / f"chunked_{mode}.bin"
        parts = []
        for _ in range(repeats):
            comm.Barrier()
            t = chunked_write(comm, str(path), variables, slabs, pieces, aggregate=mode == "aggregated")
            parts.append([_slowest(comm, x) for x in (t.owners_s, t.exchange_s, t.compress_s, t.io_s, t.total_s)])
        med = np.median(np.array(parts), axis=0)
        row = {"mode": mode, "rounds": t.rounds, "owners_s": med[0], "exchange_s": med[1], "compress_s": med[2],
               "io_s": med[3], "total_s": med[4]}
        reads = []
        for _ in range(repeats):
            comm.Barrier()
            back, rt = chunked_read(comm, str(path), slabs, aggregate=mode == "aggregated")
            reads.append([_slowest(comm, x) for x in (rt.owners_s, rt.exchange_s, rt.compress_s, rt.io_s, rt.total_s)])
        differing = [int(any(not np.array_equal(a, b) for a, b in zip(got, want))) for got, want in zip(back, pieces)]
        rmed = np.median(np.array(reads), axis=0)
        row.update(read_rounds=rt.rounds, read_owners_s=rmed[0], read_exchange_s=rmed[1], read_decode_s=rmed[2],
                   read_io_s=rmed[3], read_total_s=rmed[4],
                   read_differing=int(sum(comm.allreduce(np.asarray(differing, dtype=np.int64)) > 0)))
        if rank == 0:
            table = read_table(path)
            ext = table.extents()
            size = path.stat().st_size
            overlaps = sum(1 for (o1, s1), (o2, _) in zip(ext, ext[1:]) if o1 + s1 > o2)
            outside = sum(1 for o, s in ext if o < 0 or o + s > size)
            wrong = sum(int(read_variable(path, v.name).tobytes() != f.tobytes()) for v, f in zip(variables, fields))
            digests[mode] = _digest(path)
            row.update(stored_bytes=int(sum(s for _, s in ext)), file_bytes=size, overlapping_extents=overlaps,
                       extents_outside=outside, variables_differing=wrong)
        out["modes"].append(row)
    if rank == 0:
        out["modes_identical"] = len(set(digests.values())) <= 1
        if job.get("keep") and "aggregated" in job["modes"]:
            shutil.copyfile(workdir / "chunked_aggregated.bin", job["keep"])
    # uncompressed baseline: the same slabs, variables back to back, one collective write
    req, order = contiguous_requests(variables, slabs)
    data = np.concatenate([fields[i][s.index()].ravel().view(np.uint8) for i, s in order]) if order else np.zeros(0, np.uint8)
    path = workdir / "contiguous.bin"
    times = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        mpiio.write_all(comm, str(path), req, data)
        times.append(_slowest(comm, time.perf_counter() - t0))
    out["contiguous"] = {"write_s": float(np.median(times))}
    if rank == 0:
        out["contiguous"]["equals_fields"] = path.read_bytes() == b"".join(f.tobytes() for f in fields)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of every rank (run under ``python -m mpi4py``, which aborts the job if a rank raises)."""
    ap = argparse.ArgumentParser(prog="repro.pario.mpi_worker", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    job = json.loads(args.job.read_text())
    t0 = time.perf_counter()
    report = run_job(comm, job)
    if comm.Get_rank() == 0:
        report["mpi_library"] = MPI.Get_library_version().splitlines()[0].strip()
        report["elapsed_s"] = time.perf_counter() - t0
        atomic.write_json(args.out, report)
    return 0


def launch(nprocs: int, job: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    """Run ``job`` on ``nprocs`` ranks in a temporary directory; return rank 0's report.

    Raises
    ------
    repro.hpc.launcher.MPIRunError
        If a rank fails (the job is aborted) or the launch exceeds ``timeout``.
    """
    with tempfile.TemporaryDirectory(prefix="repro-pario-", dir=os.environ.get("REPRO_PARIO_TMP")) as tmp:
        job = {**job, "workdir": job.get("workdir") or tmp}
        jpath, out = Path(tmp, "job.json"), Path(tmp, "report.json")
        jpath.write_text(json.dumps(job))
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        run_mpi(["-m", "repro.pario.mpi_worker", "--job", str(jpath), "--out", str(out)], nprocs, timeout, env=env)
        return json.loads(out.read_text())



@dataclass(frozen=True, kw_only=True)
class IrregularRun:
    """One job on an E3SM-like irregular decomposition (see :func:`launch_irregular`).

    Attributes
    ----------
    p
        MPI ranks.
    seed
        Seed of the decomposition.
    spec
        The decomposition.
    report
        Rank 0's report.
    """

    p: int
    seed: int
    spec: DecompSpec
    report: dict[str, Any]


def launch_irregular(ranks: Sequence[int], seeds: Sequence[int], file_bytes: int, mean_run: int,
                     job: Callable[[int], dict[str, Any]], timeout: float) -> Iterator[IrregularRun]:
    """Run a job on an irregular decomposition for every rank count and seed: one launch per rank count.

    Parameters
    ----------
    ranks, seeds
        MPI rank counts and decomposition seeds.
    file_bytes, mean_run
        File size and mean run length (bytes) of the irregular map.
    job
        The job's fields other than ``decomp`` at ``p`` ranks (aggregators, kernels, repeats ...).
    timeout
        Seconds each launch may take (it runs every seed).

    Yields
    ------
    IrregularRun
        One per (rank count, seed), in that order.
    """
    for p in tqdm(ranks, desc="MPI launches (one per rank count)"):
        specs = [DecompSpec(kind="irregular", file_size=file_bytes, mean_run=mean_run, seed=seed) for seed in seeds]
        rep = launch(p, {"decomps": [spec.__dict__ for spec in specs], **job(p)}, timeout=timeout)
        for seed, spec, report in zip(seeds, specs, rep["cases"]):
            yield IrregularRun(p=p, seed=seed, spec=spec, report=report)


if __name__ == "__main__":
    sys.exit(main())
