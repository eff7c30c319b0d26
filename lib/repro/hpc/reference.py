"""Pure-numpy reference executor: runs a schedule for all ``p`` ranks in one process.

Used by the unit tests (fast, no MPI) and as the oracle that the other
executors must agree with.  Block slicing is along axis 0, so inputs may carry
extra trailing axes (e.g. one-hot provenance vectors).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from repro.hpc.ir import COPY, Schedule

Observer = Callable[[str, int, int, tuple[int, ...], np.ndarray], None]
"""``observer(event, rank, step, blocks, data)``; ``event`` is ``"recv"`` or ``"copy"``."""


class BlockIndex:
    """Element ranges of block lists of one schedule, merged and cached.

    ``ranges(blocks)`` merges adjacent blocks into one ``(lo, hi)`` range, so
    a run of consecutive blocks is a single slice.
    """

    def __init__(self, schedule: Schedule) -> None:
        self.offsets = [int(x) for x in schedule.offsets]
        self._cache: dict[tuple[int, ...], list[tuple[int, int]]] = {}

    def ranges(self, blocks: tuple[int, ...]) -> list[tuple[int, int]]:
        """Merged ``(lo, hi)`` element ranges of ``blocks``, in order."""
        got = self._cache.get(blocks)
        if got is None:
            got = []
            for b in blocks:
                lo, hi = self.offsets[b], self.offsets[b + 1]
                if got and got[-1][1] == lo:
                    got[-1] = (got[-1][0], hi)
                else:
                    got.append((lo, hi))
            self._cache[blocks] = got
        return got

    def gather(self, buf: np.ndarray, blocks: tuple[int, ...]) -> np.ndarray:
        """Concatenate ``blocks`` of ``buf`` into a new array."""
        rng = self.ranges(blocks)
        if len(rng) == 1:
            return buf[rng[0][0]:rng[0][1]].copy()
        if not rng:
            return buf[:0].copy()
        return np.concatenate([buf[lo:hi] for lo, hi in rng])

    def scatter(self, buf: np.ndarray, blocks: tuple[int, ...], data: np.ndarray, op: str = COPY) -> None:
        """Store ``data`` into ``blocks`` of ``buf`` (overwrite, or add for ``"sum"``)."""
        pos = 0
        for lo, hi in self.ranges(blocks):
            part = data[pos:pos + hi - lo]
            if op == COPY:
                buf[lo:hi] = part
            else:
                buf[lo:hi] += part
            pos += hi - lo
        if pos != len(data):
            raise ValueError(f"message of {len(data)} elements stored into {pos}")


def execute_reference(schedule: Schedule, inputs: Sequence[np.ndarray],
                      observer: Observer | None = None) -> list[np.ndarray]:
    """Run ``schedule`` on the given per-rank inputs.

    Parameters
    ----------
    schedule:
        The schedule (``schedule.p`` ranks).
    inputs:
        One array per rank, of length ``schedule.input_length`` along axis 0.
    observer:
        Optional callback, called for every received message (after it is
        applied: ``event="recv"``) and every local copy (``"copy"``), with the
        destination blocks and the data.

    Returns
    -------
    list[numpy.ndarray]
        Each rank's output (``schedule.output_length`` along axis 0).
    """
    p, idx = schedule.p, BlockIndex(schedule)
    if len(inputs) != p:
        raise ValueError(f"expected {p} inputs, got {len(inputs)}")
    bufs = []
    for x in inputs:
        x = np.asarray(x)
        if x.shape[0] != schedule.input_length:
            raise ValueError(f"input length {x.shape[0]} != {schedule.input_length}")
        buf = np.zeros((schedule.work_length,) + x.shape[1:], dtype=x.dtype)
        idx.scatter(buf, schedule.input_blocks, x)
        bufs.append(buf)
    for s, row in enumerate(schedule.steps):
        for st in row:
            for cp in st.copies:
                data = idx.gather(bufs[st.rank], cp.src)
                idx.scatter(bufs[st.rank], cp.dst, data)
                if observer is not None:
                    observer("copy", st.rank, s, cp.dst, data)
        # Snapshot every send before any receive lands.
        mailbox: dict[tuple[int, int], list[np.ndarray]] = {}
        for st in row:
            for sd in st.sends:
                mailbox.setdefault((st.rank, sd.peer), []).append(idx.gather(bufs[st.rank], sd.blocks))
        for st in row:
            for rv in st.recvs:
                data = mailbox[(rv.peer, st.rank)].pop(0)
                idx.scatter(bufs[st.rank], rv.blocks, data, rv.op)
                if observer is not None:
                    observer("recv", st.rank, s, rv.blocks, data)
    return [idx.gather(b, schedule.output_blocks) for b in bufs]


def expected_output(kind: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """What the collective must return on each rank (the oracle).

    ``allreduce``: the element-wise sum over ranks.  ``alltoall``: block ``i``
    of rank ``j``'s output is block ``j`` of rank ``i``'s input.
    """
    p = len(inputs)
    if kind == "allreduce":
        total = np.sum(np.stack(inputs), axis=0)
        return [total.copy() for _ in range(p)]
    if kind == "alltoall":
        blocks = [np.split(np.asarray(x), p) if p else [] for x in inputs]
        return [np.concatenate([blocks[i][j] for i in range(p)]) for j in range(p)]
    raise ValueError(f"unknown collective kind {kind!r}")
