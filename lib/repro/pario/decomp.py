"""Decompositions of one shared file over ``p`` ranks, as per-rank request lists.

A rank's part of a collective write is a :class:`Requests`: sorted,
non-overlapping ``(offset, length)`` pairs in bytes of file.  A
:class:`Decomposition` holds one :class:`Requests` per rank; the generators
here cut a file of ``file_size`` bytes without overlap between ranks (every
byte has exactly one writer), so any correct collective write of the same
requests produces the same file.

Generators
----------
:func:`block`
    Contiguous slabs of uneven size (the first ``file_size % p`` ranks get
    one more element).
:func:`block_cyclic`
    Blocks of ``block`` elements dealt round-robin to the ranks.
:func:`irregular_runs`
    E3SM-like irregular maps: the file is cut into many short runs of random
    length and every run is given to a random rank, with uneven rank weights,
    so each rank holds many short noncontiguous pieces.
:func:`subarray_2d_block_cyclic`
    A 2-D row-major array cut into ``pr x pc`` block-cyclic tiles (the pattern
    of a subarray file view), flattened to byte runs.

:func:`payload` gives the bytes a rank writes: byte ``i`` of the file holds a
fixed function of ``i``, so the expected file is known without any MPI.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Requests:
    """One rank's requests: byte offsets and lengths, sorted and non-overlapping.

    Attributes
    ----------
    offsets, lengths:
        ``int64`` arrays of equal size; ``lengths > 0``; pieces do not overlap.
    """

    offsets: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        if self.offsets.shape != self.lengths.shape or self.offsets.ndim != 1:
            raise ValueError("offsets and lengths must be 1-D arrays of equal size")
        if self.lengths.size and (self.lengths.min() <= 0 or self.offsets.min() < 0):
            raise ValueError("lengths must be > 0 and offsets >= 0")
        if np.any(self.offsets[1:] < self.offsets[:-1] + self.lengths[:-1]):
            raise ValueError("requests must be sorted by offset and must not overlap")

    @classmethod
    def from_pairs(cls, offsets: np.ndarray | list[int], lengths: np.ndarray | list[int]) -> "Requests":
        """Build from any pairs: drop empty pieces, sort by offset, check no overlap."""
        off = np.asarray(offsets, dtype=np.int64)
        ln = np.asarray(lengths, dtype=np.int64)
        keep = ln > 0
        off, ln = off[keep], ln[keep]
        order = np.argsort(off, kind="stable")
        return cls(offsets=off[order], lengths=ln[order])

    @property
    def count(self) -> int:
        """Number of pieces."""
        return int(self.offsets.size)

    @property
    def nbytes(self) -> int:
        """Total bytes requested."""
        return int(self.lengths.sum())

    def coalesced(self) -> "Requests":
        """The same bytes with adjacent pieces merged."""
        if self.count <= 1:
            return self
        ends = self.offsets + self.lengths
        starts_new = np.concatenate([[True], self.offsets[1:] != ends[:-1]])
        first = np.flatnonzero(starts_new)
        last = np.concatenate([first[1:], [self.count]]) - 1
        return Requests(offsets=self.offsets[first], lengths=ends[last] - self.offsets[first])


@dataclass(frozen=True, kw_only=True)
class Decomposition:
    """Requests of every rank on one file.

    Attributes
    ----------
    name:
        The generator and its parameters, for labels.
    file_size:
        Bytes of the file.
    ranks:
        ``ranks[r]`` is rank ``r``'s :class:`Requests`.
    """

    name: str
    file_size: int
    ranks: tuple[Requests, ...]

    @property
    def p(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    def bytes_per_rank(self) -> list[int]:
        """Bytes each rank writes."""
        return [r.nbytes for r in self.ranks]

    def pieces_per_rank(self) -> list[int]:
        """Noncontiguous pieces of each rank (after merging adjacent ones)."""
        return [r.coalesced().count for r in self.ranks]


def _check(file_size: int, p: int) -> None:
    if p < 1:
        raise ValueError(f"need at least one rank, got p={p}")
    if file_size < 0:
        raise ValueError(f"file_size must be >= 0, got {file_size}")


def _from_owner(name: str, starts: np.ndarray, lengths: np.ndarray, owner: np.ndarray, p: int,
                file_size: int) -> Decomposition:
    """Group runs ``(starts, lengths)`` by owning rank."""
    ranks = tuple(Requests.from_pairs(starts[owner == r], lengths[owner == r]).coalesced() for r in range(p))
    return Decomposition(name=name, file_size=file_size, ranks=ranks)


def block(file_size: int, p: int, itemsize: int = 1) -> Decomposition:
    """Contiguous slabs: ``file_size / itemsize`` elements split as evenly as possible.

    Parameters
    ----------
    file_size:
        Bytes of the file (a multiple of ``itemsize``).
    p:
        Number of ranks.
    itemsize:
        Bytes per element; slab edges fall on element boundaries.
    """
    _check(file_size, p)
    n = file_size // itemsize
    q, rem = divmod(n, p)
    counts = np.array([q + 1 if r < rem else q for r in range(p)], dtype=np.int64) * itemsize
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return _from_owner(f"block(p={p})", starts, counts, np.arange(p), p, file_size)


def block_cyclic(file_size: int, p: int, block_elems: int, itemsize: int = 1) -> Decomposition:
    """Blocks of ``block_elems`` elements dealt round-robin (the last block may be short).

    Parameters
    ----------
    file_size:
        Bytes of the file.
    p:
        Number of ranks.
    block_elems:
        Elements per block, ``>= 1``.
    itemsize:
        Bytes per element.
    """
    _check(file_size, p)
    if block_elems < 1:
        raise ValueError(f"block_elems must be >= 1, got {block_elems}")
    bsize = block_elems * itemsize
    starts = np.arange(0, file_size, bsize, dtype=np.int64)
    lengths = np.minimum(bsize, file_size - starts)
    owner = np.arange(starts.size) % p
    return _from_owner(f"block-cyclic(p={p}, b={block_elems})", starts, lengths, owner, p, file_size)


@dataclass(frozen=True, kw_only=True)
class RunTable:
    """Runs of a file and their owners, before grouping by rank.

    Attributes
    ----------
    starts, lengths:
        Byte offset and length of every run (sorted, covering the file).
    owner:
        Owning rank of every run.
    p:
        Number of ranks.
    """

    starts: np.ndarray
    lengths: np.ndarray
    owner: np.ndarray
    p: int


def irregular_run_table(file_size: int, p: int, mean_run: int, seed: int, itemsize: int = 1,
                        skew: float = 1.0) -> RunTable:
    """The runs of :func:`irregular_runs` (see there), without grouping them by rank."""
    _check(file_size, p)
    if mean_run < 1:
        raise ValueError(f"mean_run must be >= 1, got {mean_run}")
    rng = np.random.default_rng(seed)
    n = file_size // itemsize
    runs = rng.geometric(1.0 / mean_run, size=n // mean_run * 2 + 8).astype(np.int64)
    bounds = np.cumsum(runs)
    while bounds[-1] < n:  # extremely unlikely: draw more runs
        bounds = np.concatenate([bounds, bounds[-1] + np.cumsum(rng.geometric(1.0 / mean_run, size=n))])
    bounds = np.concatenate([[0], bounds[bounds < n], [n]])
    weights = (np.arange(p) + 1.0) ** -skew
    weights = rng.permutation(weights / weights.sum())
    owner = rng.choice(p, size=bounds.size - 1, p=weights)
    return RunTable(starts=bounds[:-1] * itemsize, lengths=np.diff(bounds) * itemsize, owner=owner, p=p)


def irregular_runs(file_size: int, p: int, mean_run: int, seed: int, itemsize: int = 1,
                   skew: float = 1.0) -> Decomposition:
    """E3SM-like irregular map: many short runs, each owned by a random rank.

    Run lengths are geometric with mean ``mean_run`` elements; every run goes
    to a rank drawn with weights ``(r + 1) ** -skew`` shuffled over ranks, so
    ranks hold uneven amounts of many short noncontiguous pieces.

    Parameters
    ----------
    file_size:
        Bytes of the file.
    p:
        Number of ranks.
    mean_run:
        Mean run length in elements, ``>= 1``.
    seed:
        Seed of the map (every rank builds the same map from it).
    itemsize:
        Bytes per element.
    skew:
        0 gives equal expected shares; larger values make the shares more uneven.
    """
    t = irregular_run_table(file_size, p, mean_run, seed, itemsize, skew)
    return _from_owner(f"irregular(p={p}, run={mean_run})", t.starts, t.lengths, t.owner, p, file_size)


def subarray_2d_block_cyclic(rows: int, cols: int, pr: int, pc: int, tile: tuple[int, int],
                             itemsize: int = 1) -> Decomposition:
    """A row-major ``rows x cols`` array in ``tile``-sized tiles dealt over a ``pr x pc`` grid.

    Tile ``(i, j)`` belongs to rank ``(i % pr) * pc + (j % pc)``; each tile
    row becomes one byte run of the file (then adjacent runs are merged).

    Parameters
    ----------
    rows, cols:
        Array shape in elements.
    pr, pc:
        Process grid; ``p = pr * pc``.
    tile:
        Tile shape ``(tile_rows, tile_cols)`` in elements.
    itemsize:
        Bytes per element.
    """
    if min(rows, cols) < 0 or min(pr, pc, *tile) < 1:
        raise ValueError("rows/cols must be >= 0 and pr, pc, tile sizes >= 1")
    th, tw = tile
    r_idx = np.arange(rows)
    c_starts = np.arange(0, cols, tw)
    c_lens = np.minimum(tw, cols - c_starts)
    # one run per (row, tile column)
    rr, cc = np.meshgrid(r_idx, np.arange(c_starts.size), indexing="ij")
    starts = (rr * cols + c_starts[cc]).ravel() * itemsize
    lengths = np.broadcast_to(c_lens[cc], rr.shape).ravel() * itemsize
    owner = ((rr // th) % pr * pc + cc % pc).ravel()
    return _from_owner(f"2d-block-cyclic({rows}x{cols}, {pr}x{pc}, tile={th}x{tw})", starts,
                       lengths.astype(np.int64), owner, pr * pc, rows * cols * itemsize)


def file_pattern(offsets: np.ndarray) -> np.ndarray:
    """The byte the test pattern puts at each file offset (a fixed hash of the offset)."""
    x = offsets.astype(np.uint64)
    x = (x * np.uint64(2654435761) + np.uint64(0x9E3779B9)) >> np.uint64(7)
    return (x & np.uint64(0xFF)).astype(np.uint8)


def payload(requests: Requests) -> np.ndarray:
    """The bytes a rank writes for ``requests``: :func:`file_pattern` at every requested offset."""
    if requests.count == 0:
        return np.zeros(0, dtype=np.uint8)
    return file_pattern(expand_offsets(requests))


def expand_offsets(requests: Requests) -> np.ndarray:
    """Every requested byte offset, in request order."""
    if requests.count == 0:
        return np.zeros(0, dtype=np.int64)
    total = requests.nbytes
    starts = np.repeat(requests.offsets - np.concatenate([[0], np.cumsum(requests.lengths)[:-1]]),
                       requests.lengths)
    return starts + np.arange(total, dtype=np.int64)


def expected_file(decomp: Decomposition) -> bytes:
    """The file a correct collective write of ``decomp`` with :func:`payload` data produces."""
    return file_pattern(np.arange(decomp.file_size, dtype=np.int64)).tobytes()


@dataclass(frozen=True, kw_only=True)
class DecompSpec:
    """A decomposition by generator name and parameters, rebuilt identically on every rank.

    Attributes
    ----------
    kind:
        ``"block"``, ``"block_cyclic"``, ``"irregular"`` or ``"subarray_2d"``.
    file_size:
        Bytes of the file (for ``subarray_2d``: ``rows * cols``).
    block_elems:
        Block size of ``block_cyclic``.
    mean_run:
        Mean run length of ``irregular``.
    seed:
        Seed of ``irregular``.
    tile, grid, cols:
        ``subarray_2d``: tile shape, process grid ``(pr, pc)`` and row length.
    """

    kind: str
    file_size: int
    block_elems: int = 64
    mean_run: int = 16
    seed: int = 0
    tile: tuple[int, int] = (4, 16)
    grid: tuple[int, int] | None = None
    cols: int = 256

    def build(self, p: int) -> Decomposition:
        """The decomposition over ``p`` ranks."""
        if self.kind == "block":
            return block(self.file_size, p)
        if self.kind == "block_cyclic":
            return block_cyclic(self.file_size, p, self.block_elems)
        if self.kind == "irregular":
            return irregular_runs(self.file_size, p, self.mean_run, self.seed)
        if self.kind == "subarray_2d":
            pr, pc = self.grid if self.grid is not None else (1, p)
            if pr * pc != p:
                raise ValueError(f"grid {pr}x{pc} does not hold {p} ranks")
            return subarray_2d_block_cyclic(self.file_size // self.cols, self.cols, pr, pc, self.tile)
        raise ValueError(f"unknown decomposition kind {self.kind!r}")
