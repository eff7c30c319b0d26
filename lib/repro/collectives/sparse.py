"""Mixed dense/sparse allreduce (chapter ``sparse-allreduce``).

A :class:`Segment` holds the values of one index range ``[lo, hi)`` either
*dense* (every value) or *sparse* (sorted ``(index, value)`` pairs).  Its wire
size is a 4-byte item count plus the payload, and the format follows one rule
everywhere: a segment is stored dense iff ``nnz * (index_bytes + value_bytes)
>= length * value_bytes`` (density >= 1/2 with 4-byte indices and values).
Every split, concatenation and sum re-applies the rule, so a sparse vector
turns dense by itself as reductions fill it in (after reducing ``q`` random
vectors of density ``d`` the expected density is ``1 - (1-d)^q``).

Algorithms (:func:`allreduce`), written per rank against a small
communicator interface (:class:`MPIComm` over mpi4py, :class:`ThreadComm` for
all ranks in one process) that logs the bytes of every message per step:

* ``sparse_ring`` / ``dense_ring``: ring reduce-scatter over ``P`` index
  ranges, then ring allgather;
* ``sparse_ring_ring`` / ``dense_ring_ring`` (topology-aware, ``k`` ranks per
  node): intra-node ring reduce-scatter over ``k`` ranges, inter-node ring
  reduce-scatter and allgather among ranks of the same local index, intra-node
  ring allgather;
* ``sparse_rdb``: recursive doubling exchanging whole streams (SparCML's
  SSAR_Rec_Dbl; ``P`` a power of two);
* ``sparse_split_ag``: every rank sends index range ``j`` to rank ``j``
  (pairwise all-to-all), reduces its range, then ring allgather (SparCML's
  SSAR_Split_allgather).

The dense variants run the same code with the format forced to dense.
Reconstructed from the spec's description of the authors' C code.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

INDEX_BYTES = 4
VALUE_BYTES = 4
HEADER_BYTES = 4
DTYPE = np.int32

ALGORITHMS = ("dense_ring", "dense_ring_ring", "sparse_ring", "sparse_ring_ring", "sparse_rdb", "sparse_split_ag")


def prefers_dense(nnz: int, length: int) -> bool:
    """The format rule: dense iff ``nnz * (idx + val bytes) >= length * val bytes``."""
    return nnz * (INDEX_BYTES + VALUE_BYTES) >= length * VALUE_BYTES


@dataclass(kw_only=True)
class Segment:
    """Values of the index range ``[lo, hi)`` in dense or sparse form.

    Attributes
    ----------
    lo, hi:
        The range.
    dense:
        ``hi - lo`` values, or ``None`` when sparse.
    idx, val:
        Sorted absolute indices and their values when sparse.
    """

    lo: int
    hi: int
    dense: np.ndarray | None = None
    idx: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    val: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=DTYPE))

    @property
    def length(self) -> int:
        """Number of indices covered."""
        return self.hi - self.lo

    @property
    def is_dense(self) -> bool:
        """True when stored dense."""
        return self.dense is not None

    @property
    def nnz(self) -> int:
        """Stored non-zeros (a dense segment counts its non-zero values)."""
        return int(np.count_nonzero(self.dense)) if self.dense is not None else int(self.idx.size)

    def nbytes(self) -> int:
        """Bytes on the wire: item-count header plus payload."""
        if self.dense is not None:
            return HEADER_BYTES + self.length * VALUE_BYTES
        return HEADER_BYTES + int(self.idx.size) * (INDEX_BYTES + VALUE_BYTES)

    def to_dense(self) -> np.ndarray:
        """The values as a dense array of ``hi - lo`` elements."""
        if self.dense is not None:
            return self.dense.copy()
        out = np.zeros(self.length, dtype=DTYPE)
        out[self.idx - self.lo] = self.val
        return out


def from_pairs(lo: int, hi: int, idx: np.ndarray, val: np.ndarray, force_dense: bool = False) -> Segment:
    """A segment from sorted unique indices and values, in the format the rule picks."""
    if hi < lo:
        raise ValueError(f"segment range [{lo}, {hi}) is empty-reversed")
    keep = val != 0
    idx, val = np.asarray(idx, dtype=np.int64)[keep], np.asarray(val, dtype=DTYPE)[keep]
    if force_dense or prefers_dense(idx.size, hi - lo):
        dense = np.zeros(hi - lo, dtype=DTYPE)
        dense[idx - lo] = val
        return Segment(lo=lo, hi=hi, dense=dense)
    return Segment(lo=lo, hi=hi, idx=idx, val=val)


def from_dense(lo: int, values: np.ndarray, force_dense: bool = False) -> Segment:
    """A segment from a dense array starting at index ``lo``."""
    values = np.asarray(values, dtype=DTYPE)
    nz = np.nonzero(values)[0]
    return from_pairs(lo, lo + values.size, nz + lo, values[nz], force_dense)


def _pairs(seg: Segment) -> tuple[np.ndarray, np.ndarray]:
    if seg.dense is not None:
        nz = np.nonzero(seg.dense)[0]
        return nz + seg.lo, seg.dense[nz]
    return seg.idx, seg.val


def split(seg: Segment, bounds: Sequence[int], force_dense: bool = False) -> list[Segment]:
    """Cut ``seg`` at the absolute ``bounds`` (``lo = b0 < b1 < ... < bq = hi``) into ``q`` segments."""
    if bounds[0] != seg.lo or bounds[-1] != seg.hi:
        raise ValueError(f"bounds {bounds[0]}..{bounds[-1]} must span the segment {seg.lo}..{seg.hi}")
    out = []
    if seg.dense is not None:
        for a, b in zip(bounds[:-1], bounds[1:]):
            out.append(from_dense(a, seg.dense[a - seg.lo:b - seg.lo], force_dense))
        return out
    cut = np.searchsorted(seg.idx, bounds)
    for (a, b), (i, j) in zip(zip(bounds[:-1], bounds[1:]), zip(cut[:-1], cut[1:])):
        out.append(from_pairs(a, b, seg.idx[i:j], seg.val[i:j], force_dense))
    return out


def concat(segs: Sequence[Segment], force_dense: bool = False) -> Segment:
    """Join adjacent segments into one, re-applying the format rule."""
    for a, b in zip(segs[:-1], segs[1:]):
        if a.hi != b.lo:
            raise ValueError("segments to concatenate must be adjacent and in order")
    pairs = [_pairs(s) for s in segs]
    idx = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    val = np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0, dtype=DTYPE)
    return from_pairs(segs[0].lo, segs[-1].hi, idx, val, force_dense)


def add(a: Segment, b: Segment, force_dense: bool = False) -> Segment:
    """Element-wise sum of two segments of the same range (dense+dense, scatter-add, or sorted merge)."""
    if (a.lo, a.hi) != (b.lo, b.hi):
        raise ValueError(f"cannot add segments [{a.lo},{a.hi}) and [{b.lo},{b.hi})")
    if a.dense is not None or b.dense is not None or force_dense:
        return from_dense(a.lo, a.to_dense() + b.to_dense(), force_dense)
    idx = np.concatenate([a.idx, b.idx])
    val = np.concatenate([a.val, b.val])
    uniq, inv = np.unique(idx, return_inverse=True)
    summed = np.zeros(uniq.size, dtype=DTYPE)
    np.add.at(summed, inv, val)
    return from_pairs(a.lo, a.hi, uniq, summed, force_dense)


def random_sparse_vector(dim: int, density: float, seed: int, rank: int) -> Segment:
    """Rank ``rank``'s gradient: ``round(dim * density)`` distinct uniform indices, ints in ``[-100, 100)``.

    Zero draws are replaced by 1 so the stated density is exact.
    """
    if dim < 0:
        raise ValueError(f"dim must be >= 0, got {dim}")
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"density must be in [0, 1], got {density}")
    rng = np.random.default_rng([seed, rank, dim])
    cnt = int(round(dim * density))
    idx = np.sort(rng.choice(dim, size=cnt, replace=False)) if cnt else np.zeros(0, dtype=np.int64)
    val = rng.integers(-100, 100, size=cnt).astype(DTYPE)
    val[val == 0] = 1
    return from_pairs(0, dim, idx, val)


# --------------------------------------------------------------- communicators
class LoggingComm:
    """Base of the communicators: rank, size and a log of every message sent.

    ``log`` holds ``(step, dst, bytes)`` per message; ``step`` counts this rank's
    communication rounds (every rank of an algorithm goes through the same rounds).
    """

    rank: int
    size: int

    def __init__(self) -> None:
        self.log: list[tuple[int, int, int]] = []
        self.step = 0

    @property
    def bytes_sent(self) -> int:
        """Total bytes this rank sent."""
        return sum(b for _, _, b in self.log)

    @property
    def messages(self) -> int:
        """Messages this rank sent."""
        return len(self.log)

    def _exchange(self, obj: Any, dest: int | None, source: int | None) -> Any:
        raise NotImplementedError

    def sendrecv(self, seg: Segment | None, dest: int | None, source: int | None) -> Segment | None:
        """One round: send ``seg`` to ``dest`` (if any) and receive from ``source`` (if any)."""
        if dest is not None and seg is not None:
            self.log.append((self.step, dest, seg.nbytes()))
        got = self._exchange(seg, dest, source)
        self.step += 1
        return got

    def swap(self, seg: Segment, dest: int, source: int) -> Segment:
        """One round with both partners: send ``seg`` to ``dest`` and return what ``source`` sent."""
        got = self.sendrecv(seg, dest, source)
        if got is None:
            raise RuntimeError(f"rank {self.rank} received nothing from rank {source} in step {self.step - 1}")
        return got


class MPIComm(LoggingComm):
    """:class:`LoggingComm` over an ``mpi4py`` communicator (segments are pickled)."""

    def __init__(self, comm: Any) -> None:
        super().__init__()
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()

    def _exchange(self, obj: Any, dest: int | None, source: int | None) -> Any:
        from mpi4py import MPI

        tag = 900 + self.step % 10000
        dst = MPI.PROC_NULL if dest is None else dest
        src = MPI.PROC_NULL if source is None else source
        return self.comm.sendrecv(obj, dest=dst, sendtag=tag, source=src, recvtag=tag)


class _Mailboxes:
    def __init__(self, p: int) -> None:
        self.q: dict[tuple[int, int], queue.Queue[Any]] = {(s, d): queue.Queue() for s in range(p) for d in range(p)
                                                            if s != d}


class ThreadComm(LoggingComm):
    """All ranks in one process, one thread each (for tests and dry runs)."""

    def __init__(self, rank: int, size: int, boxes: _Mailboxes) -> None:
        super().__init__()
        self.rank, self.size, self.boxes = rank, size, boxes

    def _exchange(self, obj: Any, dest: int | None, source: int | None) -> Any:
        if dest is not None:
            self.boxes.q[(self.rank, dest)].put(obj)
        return self.boxes.q[(source, self.rank)].get(timeout=120) if source is not None else None


def run_threads(p: int, fn: Callable[[ThreadComm], Any]) -> tuple[list[Any], list[ThreadComm]]:
    """Run ``fn(comm)`` for ``p`` ranks in threads; return results and communicators (with logs)."""
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    boxes = _Mailboxes(p)
    comms = [ThreadComm(r, p, boxes) for r in range(p)]
    out: list[Any] = [None] * p
    errors: list[BaseException] = []

    def body(r: int) -> None:
        try:
            out[r] = fn(comms[r])
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(p)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out, comms


# ------------------------------------------------------------------ algorithms
def _bounds(lo: int, hi: int, parts: int) -> list[int]:
    q, r = divmod(hi - lo, parts)
    b = [lo]
    for i in range(parts):
        b.append(b[-1] + q + (1 if i < r else 0))
    return b


def ring_reduce_scatter(comm: LoggingComm, group: Sequence[int], seg: Segment,
                        force_dense: bool) -> tuple[list[Segment], int]:
    """Ring reduce-scatter of ``seg`` among ``group`` (global ranks, in ring order).

    Returns the list of parts and the index of the part this rank holds fully reduced.
    """
    q = len(group)
    pos = group.index(comm.rank)
    parts = split(seg, _bounds(seg.lo, seg.hi, q), force_dense)
    nxt, prv = group[(pos + 1) % q], group[(pos - 1) % q]
    for r in range(q - 1):
        send_i, recv_i = (pos - r) % q, (pos - r - 1) % q
        got = comm.swap(parts[send_i], nxt, prv)
        parts[recv_i] = add(parts[recv_i], got, force_dense)
    return parts, (pos + 1) % q


def ring_allgather(comm: LoggingComm, group: Sequence[int], parts: list[Segment], mine: int) -> list[Segment]:
    """Ring allgather: part ``mine`` of every rank is circulated until all hold every part."""
    q = len(group)
    pos = group.index(comm.rank)
    nxt, prv = group[(pos + 1) % q], group[(pos - 1) % q]
    for r in range(q - 1):
        send_i, recv_i = (mine - r) % q, (mine - r - 1) % q
        parts[recv_i] = comm.swap(parts[send_i], nxt, prv)
    return parts


def _ring(comm: LoggingComm, x: Segment, force_dense: bool) -> Segment:
    group = list(range(comm.size))
    parts, mine = ring_reduce_scatter(comm, group, x, force_dense)
    return concat(ring_allgather(comm, group, parts, mine), force_dense)


def _ring_ring(comm: LoggingComm, x: Segment, k: int, force_dense: bool) -> Segment:
    p = comm.size
    if k < 1 or p % k:
        raise ValueError(f"k (ranks per node) must divide the number of ranks {p}, got k={k}")
    node, local = divmod(comm.rank, k)
    intra = [node * k + i for i in range(k)]
    inter = [m * k + local for m in range(p // k)]
    parts, mine = ring_reduce_scatter(comm, intra, x, force_dense)
    sub, sub_mine = ring_reduce_scatter(comm, inter, parts[mine], force_dense)
    sub = ring_allgather(comm, inter, sub, sub_mine)
    parts[mine] = concat(sub, force_dense)
    return concat(ring_allgather(comm, intra, parts, mine), force_dense)


def _rdb(comm: LoggingComm, x: Segment) -> Segment:
    p = comm.size
    if p & (p - 1):
        raise ValueError(f"sparse_rdb needs a power-of-two number of ranks, got {p}")
    acc = x
    mask = 1
    while mask < p:
        partner = comm.rank ^ mask
        got = comm.swap(acc, partner, partner)
        # sum in rank order so every rank holds the identical result
        acc = add(acc, got) if comm.rank < partner else add(got, acc)
        mask <<= 1
    return acc


def _split_allgather(comm: LoggingComm, x: Segment) -> Segment:
    p, me = comm.size, comm.rank
    parts = split(x, _bounds(x.lo, x.hi, p))
    mine = parts[me]
    for s in range(1, p):
        dst, src = (me + s) % p, (me - s) % p
        got = comm.swap(parts[dst], dst, src)
        mine = add(mine, got)
    parts[me] = mine
    group = list(range(p))
    return concat(ring_allgather(comm, group, parts, me))


def allreduce(algorithm: str, comm: LoggingComm, x: Segment, k: int = 1) -> Segment:
    """Sum ``x`` over all ranks with ``algorithm`` (one of :data:`ALGORITHMS`).

    Parameters
    ----------
    algorithm:
        Algorithm name.
    comm:
        This rank's communicator (its log records every message's bytes).
    x:
        This rank's vector (a segment covering ``[0, dim)``, same on every rank).
    k:
        Ranks per node for the ``*_ring_ring`` algorithms.

    Returns
    -------
    Segment
        The sum, in the format the rule picks.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if comm.size == 1:
        return from_pairs(x.lo, x.hi, *_pairs(x), force_dense=algorithm.startswith("dense"))
    if algorithm == "dense_ring":
        return _ring(comm, x, True)
    if algorithm == "sparse_ring":
        return _ring(comm, x, False)
    if algorithm == "dense_ring_ring":
        return _ring_ring(comm, x, k, True)
    if algorithm == "sparse_ring_ring":
        return _ring_ring(comm, x, k, False)
    if algorithm == "sparse_rdb":
        return _rdb(comm, x)
    return _split_allgather(comm, x)


def dry_run(algorithm: str, p: int, dim: int, density: float, seed: int,
            k: int = 1) -> tuple[list[Segment], list[list[tuple[int, int, int]]]]:
    """Run ``algorithm`` on ``p`` in-process ranks with random sparse inputs.

    Returns every rank's result and every rank's message log ``(step, dst, bytes)``.
    """
    xs = [random_sparse_vector(dim, density, seed, r) for r in range(p)]
    outs, comms = run_threads(p, lambda c: allreduce(algorithm, c, xs[c.rank], k=k))
    return outs, [c.log for c in comms]
