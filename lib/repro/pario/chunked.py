"""Chunked, compressed variables in the PnetCDF style: chunk grid, ownership, filters, file layout.

Hou et al. (BigData 2021) add compression to PnetCDF by storing each
variable as a grid of chunks that are compressed one by one.  In a
collective write every chunk gets one *owner*, the rank whose requests
overlap it most; the other writers send their pieces of the chunk to the
owner, which assembles, compresses and writes it; the compressed sizes are
exchanged so that every chunk gets a file offset, and a metadata table
records where each chunk lives.

This module is the MPI-free part: :class:`Variable` (shape, chunk shape,
dtype, filter) and its chunk grid, the hyperslab requests of a rank
(:class:`Slab`), overlaps, the ownership rule (:func:`owner_keys`), the
filters (zlib from Python's standard library, or identity), the file
layout (:class:`ChunkTable`, header and table encoding) and the independent
reader (:func:`read_variable`).  :mod:`repro.pario.mpi_chunked` runs the
collective write.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"RPCHUNK1"
FILTERS = ("zlib", "identity")


@dataclass(frozen=True, kw_only=True)
class Slab:
    """A hyperslab ``[start, start + count)`` of a 2-D variable (row, column)."""

    start: tuple[int, int]
    count: tuple[int, int]

    def intersect(self, other: "Slab") -> "Slab | None":
        """The common part of two slabs, or ``None``."""
        lo = (max(self.start[0], other.start[0]), max(self.start[1], other.start[1]))
        hi = (min(self.start[0] + self.count[0], other.start[0] + other.count[0]),
              min(self.start[1] + self.count[1], other.start[1] + other.count[1]))
        if hi[0] <= lo[0] or hi[1] <= lo[1]:
            return None
        return Slab(start=lo, count=(hi[0] - lo[0], hi[1] - lo[1]))

    @property
    def size(self) -> int:
        """Elements in the slab."""
        return self.count[0] * self.count[1]

    def index(self, origin: tuple[int, int] = (0, 0)) -> tuple[slice, slice]:
        """Numpy index of the slab in an array whose element ``[0, 0]`` is at ``origin``."""
        r, c = self.start[0] - origin[0], self.start[1] - origin[1]
        return slice(r, r + self.count[0]), slice(c, c + self.count[1])


@dataclass(frozen=True, kw_only=True)
class Variable:
    """A chunked 2-D variable.

    Attributes
    ----------
    name:
        Variable name.
    shape:
        ``(rows, cols)``.
    chunk:
        Chunk shape; edge chunks are cut short by the variable's extent.
    dtype:
        numpy dtype string, e.g. ``"<f4"``.
    filter:
        ``"zlib"`` or ``"identity"``.
    level:
        zlib level (1..9).
    """

    name: str
    shape: tuple[int, int]
    chunk: tuple[int, int]
    dtype: str = "<f4"
    filter: str = "zlib"
    level: int = 4

    def __post_init__(self) -> None:
        if self.filter not in FILTERS:
            raise ValueError(f"unknown filter {self.filter!r}; known: {FILTERS}")
        if min(self.chunk) < 1 or min(self.shape) < 0:
            raise ValueError("chunk sizes must be >= 1 and shape >= 0")

    @property
    def grid(self) -> tuple[int, int]:
        """Chunks per dimension."""
        return (-(-self.shape[0] // self.chunk[0]), -(-self.shape[1] // self.chunk[1]))

    @property
    def num_chunks(self) -> int:
        """Chunks in the variable."""
        return self.grid[0] * self.grid[1]

    def chunk_slab(self, c: int) -> Slab:
        """The (clipped) slab of chunk ``c`` (row-major chunk numbering)."""
        i, j = divmod(c, self.grid[1])
        r0, c0 = i * self.chunk[0], j * self.chunk[1]
        return Slab(start=(r0, c0), count=(min(self.chunk[0], self.shape[0] - r0), min(self.chunk[1], self.shape[1] - c0)))

    def chunks_of(self, slab: Slab) -> list[int]:
        """Chunks a slab touches."""
        i0, i1 = slab.start[0] // self.chunk[0], (slab.start[0] + slab.count[0] - 1) // self.chunk[0]
        j0, j1 = slab.start[1] // self.chunk[1], (slab.start[1] + slab.count[1] - 1) // self.chunk[1]
        return [i * self.grid[1] + j for i in range(i0, i1 + 1) for j in range(j0, j1 + 1)]

    def encode(self, data: np.ndarray) -> bytes:
        """Apply the filter to one chunk's bytes (C order)."""
        raw = np.ascontiguousarray(data, dtype=self.dtype).tobytes()
        return zlib.compress(raw, self.level) if self.filter == "zlib" else raw

    def decode(self, blob: bytes, slab: Slab) -> np.ndarray:
        """Undo the filter and shape the chunk."""
        raw = zlib.decompress(blob) if self.filter == "zlib" else blob
        return np.frombuffer(raw, dtype=self.dtype).reshape(slab.count)


