"""Building blocks for schedules: phases over a group of ranks, and composition.

A *phase* is a list of steps; each step maps a global rank to its operations
(:class:`Ops`).  Phase generators take a ``group`` (global ranks, member ``i``
is ``group[i]``) and ``chunks`` (each chunk a tuple of block ids of the work
buffer), so that one generator serves a flat collective and every level of a
hierarchical one.  Phases are composed with :func:`seq` (one after the other),
:func:`par` (side by side, step ``i`` of each merged) and :func:`par_at`
(side by side from given start steps, for pipelining), and turned into an
immutable :class:`~repro.hpc.ir.Schedule` by :func:`finalize`.

The algorithms are the textbook ones (Thakur, Rabenseifner & Gropp 2005;
Rabenseifner 2004; Bruck et al. 1997), written here from their descriptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from repro.hpc.ir import COPY, SUM, Copy, Recv, Schedule, Send, Step, validate

Chunk = tuple[int, ...]


@dataclass(kw_only=True)
class Ops:
    """Mutable operations of one rank in one step (see :class:`Step`)."""

    copies: list[Copy] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)
    recvs: list[Recv] = field(default_factory=list)


Phase = list[dict[int, Ops]]


def new_phase(nsteps: int) -> Phase:
    """An empty phase of ``nsteps`` steps."""
    return [dict() for _ in range(nsteps)]


def _ops(phase: Phase, step: int, rank: int) -> Ops:
    row = phase[step]
    ops = row.get(rank)
    if ops is None:
        ops = row[rank] = Ops()
    return ops


def transfer(phase: Phase, step: int, src: int, dst: int, src_blocks: Sequence[int],
             dst_blocks: Sequence[int] | None = None, op: str = COPY) -> None:
    """Add one message ``src -> dst`` in ``step``: a Send at ``src``, a Recv at ``dst``.

    ``dst_blocks`` defaults to ``src_blocks`` (same block ids on both sides).
    """
    dst_blocks = src_blocks if dst_blocks is None else dst_blocks
    _ops(phase, step, src).sends.append(Send(peer=dst, blocks=tuple(src_blocks)))
    _ops(phase, step, dst).recvs.append(Recv(peer=src, blocks=tuple(dst_blocks), op=op))


def local_copy(phase: Phase, step: int, rank: int, src: Sequence[int], dst: Sequence[int]) -> None:
    """Add a local copy at ``rank`` in ``step``."""
    _ops(phase, step, rank).copies.append(Copy(src=tuple(src), dst=tuple(dst)))


def flatten(chunks: Sequence[Chunk]) -> Chunk:
    """Concatenate chunks into one tuple of block ids."""
    return tuple(b for c in chunks for b in c)


# --------------------------------------------------------------------- composition
def seq(*phases: Phase) -> Phase:
    """Run phases one after the other."""
    out: Phase = []
    for ph in phases:
        out.extend(ph)
    return out


def par_at(parts: Sequence[tuple[int, Phase]]) -> Phase:
    """Run phases side by side, phase ``ph`` starting at step ``start``.

    Operations of a rank that lands in the same step from several phases are
    concatenated in the order of ``parts`` (so message order stays consistent
    at both ends of every pair).
    """
    length = max((start + len(ph) for start, ph in parts), default=0)
    out = new_phase(length)
    for start, ph in parts:
        for i, step in enumerate(ph):
            for rank, ops in step.items():
                tgt = _ops(out, start + i, rank)
                tgt.copies.extend(ops.copies)
                tgt.sends.extend(ops.sends)
                tgt.recvs.extend(ops.recvs)
    return out


def par(*phases: Phase) -> Phase:
    """Run phases side by side, all starting together."""
    return par_at([(0, ph) for ph in phases])


@dataclass(frozen=True, kw_only=True)
class Layout:
    """What a schedule is, apart from its steps: name, kind, ranks, length and blocks.

    Attributes
    ----------
    name, kind:
        The schedule's name and kind (``"allreduce"``, ``"alltoall"``).
    p, n:
        Ranks and vector length (elements).
    block_lengths, input_blocks, output_blocks:
        The blocks the vector is cut into, and which of them each rank holds before and after.
    params:
        The algorithm's parameters (recorded in the schedule).
    """

    name: str
    kind: str
    p: int
    n: int
    block_lengths: Sequence[int]
    input_blocks: Sequence[int]
    output_blocks: Sequence[int]
    params: Mapping[str, object] = field(default_factory=dict)


def finalize(phase: Phase, layout: Layout, *, check: bool = True) -> Schedule:
    """Freeze a phase into a validated :class:`Schedule` of ``layout``, dropping empty steps."""
    p = layout.p
    rows: list[tuple[Step, ...]] = []
    for step in phase:
        if not any(o.copies or o.sends or o.recvs for o in step.values()):
            continue
        s = len(rows)
        row = []
        for r in range(p):
            o = step.get(r, Ops())
            row.append(Step(rank=r, index=s, copies=tuple(o.copies), sends=tuple(o.sends), recvs=tuple(o.recvs)))
        rows.append(tuple(row))
    sched = Schedule(name=layout.name, kind=layout.kind, p=p, n=layout.n,
                     block_lengths=tuple(int(x) for x in layout.block_lengths),
                     input_blocks=tuple(layout.input_blocks), output_blocks=tuple(layout.output_blocks),
                     steps=tuple(rows), params=dict(layout.params))
    if check:
        validate(sched)
    return sched


# ---------------------------------------------------------------------- helpers
def pof2_floor(q: int) -> int:
    """Largest power of two ``<= q`` (``q >= 1``)."""
    if q < 1:
        raise ValueError("q must be >= 1")
    return 1 << (q.bit_length() - 1)


def ceil_log2(q: int) -> int:
    """``ceil(log2(q))`` for ``q >= 1``."""
    return (q - 1).bit_length()


# ------------------------------------------------------------------- ring phases
def ring_reduce_scatter(group: Sequence[int], chunks: Sequence[Chunk]) -> Phase:
    """Ring reduce-scatter: ``q-1`` steps; member ``i`` ends owning ``chunks[i]`` reduced.

    In step ``s`` member ``i`` sends chunk ``(i-s-1) mod q`` to member ``i+1``,
    which adds it into its own copy.
    """
    q = len(group)
    if len(chunks) != q:
        raise ValueError("ring reduce-scatter needs one chunk per member")
    ph = new_phase(q - 1)
    for s in range(q - 1):
        for i in range(q):
            transfer(ph, s, group[i], group[(i + 1) % q], chunks[(i - s - 1) % q], op=SUM)
    return ph


def ring_allgather(group: Sequence[int], chunks: Sequence[Chunk]) -> Phase:
    """Ring allgather: ``q-1`` steps; member ``i`` starts owning ``chunks[i]``.

    In step ``s`` member ``i`` forwards chunk ``(i-s) mod q`` to member ``i+1``.
    """
    q = len(group)
    if len(chunks) != q:
        raise ValueError("ring allgather needs one chunk per member")
    ph = new_phase(q - 1)
    for s in range(q - 1):
        for i in range(q):
            transfer(ph, s, group[i], group[(i + 1) % q], chunks[(i - s) % q], op=COPY)
    return ph


# ---------------------------------------------------- recursive halving / doubling
def _check_pof2(q: int) -> None:
    if q < 1 or q & (q - 1):
        raise ValueError(f"group size {q} is not a power of two")


def halving_reduce_scatter(group: Sequence[int], chunks: Sequence[Chunk]) -> Phase:
    """Recursive-halving reduce-scatter for a power-of-two group.

    Partner distances ``q/2, q/4, ..., 1`` (MPICH order); at each step a member
    keeps the half of its current chunk range that contains its own index and
    sends the other half.  Member ``i`` ends owning ``chunks[i]`` reduced.
    """
    q = len(group)
    _check_pof2(q)
    if len(chunks) != q:
        raise ValueError("halving reduce-scatter needs one chunk per member")
    nsteps = q.bit_length() - 1
    ph = new_phase(nsteps)
    for i in range(q):
        lo, hi = 0, q
        for s in range(nsteps):
            mask = q >> (s + 1)
            mid = (lo + hi) // 2
            keep, give = ((mid, hi), (lo, mid)) if i & mask else ((lo, mid), (mid, hi))
            # Only the sender side is added here; the partner adds its own send.
            transfer(ph, s, group[i], group[i ^ mask], flatten(chunks[give[0]:give[1]]), op=SUM)
            lo, hi = keep
    return ph


def doubling_allgather(group: Sequence[int], chunks: Sequence[Chunk]) -> Phase:
    """Recursive-doubling allgather for a power-of-two group.

    Member ``i`` starts owning ``chunks[i]``; at distance ``2^s`` it swaps its
    aligned range of ``2^s`` chunks with member ``i xor 2^s``.
    """
    q = len(group)
    _check_pof2(q)
    if len(chunks) != q:
        raise ValueError("doubling allgather needs one chunk per member")
    nsteps = q.bit_length() - 1
    ph = new_phase(nsteps)
    for s in range(nsteps):
        mask = 1 << s
        for i in range(q):
            start = (i // mask) * mask
            transfer(ph, s, group[i], group[i ^ mask], flatten(chunks[start:start + mask]), op=COPY)
    return ph


def with_fold_in(group: Sequence[int], vector: Chunk,
                 inner: Callable[[Sequence[int]], Phase]) -> Phase:
    """Run ``inner`` on a power-of-two subgroup, folding the extra members in and out.

    With ``q' = pof2_floor(q)`` and ``r = q - q'``: among the first ``2r``
    members, each even one sends its whole ``vector`` to the next odd one,
    which adds it (one step), and sits out; ``inner`` runs on the ``q'``
    survivors; the odd ones then send the result back (one step).  This is
    the standard non-power-of-two handling of MPICH / Rabenseifner.
    """
    q = len(group)
    qq = pof2_floor(q)
    r = q - qq
    if r == 0:
        return inner(list(group))
    pre, post = new_phase(1), new_phase(1)
    for j in range(r):
        transfer(pre, 0, group[2 * j], group[2 * j + 1], vector, op=SUM)
        transfer(post, 0, group[2 * j + 1], group[2 * j], vector, op=COPY)
    survivors = [group[2 * j + 1] for j in range(r)] + list(group[2 * r:])
    return seq(pre, inner(survivors), post)


def rabenseifner_phase(group: Sequence[int], chunks: Sequence[Chunk]) -> Phase:
    """Rabenseifner allreduce (halving reduce-scatter + doubling allgather) with fold-in.

    ``chunks`` must have ``pof2_floor(len(group))`` entries: the vector split
    for the power-of-two core.
    """
    if len(chunks) != pof2_floor(len(group)):
        raise ValueError("Rabenseifner needs pof2_floor(q) chunks")
    return with_fold_in(group, flatten(chunks),
                        lambda g: seq(halving_reduce_scatter(g, chunks), doubling_allgather(g, chunks)))


def recursive_doubling_phase(group: Sequence[int], vector: Chunk) -> Phase:
    """Recursive-doubling allreduce (whole vector every step) with fold-in."""

    def core(g: Sequence[int]) -> Phase:
        q = len(g)
        nsteps = q.bit_length() - 1
        ph = new_phase(nsteps)
        for s in range(nsteps):
            for i in range(q):
                transfer(ph, s, g[i], g[i ^ (1 << s)], vector, op=SUM)
        return ph

    return with_fold_in(group, vector, core)


# ------------------------------------------------------------------ binomial trees
def binomial_reduce(group: Sequence[int], vector: Chunk) -> Phase:
    """Binomial-tree reduce to member 0 in ``ceil(log2 q)`` steps.

    At distance ``d = 1, 2, 4, ...`` every member ``i`` with ``i mod 2d == d``
    sends its partial sum to ``i - d`` and leaves.
    """
    q = len(group)
    nsteps = ceil_log2(q)
    ph = new_phase(nsteps)
    for s in range(nsteps):
        d = 1 << s
        for i in range(d, q, 2 * d):
            transfer(ph, s, group[i], group[i - d], vector, op=SUM)
    return ph


def binomial_bcast(group: Sequence[int], vector: Chunk) -> Phase:
    """Binomial-tree broadcast from member 0 (the reduce tree, reversed)."""
    q = len(group)
    nsteps = ceil_log2(q)
    ph = new_phase(nsteps)
    for s in range(nsteps):
        d = 1 << (nsteps - 1 - s)
        for i in range(d, q, 2 * d):
            transfer(ph, s, group[i - d], group[i], vector, op=COPY)
    return ph
