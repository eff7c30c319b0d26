"""Our two-phase collective write on MPI: plan, exchange with a kernel, aggregator writes.

Every rank calls :func:`two_phase_write` with its requests and data.  The
steps mirror ROMIO's: the aggregate access range is reduced over ranks and
cut into file domains; every rank cuts its requests at the domain boundaries;
the byte counts are gathered so that all ranks build the same exchange
schedule (:mod:`repro.pario.kernels`) and the piece lists go to their
aggregators (ROMIO's "others' requests"); the data moves by the shared
IR's mpi4py executor; each aggregator places what it received into its
domain and writes the covered extents with contiguous ``Write_at`` calls.
(ROMIO additionally cuts a domain into ``cb_buffer_size`` rounds and
read-modify-writes holes; the patterns here cover their domains, and we
write each domain in one round.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from repro.hpc.mpi import execute_mpi
from repro.pario import mpiio
from repro.pario.decomp import Requests, expand_offsets
from repro.pario.kernels import KernelSpec, RoundTable, round_table, to_schedule
from repro.pario.twophase import aggregator_ranks, file_domains, split_by_domain


@dataclass(frozen=True, kw_only=True)
class TwoPhaseTiming:
    """Seconds this rank spent in each part of one two-phase write.

    Attributes
    ----------
    plan_s:
        Access range, domains, counts and piece lists (metadata exchange).
    exchange_s:
        Phase 1, the data exchange by the kernel's schedule.
    write_s:
        Phase 2, placing the domain and writing it (aggregators; others 0).
    rounds, messages:
        The kernel's rounds and messages (the same on every rank).
    """

    plan_s: float
    exchange_s: float
    write_s: float
    rounds: int
    messages: int

    @property
    def total_s(self) -> float:
        """All three parts."""
        return self.plan_s + self.exchange_s + self.write_s


def plan_table(comm: Any, requests: Requests, aggregators: int, kernel: KernelSpec,
               stripe: int | None = None) -> tuple[RoundTable, np.ndarray, list[Requests], list[int]]:
    """Collectively compute the domains, the ``p x A`` counts and the kernel's round table.

    Returns
    -------
    tuple
        ``(table, counts, my_pieces, aggregator_ranks)`` where ``my_pieces[a]``
        are this rank's pieces in domain ``a``.
    """
    from mpi4py import MPI

    big = np.iinfo(np.int64).max
    lo = int(requests.offsets[0]) if requests.count else big
    hi = int(requests.offsets[-1] + requests.lengths[-1]) if requests.count else 0
    lo = comm.allreduce(lo, op=MPI.MIN)
    hi = comm.allreduce(hi, op=MPI.MAX)
    if lo == big:
        lo = hi = 0
    domains = file_domains(lo, hi, aggregators, stripe)
    mine = split_by_domain(requests, domains)
    counts = np.array(comm.allgather([r.nbytes for r in mine]), dtype=np.int64).reshape(comm.Get_size(), aggregators)
    aggs = aggregator_ranks(comm.Get_size(), aggregators)
    return round_table(kernel, counts, aggs), counts, mine, aggs


def two_phase_write(comm: Any, path: str, requests: Requests, data: np.ndarray, kernel: KernelSpec | str,
                    aggregators: int, stripe: int | None = None) -> TwoPhaseTiming:
    """Write ``data`` to the bytes ``requests`` selects with our two-phase algorithm.

    Parameters
    ----------
    comm:
        The communicator (collective: every rank calls).
    path:
        Output file (created if missing).
    requests, data:
        This rank's pieces and their bytes, in request order.
    kernel:
        The exchange kernel (:class:`~repro.pario.kernels.KernelSpec` or text).
    aggregators:
        Number of file domains / aggregators ``A`` (``1 <= A <= p``).
    stripe:
        Align domain boundaries to this stripe size (bytes), or ``None``.

    Returns
    -------
    TwoPhaseTiming
        This rank's time per part.
    """
    from mpi4py import MPI

    kernel = KernelSpec.parse(kernel) if isinstance(kernel, str) else kernel
    data = np.ascontiguousarray(data, dtype=np.uint8)
    if data.size != requests.nbytes:
        raise ValueError(f"data has {data.size} bytes, requests select {requests.nbytes}")
    me, A = comm.Get_rank(), aggregators
    t0 = time.perf_counter()
    table, counts, mine, aggs = plan_table(comm, requests, A, kernel, stripe)
    # piece lists go to the aggregators (ROMIO's others_req)
    outgoing: list[Any] = [None] * comm.Get_size()
    for a, r in enumerate(aggs):
        outgoing[r] = (mine[a].offsets, mine[a].lengths)
    incoming = comm.alltoall(outgoing)
    schedule = to_schedule(table, counts)
    t1 = time.perf_counter()
    offsets = schedule.offsets
    if kernel.name == "alltoallw":
        received = alltoallw_exchange(comm, counts, aggs, data, np.asarray(offsets), schedule.work_length)
    else:
        sendbuf = np.zeros(schedule.work_length, dtype=np.uint8)
        sendbuf[offsets[me * A]:offsets[me * A + A]] = data
        received = execute_mpi(schedule, comm, sendbuf)
    t2 = time.perf_counter()
    fh = mpiio.open_file(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    try:
        for a, r in enumerate(aggs):
            if r == me:
                pieces = [
                    Requests(offsets=np.asarray(o, dtype=np.int64), lengths=np.asarray(n, dtype=np.int64)) for o, n in incoming
                ]
                blocks = [received[offsets[s * A + a] : offsets[s * A + a + 1]] for s in range(len(pieces))]
                extents, image = place_domain(pieces, blocks)
                mpiio.write_extents(fh, extents, image)
    finally:
        fh.Close()
    t3 = time.perf_counter()
    return TwoPhaseTiming(
        plan_s=t1 - t0, exchange_s=t2 - t1, write_s=t3 - t2, rounds=table.num_rounds, messages=int((table.rounds >= 0).sum())
    )


def alltoallw_exchange(comm: Any, counts: np.ndarray, aggs: list[int], data: np.ndarray, offsets: np.ndarray,
                       work_length: int) -> np.ndarray:
    """Phase 1 as one ``MPI_Alltoallw``: every rank sends its bytes of domain ``a`` to aggregator ``aggs[a]``.

    Returns the work buffer of :func:`~repro.pario.kernels.to_schedule`'s layout (block ``s * A + a`` at
    ``offsets[s * A + a]``), so the aggregators place their domains as after the scheduled kernels.
    """
    from mpi4py import MPI

    p, A = counts.shape
    me = comm.Get_rank()
    cum = np.concatenate([[0], np.cumsum(counts[me])])
    scounts, sdispls = np.zeros(p, dtype=np.int64), np.zeros(p, dtype=np.int64)
    for a, r in enumerate(aggs):
        scounts[r], sdispls[r] = counts[me, a], cum[a]
    mine = [a for a, r in enumerate(aggs) if r == me]
    rcounts = counts[:, mine[0]].astype(np.int64) if mine else np.zeros(p, dtype=np.int64)
    rdispls = np.concatenate([[0], np.cumsum(rcounts)[:-1]])
    recv = np.empty(int(rcounts.sum()), dtype=np.uint8)
    types = [MPI.BYTE] * p
    comm.Alltoallw([np.ascontiguousarray(data, dtype=np.uint8), scounts.tolist(), sdispls.tolist(), types],
                   [recv, rcounts.tolist(), rdispls.tolist(), types])
    work = np.zeros(work_length, dtype=np.uint8)
    for a in mine:
        for s in range(p):
            work[offsets[s * A + a]:offsets[s * A + a + 1]] = recv[rdispls[s]:rdispls[s] + rcounts[s]]
    return work


def place_domain(pieces: list[Requests], blocks: list[np.ndarray]) -> tuple[Requests, np.ndarray]:
    """Assemble an aggregator's domain from every sender's pieces.

    Parameters
    ----------
    pieces:
        ``pieces[s]`` = sender ``s``'s requests inside the domain.
    blocks:
        ``blocks[s]`` = the bytes sender ``s`` sent for them, in request order.

    Returns
    -------
    tuple
        The covered extents (coalesced, sorted) and their bytes, concatenated
        in extent order, ready for contiguous writes.
    """
    cat_off = np.concatenate([pc.offsets for pc in pieces] or [np.zeros(0, np.int64)])
    cat_len = np.concatenate([pc.lengths for pc in pieces] or [np.zeros(0, np.int64)])
    extents = Requests.from_pairs(cat_off, cat_len).coalesced()
    if extents.count == 0:
        return extents, np.zeros(0, dtype=np.uint8)
    lo = int(extents.offsets[0])
    image = np.zeros(int(extents.offsets[-1] + extents.lengths[-1]) - lo, dtype=np.uint8)
    for pc, data in zip(pieces, blocks):
        image[expand_offsets(pc) - lo] = data
    return extents, image[expand_offsets(extents) - lo]