def overlaps(var: Variable, slabs: list[Slab]) -> np.ndarray:
    """Elements of ``slabs`` inside each chunk of ``var`` (length ``num_chunks``)."""
    out = np.zeros(var.num_chunks, dtype=np.int64)
    for s in slabs:
        for c in var.chunks_of(s):
            part = s.intersect(var.chunk_slab(c))
            if part is not None:
                out[c] += part.size
    return out


def owner_keys(overlap: np.ndarray, rank: int, p: int, first_chunk: int = 0) -> np.ndarray:
    """A rank's bid for every chunk: ``(overlap, rotating priority)`` pairs, ``n x 2`` int64.

    The lexicographic maximum over ranks picks the owner: the rank with the
    largest overlap; ties go to the rank whose priority ``(rank + chunk) mod p``
    is highest, which rotates the tie-break over chunks (PnetCDF's rule,
    without its load-balance penalty).  A rank with no overlap bids ``-1``.
    """
    chunks = np.arange(first_chunk, first_chunk + overlap.size)
    prio = (rank + chunks) % p
    return np.stack([np.where(overlap > 0, overlap, -1), prio], axis=1).astype(np.int64)


def owners_from_keys(keys: np.ndarray, p: int, first_chunk: int = 0) -> np.ndarray:
    """Owner rank of every chunk from the reduced keys (the inverse of the priority rotation)."""
    chunks = np.arange(first_chunk, first_chunk + keys.shape[0])
    return (keys[:, 1] - chunks) % p


def lexmax_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise lexicographic maximum of two ``n x 2`` arrays (the user-defined reduction)."""
    take_b = (b[:, 0] > a[:, 0]) | ((b[:, 0] == a[:, 0]) & (b[:, 1] > a[:, 1]))
    return np.where(take_b[:, None], b, a)


@dataclass(frozen=True, kw_only=True)
class ChunkTable:
    """Where every chunk of every variable lives in the file.

    Attributes
    ----------
    variables:
        The variables, in file order.
    offsets, sizes:
        Per variable, an array of file offsets and stored (filtered) sizes of its chunks.
    """

    variables: tuple[Variable, ...]
    offsets: tuple[np.ndarray, ...]
    sizes: tuple[np.ndarray, ...]

    def extents(self) -> list[tuple[int, int]]:
        """Every chunk's ``(offset, size)``, in file order."""
        pairs = [(int(o), int(s)) for off, sz in zip(self.offsets, self.sizes) for o, s in zip(off, sz)]
        return sorted(pairs)


def header_bytes(variables: list[Variable] | tuple[Variable, ...]) -> int:
    """Bytes of the header: magic, JSON length, JSON description, then the table (2 int64 per chunk)."""
    return len(_describe(variables)) + len(MAGIC) + 8 + 16 * sum(v.num_chunks for v in variables)


def _describe(variables: list[Variable] | tuple[Variable, ...]) -> bytes:
    return json.dumps([v.__dict__ for v in variables]).encode()


