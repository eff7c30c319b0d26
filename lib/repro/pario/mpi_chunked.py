"""Collective write of chunked, compressed variables on MPI (the PnetCDF design, re-implemented).

Every rank calls :func:`chunked_write` with its hyperslabs and their data
for every variable.  A *round* handles a set of variables at once:

1. owners: every rank bids ``(overlap, rotating priority)`` for every chunk
   of the round; one ``Allreduce`` with a user-defined MPI reduction
   (lexicographic maximum of pairs, ``MPI.Op.Create``) picks the owners;
2. exchange: every rank sends its pieces of other ranks' chunks to their
   owners (one personalised exchange of pickled pieces);
3. compress: owners assemble their chunks and apply the filter;
4. I/O: compressed sizes are summed over ranks (each chunk has one owner)
   to lay the chunks out back to back, and one collective ``Write_at_all``
   with a hindexed view writes them.

``aggregate=True`` puts all variables in one round (the paper's multi-request
aggregation); ``False`` runs one round per variable.  The header and the
metadata table are written by rank 0 in the last round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from repro.pario import mpiio
from repro.pario.chunked import (
    Slab,
    Variable,
    encode_header,
    header_bytes,
    layout,
    lexmax_pairs,
    overlaps,
    owner_keys,
    owners_from_keys,
)
from repro.pario.decomp import Requests


@dataclass(frozen=True, kw_only=True)
class ChunkedTiming:
    """Seconds one rank spent per phase, summed over rounds, and the number of rounds (collective writes)."""

    owners_s: float
    exchange_s: float
    compress_s: float
    io_s: float
    rounds: int

    @property
    def total_s(self) -> float:
        """All phases."""
        return self.owners_s + self.exchange_s + self.compress_s + self.io_s


def _lexmax_op(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    a = np.frombuffer(inbuf, dtype=np.int64).reshape(-1, 2)
    b = np.frombuffer(inoutbuf, dtype=np.int64).reshape(-1, 2)
    b[...] = lexmax_pairs(b, a)


def chunk_owners(comm: Any, variables: list[Variable], slabs: list[list[Slab]], first_chunk: int) -> list[np.ndarray]:
    """Owner of every chunk of ``variables`` by maximum overlap, reduced with a user-defined MPI op."""
    from mpi4py import MPI

    p, me = comm.Get_size(), comm.Get_rank()
    ov = np.concatenate([overlaps(v, s) for v, s in zip(variables, slabs)])
    keys = owner_keys(ov, me, p, first_chunk)
    reduced = np.empty_like(keys)
    op = MPI.Op.Create(_lexmax_op, commute=True)
    try:
        comm.Allreduce([keys, MPI.INT64_T], [reduced, MPI.INT64_T], op=op)
    finally:
        op.Free()
    if np.any(reduced[:, 0] < 0):
        raise ValueError("a chunk is written by no rank: every chunk must be covered by the requests")
    owners = owners_from_keys(reduced, p, first_chunk)
    cuts = np.cumsum([0] + [v.num_chunks for v in variables])
    return [owners[a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _round(comm: Any, fh: Any, variables: list[Variable], var_ids: list[int], slabs: list[list[Slab]],
           pieces: list[list[np.ndarray]], sizes: list[np.ndarray | None], first_chunk: int,
           header: bool) -> list[float]:
    from mpi4py import MPI

    p, me = comm.Get_size(), comm.Get_rank()
    t0 = time.perf_counter()
    sub = [variables[i] for i in var_ids]
    owners = chunk_owners(comm, sub, [slabs[i] for i in var_ids], first_chunk)
    t1 = time.perf_counter()
    outgoing: list[list[tuple[int, int, Slab, np.ndarray]]] = [[] for _ in range(p)]
    for k, i in enumerate(var_ids):
        var = variables[i]
        for slab, data in zip(slabs[i], pieces[i]):
            for c in var.chunks_of(slab):
                part = slab.intersect(var.chunk_slab(c))
                if part is not None:
                    outgoing[int(owners[k][c])].append((k, c, part, data[part.index(slab.start)]))
    incoming = comm.alltoall(outgoing)
    t2 = time.perf_counter()
    blobs: dict[tuple[int, int], bytes] = {}
    assembled: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
    for msgs in incoming:
        for k, c, part, data in msgs:
            var = sub[k]
            cs = var.chunk_slab(c)
            if (k, c) not in assembled:
                assembled[k, c] = (np.empty(cs.count, dtype=var.dtype), 0)
            buf, filled = assembled[k, c]
            buf[part.index(cs.start)] = data
            assembled[k, c] = (buf, filled + part.size)
    for (k, c), (buf, filled) in assembled.items():
        if filled != sub[k].chunk_slab(c).size:
            raise ValueError(f"chunk {c} of {sub[k].name} is only partly written ({filled} elements)")
        blobs[k, c] = sub[k].encode(buf)
    t3 = time.perf_counter()
    local = [np.zeros(v.num_chunks, dtype=np.int64) for v in sub]
    for (k, c), blob in blobs.items():
        local[k][c] = len(blob)
    flat = np.concatenate(local)
    total = np.empty_like(flat)
    comm.Allreduce([flat, MPI.INT64_T], [total, MPI.INT64_T], op=MPI.SUM)
    cuts = np.cumsum([0] + [v.num_chunks for v in sub])
    for k, i in enumerate(var_ids):
        sizes[i] = total[cuts[k]:cuts[k + 1]]
    known = [i for i, s in enumerate(sizes) if s is not None]
    table = layout([variables[i] for i in known], [sizes[i] for i in known], start=header_bytes(variables))
    offs = {i: table.offsets[j] for j, i in enumerate(known)}
    reqs = [(int(offs[var_ids[k]][c]), blob) for (k, c), blob in blobs.items()]
    if header and me == 0:
        reqs.append((0, encode_header(table)))
    reqs.sort()
    data = np.frombuffer(b"".join(b for _, b in reqs), dtype=np.uint8)
    mpiio.collective_write(fh, Requests.from_pairs([o for o, _ in reqs], [len(b) for _, b in reqs]), data)
    t4 = time.perf_counter()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


def chunked_write(comm: Any, path: str, variables: list[Variable], slabs: list[list[Slab]],
                  pieces: list[list[np.ndarray]], aggregate: bool,
                  hints: Mapping[str, str | int] | None = None) -> ChunkedTiming:
    """Write chunked, filtered variables collectively.

    Parameters
    ----------
    comm:
        The communicator (collective).
    path:
        Output file.
    variables:
        The variables, in file order (the same on every rank).
    slabs, pieces:
        ``slabs[i]`` are this rank's hyperslabs of variable ``i`` and
        ``pieces[i]`` their data (arrays of the slabs' shapes).
    aggregate:
        One round for all variables (``True``) or one round per variable.
    hints:
        MPI-IO hints.
    """
    from mpi4py import MPI

    info = mpiio.make_info(hints)
    fh = MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE, info)
    rounds = [list(range(len(variables)))] if aggregate else [[i] for i in range(len(variables))]
    sizes: list[np.ndarray | None] = [None] * len(variables)
    totals = np.zeros(4)
    try:
        first = 0
        for n, var_ids in enumerate(rounds):
            totals += _round(comm, fh, variables, var_ids, slabs, pieces, sizes, first, header=n == len(rounds) - 1)
            first += sum(variables[i].num_chunks for i in var_ids)
    finally:
        fh.Close()
        info.Free()
    owners, exchange, compress, io = map(float, totals)
    return ChunkedTiming(owners_s=owners, exchange_s=exchange, compress_s=compress, io_s=io, rounds=len(rounds))


def contiguous_requests(variables: list[Variable], slabs: list[list[Slab]]) -> tuple[Requests, list[tuple[int, Slab]]]:
    """Byte runs of this rank's slabs in an uncompressed file (variables back to back, row-major).

    Returns the requests and, in request order, ``(variable index, row slab)`` of every run, so the
    caller can gather the data in the same order.
    """
    base = 0
    runs = []
    for i, (var, ss) in enumerate(zip(variables, slabs)):
        item = np.dtype(var.dtype).itemsize
        for s in ss:
            for r in range(s.start[0], s.start[0] + s.count[0]):
                off = base + (r * var.shape[1] + s.start[1]) * item
                runs.append((off, s.count[1] * item, i, Slab(start=(r, s.start[1]), count=(1, s.count[1]))))
        base += var.shape[0] * var.shape[1] * item
    runs.sort(key=lambda x: x[0])
    req = Requests.from_pairs([r[0] for r in runs], [r[1] for r in runs])
    return req, [(r[2], r[3]) for r in runs]
