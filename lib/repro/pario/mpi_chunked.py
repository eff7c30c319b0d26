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

:func:`chunked_read` is the collective read path (PnetCDF's chunked variables
must be read collectively, doc/README.Chunk.md of Parallel-NetCDF/PnetCDF
@5d89f43): the same owners (maximum overlap with the requests), each owner
reads its chunks with one collective ``Read_at_all`` per round, decodes them,
and sends every requester the pieces of its hyperslabs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from repro.pario import mpiio
from repro.pario.chunked import (
    ChunkTable,
    Slab,
    Variable,
    encode_header,
    header_bytes,
    layout,
    lexmax_pairs,
    overlaps,
    owner_keys,
    owners_from_keys,
    read_table,
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


@dataclass(frozen=True, kw_only=True)
class WriteRound:
    """One round of :func:`chunked_write`: its variables, this rank's hyperslabs and their data.

    Attributes
    ----------
    var_ids:
        Indices of the round's variables.
    slabs, pieces:
        This rank's hyperslabs of every variable and their data.
    first_chunk:
        Global index of the round's first chunk (for the rotating owner priority).
    header:
        Whether rank 0 writes the header and metadata table in this round (the last one).
    """

    var_ids: list[int]
    slabs: list[list[Slab]]
    pieces: list[list[np.ndarray]]
    first_chunk: int
    header: bool


def _round(comm: Any, fh: Any, variables: list[Variable], rnd: WriteRound, sizes: list[np.ndarray | None]) -> list[float]:
    from mpi4py import MPI

    var_ids, slabs, pieces, first_chunk, header = rnd.var_ids, rnd.slabs, rnd.pieces, rnd.first_chunk, rnd.header
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
    known = {i: s for i, s in enumerate(sizes) if s is not None}
    table = layout([variables[i] for i in known], list(known.values()), start=header_bytes(variables))
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
    fh = mpiio.open_file(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE, info)
    rounds = [list(range(len(variables)))] if aggregate else [[i] for i in range(len(variables))]
    sizes: list[np.ndarray | None] = [None] * len(variables)
    totals = np.zeros(4)
    try:
        first = 0
        for n, var_ids in enumerate(rounds):
            rnd = WriteRound(var_ids=var_ids, slabs=slabs, pieces=pieces, first_chunk=first, header=n == len(rounds) - 1)
            totals += _round(comm, fh, variables, rnd, sizes)
            first += sum(variables[i].num_chunks for i in var_ids)
    finally:
        fh.Close()
        info.Free()
    owners, exchange, compress, io = map(float, totals)
    return ChunkedTiming(owners_s=owners, exchange_s=exchange, compress_s=compress, io_s=io, rounds=len(rounds))


@dataclass(frozen=True, kw_only=True)
class ReadRound:
    """One round of :func:`chunked_read`: which variables, this rank's hyperslabs, and where it keeps the data.

    Attributes
    ----------
    var_ids:
        Indices (in the file's variable order) of the round's variables.
    slabs:
        This rank's hyperslabs of every variable.
    pieces:
        Where the hyperslabs' data go (filled in place, one array per slab).
    first_chunk:
        Global index of the round's first chunk (for the rotating owner priority).
    """

    var_ids: list[int]
    slabs: list[list[Slab]]
    pieces: list[list[np.ndarray]]
    first_chunk: int


def read_round(comm: Any, fh: Any, table: ChunkTable, rnd: ReadRound) -> list[float]:
    """Owners by overlap, one collective read of the owned chunks, decode, send every requester its pieces."""
    p, me = comm.Get_size(), comm.Get_rank()
    t0 = time.perf_counter()
    sub = [table.variables[i] for i in rnd.var_ids]
    mine = [rnd.slabs[i] for i in rnd.var_ids]
    owners = chunk_owners(comm, sub, mine, rnd.first_chunk)
    wanted = comm.allgather(mine)  # every rank's hyperslabs of the round's variables
    t1 = time.perf_counter()
    owned = sorted((int(table.offsets[i][c]), int(table.sizes[i][c]), k, int(c))
                   for k, i in enumerate(rnd.var_ids) for c in np.flatnonzero(owners[k] == me))
    raw = mpiio.collective_read(fh, Requests.from_pairs([o for o, *_ in owned], [n for _, n, *_ in owned]))
    t2 = time.perf_counter()
    chunks: dict[tuple[int, int], np.ndarray] = {}
    pos = 0
    for _, n, k, c in owned:
        chunks[k, c] = sub[k].decode(raw[pos:pos + n].tobytes(), sub[k].chunk_slab(c))
        pos += n
    t3 = time.perf_counter()
    outgoing: list[list[tuple[int, int, Slab, np.ndarray]]] = [[] for _ in range(p)]
    for (k, c), chunk in chunks.items():
        cs = sub[k].chunk_slab(c)
        for r in range(p):
            for j, slab in enumerate(wanted[r][k]):
                part = slab.intersect(cs)
                if part is not None:
                    outgoing[r].append((k, j, part, chunk[part.index(cs.start)]))
    filled = [[0] * len(ss) for ss in mine]
    for msgs in comm.alltoall(outgoing):
        for k, j, part, data in msgs:
            slab = mine[k][j]
            rnd.pieces[rnd.var_ids[k]][j][part.index(slab.start)] = data
            filled[k][j] += part.size
    for k, ss in enumerate(mine):
        for j, slab in enumerate(ss):
            if filled[k][j] != slab.size:
                raise ValueError(f"hyperslab {j} of {sub[k].name} got {filled[k][j]} of {slab.size} elements")
    t4 = time.perf_counter()
    return [t1 - t0, t4 - t3, t3 - t2, t2 - t1]


def chunked_read(comm: Any, path: str, slabs: list[list[Slab]], aggregate: bool,
                 hints: Mapping[str, str | int] | None = None) -> tuple[list[list[np.ndarray]], ChunkedTiming]:
    """Read chunked, filtered variables collectively (the mirror of :func:`chunked_write`).

    Rank 0 reads the header and metadata table and broadcasts it; then, per round, every chunk goes
    to the rank with the largest overlap (the write path's rule), the owners read their chunks with one
    ``Read_at_all``, decode them and send each requester the pieces of its hyperslabs.

    Parameters
    ----------
    comm:
        The communicator (collective).
    path:
        A file written by :func:`chunked_write`.
    slabs:
        ``slabs[i]``: this rank's hyperslabs of the file's variable ``i`` (every slab covered by some rank's
        request, as in the write).
    aggregate:
        One round for all variables (``True``) or one round per variable.
    hints:
        MPI-IO hints.

    Returns
    -------
    tuple
        ``pieces[i][j]``, the data of ``slabs[i][j]``, and the time per phase (``owners_s`` includes the
        metadata broadcast, ``exchange_s`` the scatter to the requesters, ``compress_s`` the decoding).
    """
    from mpi4py import MPI

    t0 = time.perf_counter()
    table = comm.bcast(read_table(path) if comm.Get_rank() == 0 else None, root=0)
    if len(slabs) != len(table.variables):
        raise ValueError(f"slabs name {len(slabs)} variables, the file holds {len(table.variables)}")
    pieces = [[np.empty(s.count, dtype=v.dtype) for s in ss] for v, ss in zip(table.variables, slabs)]
    meta = time.perf_counter() - t0
    info = mpiio.make_info(hints)
    fh = mpiio.open_file(comm, path, MPI.MODE_RDONLY, info)
    groups = [list(range(len(table.variables)))] if aggregate else [[i] for i in range(len(table.variables))]
    totals = np.array([meta, 0.0, 0.0, 0.0])
    try:
        first = 0
        for var_ids in groups:
            rnd = ReadRound(var_ids=var_ids, slabs=slabs, pieces=pieces, first_chunk=first)
            totals += read_round(comm, fh, table, rnd)
            first += sum(table.variables[i].num_chunks for i in var_ids)
    finally:
        fh.Close()
        info.Free()
    owners, exchange, decode, io = map(float, totals)
    return pieces, ChunkedTiming(owners_s=owners, exchange_s=exchange, compress_s=decode, io_s=io, rounds=len(groups))


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
