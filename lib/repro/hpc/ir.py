"""The schedule IR: per rank, per step, the sends, receives and local copies.

A collective is written once as a :class:`Schedule` and then interpreted by
several executors (pure numpy, mpi4py, SimGrid) and by the alpha-beta cost
evaluator.

Memory model
------------
Every rank owns one *work buffer* of ``sum(block_lengths)`` elements, cut into
numbered blocks (the same cut on every rank; lengths may differ and may be
zero).  The collective's input is scattered into ``input_blocks`` (in order)
before step 0 and its output is gathered from ``output_blocks`` after the last
step.  For an allreduce both are the whole vector; an all-to-all has separate
input, output and scratch regions.

Step semantics (identical in every executor)
--------------------------------------------
1. the rank's local :class:`Copy` operations run, in order;
2. every :class:`Send` packs its blocks (a snapshot, taken after the copies);
3. every :class:`Recv` lands and is applied in order: ``copy`` overwrites its
   blocks, ``sum`` adds into them.

Messages between the same pair of ranks in one step are matched in the order
in which they are listed at the sender and at the receiver (MPI's
non-overtaking rule gives the same order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

import numpy as np

COPY = "copy"
SUM = "sum"


@dataclass(frozen=True, kw_only=True)
class Send:
    """Send the concatenation of ``blocks`` to rank ``peer``."""

    peer: int
    blocks: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Recv:
    """Receive a message from ``peer`` and store it into ``blocks``.

    ``op`` is ``"copy"`` (overwrite) or ``"sum"`` (element-wise add).
    """

    peer: int
    blocks: tuple[int, ...]
    op: str = COPY


@dataclass(frozen=True, kw_only=True)
class Copy:
    """Local copy of the concatenation of ``src`` into the blocks ``dst``."""

    src: tuple[int, ...]
    dst: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Step:
    """What one rank does in one step (see the module docstring)."""

    rank: int
    index: int
    copies: tuple[Copy, ...] = ()
    sends: tuple[Send, ...] = ()
    recvs: tuple[Recv, ...] = ()

    @property
    def communicates(self) -> bool:
        """True when the rank sends or receives anything in this step."""
        return bool(self.sends or self.recvs)


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A collective written as a per-rank, per-step program.

    Attributes
    ----------
    name, kind:
        Algorithm name and collective kind (``"allreduce"`` or ``"alltoall"``).
    p:
        Number of ranks.
    n:
        Elements per rank: the vector length for an allreduce, the per-destination
        block length ``m`` for an all-to-all (input and output hold ``p*m``).
    block_lengths:
        Length (elements) of every block of the work buffer.
    input_blocks, output_blocks:
        Blocks that take the input / give the output, in order.
    steps:
        ``steps[s][r]`` is rank ``r``'s :class:`Step` number ``s``.
    params:
        Algorithm parameters (node size, grid shape, segments, ...).
    """

    name: str
    kind: str
    p: int
    n: int
    block_lengths: tuple[int, ...]
    input_blocks: tuple[int, ...]
    output_blocks: tuple[int, ...]
    steps: tuple[tuple[Step, ...], ...]
    params: Mapping[str, object] = field(default_factory=dict)

    @property
    def offsets(self) -> np.ndarray:
        """Start offset of every block, plus the total length at the end."""
        return np.concatenate([[0], np.cumsum(self.block_lengths, dtype=np.int64)])

    @property
    def work_length(self) -> int:
        """Elements of the per-rank work buffer."""
        return int(sum(self.block_lengths))

    @property
    def input_length(self) -> int:
        """Elements of the per-rank input."""
        return int(sum(self.block_lengths[b] for b in self.input_blocks))

    @property
    def output_length(self) -> int:
        """Elements of the per-rank output."""
        return int(sum(self.block_lengths[b] for b in self.output_blocks))

    @property
    def num_steps(self) -> int:
        """All steps, including those with only local copies."""
        return len(self.steps)

    def blocks_length(self, blocks: Sequence[int]) -> int:
        """Total elements of ``blocks``."""
        return int(sum(self.block_lengths[b] for b in blocks))

    def comm_steps(self) -> list[int]:
        """Indices of the steps in which at least one message moves."""
        return [s for s, row in enumerate(self.steps) if any(st.communicates for st in row)]


@dataclass(frozen=True, kw_only=True)
class Message:
    """One point-to-point message of a schedule (derived, for accounting)."""

    step: int
    src: int
    dst: int
    elements: int
    op: str