def layout(variables: list[Variable] | tuple[Variable, ...], sizes: list[np.ndarray],
           start: int | None = None) -> ChunkTable:
    """Assign file offsets: the header first, then every chunk back to back in (variable, chunk) order.

    ``start`` is where the first chunk goes (default: right after the header of ``variables``; a
    round that lays out only the first variables of a file passes the whole file's header size).
    """
    start = header_bytes(variables) if start is None else start
    flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sizes]) if sizes else np.zeros(0, np.int64)
    offs = start + np.concatenate([[0], np.cumsum(flat)[:-1]]) if flat.size else flat
    cuts = np.cumsum([0] + [v.num_chunks for v in variables])
    return ChunkTable(variables=tuple(variables), offsets=tuple(offs[a:b] for a, b in zip(cuts[:-1], cuts[1:])),
                      sizes=tuple(flat[a:b] for a, b in zip(cuts[:-1], cuts[1:])))


def encode_header(table: ChunkTable) -> bytes:
    """The header and metadata table as bytes (written at offset 0 by one rank)."""
    desc = _describe(table.variables)
    rows = np.stack([np.concatenate(table.offsets), np.concatenate(table.sizes)], axis=1).astype("<i8")
    return MAGIC + struct.pack("<q", len(desc)) + desc + rows.tobytes()


def variable_from_fields(fields: dict[str, Any]) -> Variable:
    """A :class:`Variable` from its fields as JSON gives them back (lists become tuples)."""
    kw: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return Variable(**kw)


def read_table(path: str | Path) -> ChunkTable:
    """Read the header and metadata table of a file (no MPI)."""
    with open(path, "rb") as fh:
        if fh.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path} is not a chunked file written by repro.pario")
        (n,) = struct.unpack("<q", fh.read(8))
        variables = [variable_from_fields(d) for d in json.loads(fh.read(n))]
        total = sum(v.num_chunks for v in variables)
        rows = np.frombuffer(fh.read(16 * total), dtype="<i8").reshape(total, 2)
    cuts = np.cumsum([0] + [v.num_chunks for v in variables])
    return ChunkTable(variables=tuple(variables), offsets=tuple(rows[a:b, 0] for a, b in zip(cuts[:-1], cuts[1:])),
                      sizes=tuple(rows[a:b, 1] for a, b in zip(cuts[:-1], cuts[1:])))


def read_variable(path: str | Path, name: str, slab: Slab | None = None) -> np.ndarray:
    """Independent reader: read and decode the chunks a hyperslab touches (whole variable by default)."""
    table = read_table(path)
    idx = [v.name for v in table.variables].index(name)
    var = table.variables[idx]
    slab = slab or Slab(start=(0, 0), count=var.shape)
    out = np.empty(slab.count, dtype=var.dtype)
    with open(path, "rb") as fh:
        for c in var.chunks_of(slab):
            cs = var.chunk_slab(c)
            fh.seek(int(table.offsets[idx][c]))
            chunk = var.decode(fh.read(int(table.sizes[idx][c])), cs)
            part = slab.intersect(cs)
            if part is not None:
                out[part.index(slab.start)] = chunk[part.index(cs.start)]
    return out


def block_cyclic_slabs(var: Variable, rank: int, grid: tuple[int, int], tile: tuple[int, int]) -> list[Slab]:
    """Rank ``rank``'s tiles of ``var`` when tiles of shape ``tile`` are dealt over a ``pr x pc`` grid."""
    pr, pc = grid
    me_r, me_c = divmod(rank, pc)
    out = []
    for i in range(me_r, -(-var.shape[0] // tile[0]), pr):
        for j in range(me_c, -(-var.shape[1] // tile[1]), pc):
            r0, c0 = i * tile[0], j * tile[1]
            out.append(Slab(start=(r0, c0), count=(min(tile[0], var.shape[0] - r0), min(tile[1], var.shape[1] - c0))))
    return out


def synthetic_field(var: Variable, seed: int, noise: float = 0.05) -> np.ndarray:
    """A smooth field with a little noise, quantised to 1/256, so zlib compresses it a few times."""
    rng = np.random.default_rng(seed)
    r = np.linspace(0, 4 * np.pi, var.shape[0])[:, None]
    c = np.linspace(0, 4 * np.pi, var.shape[1])[None, :]
    phase = rng.uniform(0, 2 * np.pi, 2)
    field = np.sin(r + phase[0]) * np.cos(c + phase[1]) + noise * rng.standard_normal(var.shape)
    return (np.round(field * 256) / 256).astype(var.dtype)