def split_lengths(n: int, parts: int) -> list[int]:
    """Split ``n`` elements into ``parts`` lengths that differ by at most one.

    The first ``n % parts`` parts get the extra element (MPICH's convention).

    Parameters
    ----------
    n:
        Total length, ``>= 0``.
    parts:
        Number of parts, ``>= 1``.

    Returns
    -------
    list[int]
        ``parts`` non-negative lengths summing to ``n``.
    """
    if parts < 1 or n < 0:
        raise ValueError(f"cannot split {n} elements into {parts} parts")
    q, r = divmod(n, parts)
    return [q + 1 if i < r else q for i in range(parts)]


def messages(schedule: Schedule) -> Iterator[Message]:
    """Yield every message of ``schedule`` (from the receivers' view)."""
    for s, row in enumerate(schedule.steps):
        for st in row:
            for rv in st.recvs:
                yield Message(step=s, src=rv.peer, dst=st.rank, elements=schedule.blocks_length(rv.blocks), op=rv.op)


def link_bytes(schedule: Schedule, itemsize: int = 1) -> list[dict[tuple[int, int], int]]:
    """Bytes carried per directed rank pair, per step.

    Parameters
    ----------
    schedule:
        The schedule.
    itemsize:
        Bytes per element.

    Returns
    -------
    list[dict]
        ``out[s][(src, dst)]`` = bytes sent from ``src`` to ``dst`` in step ``s``.
    """
    out: list[dict[tuple[int, int], int]] = [dict() for _ in schedule.steps]
    for msg in messages(schedule):
        key = (msg.src, msg.dst)
        out[msg.step][key] = out[msg.step].get(key, 0) + msg.elements * itemsize
    return out


def total_link_bytes(schedule: Schedule, itemsize: int = 1) -> dict[tuple[int, int], int]:
    """Bytes carried per directed rank pair over the whole schedule."""
    tot: dict[tuple[int, int], int] = {}
    for step in link_bytes(schedule, itemsize):
        for key, b in step.items():
            tot[key] = tot.get(key, 0) + b
    return tot


def validate(schedule: Schedule) -> None:
    """Check that a schedule is well formed; raise ``ValueError`` if not.

    Checks: step table shape and rank numbering, block ids in range, every send
    matched (same step, same order) by a receive of the same length, copy
    lengths equal, and no two receives of one step writing the same block
    unless all of them sum.
    """
    p, lens = schedule.p, schedule.block_lengths
    nb = len(lens)
    if any(length < 0 for length in lens):
        raise ValueError("negative block length")

    def length(ids: Sequence[int], what: str) -> int:
        if ids and (min(ids) < 0 or max(ids) >= nb):
            raise ValueError(f"{what}: block id out of range 0..{nb - 1} in {tuple(ids)}")
        return sum(lens[b] for b in ids)

    length(schedule.input_blocks, "input_blocks")
    length(schedule.output_blocks, "output_blocks")
    for s, row in enumerate(schedule.steps):
        if len(row) != p or any(st.rank != r or st.index != s for r, st in enumerate(row)):
            raise ValueError(f"step {s}: expected one Step per rank 0..{p - 1} in order")
        sent: dict[tuple[int, int], list[int]] = {}
        got: dict[tuple[int, int], list[int]] = {}
        for st in row:
            where = f"step {s} rank {st.rank}"
            for cp in st.copies:
                if length(cp.src, where + " copy") != length(cp.dst, where + " copy"):
                    raise ValueError(f"{where}: copy lengths differ")
            for sd in st.sends:
                if not 0 <= sd.peer < p or sd.peer == st.rank:
                    raise ValueError(f"{where}: bad send peer {sd.peer}")
                sent.setdefault((st.rank, sd.peer), []).append(length(sd.blocks, where + " send"))
            copied: set[int] = set()
            summed: set[int] = set()
            for rv in st.recvs:
                if rv.op not in (COPY, SUM):
                    raise ValueError(f"{where}: unknown op {rv.op!r}")
                if not 0 <= rv.peer < p or rv.peer == st.rank:
                    raise ValueError(f"{where}: bad recv peer {rv.peer}")
                got.setdefault((rv.peer, st.rank), []).append(length(rv.blocks, where + " recv"))
                blocks = set(rv.blocks)
                if len(blocks) != len(rv.blocks) and rv.op == COPY or blocks & copied or (
                        rv.op == COPY and blocks & summed):
                    raise ValueError(f"{where}: a block is written twice")
                (copied if rv.op == COPY else summed).update(blocks)
        if sent != got:
            raise ValueError(f"step {s}: sends and receives do not match: {sent} vs {got}")
