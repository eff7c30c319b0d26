"""NAS-Parallel-Benchmark-like communication skeletons and their run time under FEC latencies.

These are *not* traces of the real NPB codes: each kernel's per-iteration
communication is generated from the kernel's published structure (problem
size of class A, process grid, which exchanges happen per iteration), and its
computation is a stated flop estimate divided by an assumed per-rank rate.
The communication of one iteration is a :class:`~repro.hpc.ir.Schedule`
(one block per message, ``itemsize`` 1 byte) that the SimGrid executor runs on
a fat tree whose per-hop latency includes the receiver's FEC decode.

Kernels (class A sizes; ``p`` ranks): EP (one small allreduce), CG (row
reductions, a transpose exchange and two dot products per inner iteration,
2D grid), MG (V-cycle of 3D halo exchanges over all levels), FT (one all-to-all
per iteration), IS (bucket-count allreduce, count all-to-all and key
all-to-all), LU (two pipelined wavefront sweeps over ``nz`` planes plus a
face exchange, 2D grid).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from repro.collectives.algorithms import build_schedule
from repro.hpc.ir import Recv, Schedule, Send, Step, messages
from repro.hpc.platforms import Platform, fat_tree

Msg = tuple[int, int, int]  # (src, dst, bytes)


def grid2(p: int) -> tuple[int, int]:
    """Most square ``rows x cols = p`` with ``rows <= cols``."""
    r = int(math.isqrt(p))
    while p % r:
        r -= 1
    return r, p // r


def grid3(p: int) -> tuple[int, int, int]:
    """Most cubic ``a x b x c = p`` (``a <= b <= c``)."""
    best = (1, 1, p)
    for a in range(1, int(round(p ** (1 / 3))) + 2):
        if p % a:
            continue
        b, c = grid2(p // a)
        lo, mid, hi = sorted((a, b, c))
        if hi - lo < max(best) - min(best):
            best = (lo, mid, hi)
    return best


def trace_schedule(name: str, p: int, steps: Sequence[Sequence[Msg]]) -> Schedule:
    """A :class:`Schedule` whose step ``s`` sends the messages ``steps[s]`` (one block each).

    Only sizes matter (it is meant for :func:`~repro.collectives.simulate` and
    the cost model); data are not meaningful.
    """
    lengths: list[int] = []
    rows = []
    for s, msgs in enumerate(steps):
        sends: list[list[Send]] = [[] for _ in range(p)]
        recvs: list[list[Recv]] = [[] for _ in range(p)]
        for src, dst, nbytes in msgs:
            if not (0 <= src < p and 0 <= dst < p) or src == dst:
                raise ValueError(f"{name}: bad message {src}->{dst} for p={p}")
            b = len(lengths)
            lengths.append(int(nbytes))
            sends[src].append(Send(peer=dst, blocks=(b,)))
            recvs[dst].append(Recv(peer=src, blocks=(b,)))
        rows.append(tuple(Step(rank=r, index=s, copies=(), sends=tuple(sends[r]), recvs=tuple(recvs[r])) for r in range(p)))
    return Schedule(name=name, kind="trace", p=p, n=sum(lengths), block_lengths=tuple(lengths), input_blocks=(),
                    output_blocks=(), steps=tuple(rows), params={})


def schedule_steps(sched: Schedule, itemsize: int) -> list[list[Msg]]:
    """The messages of a library schedule, per communicating step, in bytes."""
    per: dict[int, list[Msg]] = {}
    for m in messages(sched):
        per.setdefault(m.step, []).append((m.src, m.dst, m.elements * itemsize))
    return [per[s] for s in sorted(per)]


def _allreduce(p: int, nbytes: int) -> list[list[Msg]]:
    return schedule_steps(build_schedule("recursive_doubling", p, max(nbytes // 8, 1)), 8) if p > 1 else []


def _alltoall(p: int, pair_bytes: int) -> list[list[Msg]]:
    return [[(r, (r + k) % p, pair_bytes) for r in range(p)] for k in range(1, p)]


def ep_steps(p: int) -> list[list[Msg]]:
    """EP: the final reduction of the sums and the ten annulus counts (one iteration)."""
    return _allreduce(p, 12 * 8)


def cg_steps(p: int, na: int = 14000) -> list[list[Msg]]:
    """CG, one inner iteration: matvec row reduction, transpose exchange, two dot products."""
    rows, cols = grid2(p)
    seg = max(na // rows, 1) * 8
    out: list[list[Msg]] = []
    row_of = lambda r: (r // cols, r % cols)  # noqa: E731
    k = 1
    while k < cols:  # recursive-halving reduction within a process row
        out.append([(r, row_of(r)[0] * cols + (row_of(r)[1] ^ k), seg // k) for r in range(p)])
        k *= 2
    if p > 1:  # transpose partner
        out.append([(r, (r % cols) * rows + r // cols if rows == cols else (r + p // 2) % p, seg)
                    for r in range(p) if ((r % cols) * rows + r // cols if rows == cols else (r + p // 2) % p) != r])
    for _ in range(2):  # two dot products reduced along the row
        k = 1
        while k < cols:
            out.append([(r, row_of(r)[0] * cols + (row_of(r)[1] ^ k), 8) for r in range(p)])
            k *= 2
    return [s for s in out if s]


def mg_steps(p: int, n: int = 256) -> list[list[Msg]]:
    """MG, one V-cycle: at every level, two halo exchanges going down and two going up.

    A halo exchange goes dimension by dimension (three steps, two faces each);
    a face of the local box at level size ``m`` has ``(m/b)(m/c)`` doubles.
    """
    dims = grid3(p)
    coords = [(r // (dims[1] * dims[2]), (r // dims[2]) % dims[1], r % dims[2]) for r in range(p)]
    index = {c: r for r, c in enumerate(coords)}
    levels = int(math.log2(n))

    def halo(m: int) -> list[list[Msg]]:
        box = [max(m // d, 1) for d in dims]
        steps = []
        for axis in range(3):
            if dims[axis] == 1:
                continue
            face = 8 * box[(axis + 1) % 3] * box[(axis + 2) % 3]
            msgs = []
            for r, c in enumerate(coords):
                for step in (-1, 1):
                    nb = list(c)
                    nb[axis] = (nb[axis] + step) % dims[axis]
                    dst = index[(nb[0], nb[1], nb[2])]
                    if dst != r:
                        msgs.append((r, dst, face))
            steps.append(msgs)
        return steps

    out: list[list[Msg]] = []
    sizes = [n >> lv for lv in range(levels)]
    for m in sizes + sizes[::-1]:
        out += halo(m) + halo(m)
    return out


def ft_steps(p: int, points: int = 256 * 256 * 128) -> list[list[Msg]]:
    """FT, one iteration: the transpose as an all-to-all of complex doubles."""
    return _alltoall(p, max(points * 16 // (p * p), 1))


def is_steps(p: int, keys: int = 1 << 23, buckets: int = 1024) -> list[list[Msg]]:
    """IS, one iteration: bucket-size allreduce, send-count all-to-all, key all-to-all."""
    return _allreduce(p, buckets * 4) + _alltoall(p, 4) + _alltoall(p, max(keys * 4 // (p * p), 1))


def lu_steps(p: int, n: int = 64) -> list[list[Msg]]:
    """LU (SSOR), one iteration: lower and upper wavefront sweeps over ``n`` planes, then a face exchange."""
    rows, cols = grid2(p)
    edge = 5 * 8 * max(n // cols, 1)
    face = 5 * 8 * max(n // cols, 1) * n
    out: list[list[Msg]] = []
    for sweep in (1, -1):
        for t in range(n + rows + cols - 2):
            msgs = []
            for i in range(rows):
                for j in range(cols):
                    ii, jj = (i, j) if sweep == 1 else (rows - 1 - i, cols - 1 - j)
                    if 0 <= t - (ii + jj) < n:
                        r = i * cols + j
                        if ii + 1 < rows:
                            msgs.append((r, (i + sweep) * cols + j, edge))
                        if jj + 1 < cols:
                            msgs.append((r, i * cols + j + sweep, edge))
            if msgs:
                out.append(msgs)
    ex = []
    for i in range(rows):
        for j in range(cols):
            r = i * cols + j
            for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                if 0 <= i + di < rows and 0 <= j + dj < cols:
                    ex.append((r, (i + di) * cols + j + dj, face))
    if ex:
        out.append(ex)
    return out


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """One NPB-like kernel at class A.

    Attributes
    ----------
    name:
        Kernel name.
    iterations:
        Times the per-iteration communication and computation repeat.
    flops:
        Total floating-point (or integer) operations of the run, all ranks together.
    steps:
        ``steps(p)``: the messages of one iteration, per step.
    structure:
        A sentence on how the skeleton was derived.
    """

    name: str
    iterations: int
    flops: float
    steps: Callable[[int], list[list[Msg]]]
    structure: str


KERNELS: dict[str, Kernel] = {
    k.name: k
    for k in [
        Kernel(
            name="EP",
            iterations=1,
            flops=2**28 * 40.0,
            steps=ep_steps,
            structure="2^28 Gaussian pairs, ~40 operations each; one allreduce at the end",
        ),
        Kernel(
            name="CG",
            iterations=15 * 25,
            flops=15 * 25 * (2 * 14000 * 12 * 12 + 10 * 14000.0),
            steps=cg_steps,
            structure="na = 14000, 12 x 12 nonzeros per row block; 375 inner iterations of a matvec and two dot products",
        ),
        Kernel(
            name="MG",
            iterations=4,
            flops=4 * 58.0 * 256**3 * 8 / 7,
            steps=mg_steps,
            structure="256^3 grid, 4 V-cycles over 8 levels, ~58 operations per point and level",
        ),
        Kernel(
            name="FT",
            iterations=6,
            flops=6 * 5.0 * 256 * 256 * 128 * math.log2(256 * 256 * 128),
            steps=ft_steps,
            structure="256 x 256 x 128 complex grid, 6 iterations of an FFT (5 N log2 N) and one transpose",
        ),
        Kernel(
            name="IS",
            iterations=10,
            flops=10 * 10.0 * 2**23,
            steps=is_steps,
            structure="2^23 keys, 10 rankings of ~10 operations per key",
        ),
        Kernel(
            name="LU",
            iterations=250,
            flops=250 * 1200.0 * 64**3,
            steps=lu_steps,
            structure="64^3 grid, 250 SSOR iterations of two wavefront sweeps (~1200 operations per point)",
        ),
    ]
}


def kernel_schedule(name: str, p: int) -> Schedule:
    """One iteration of kernel ``name`` on ``p`` ranks as a trace schedule."""
    if name not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {name!r}")
    if p < 2:
        raise ValueError(f"p must be >= 2, got {p}")
    return trace_schedule(name, p, KERNELS[name].steps(p))


def fec_fat_tree(
    p: int, hosts_per_leaf: int, spines: int, link_gbps: float, wire_ns: float, switch_ns: float, fec_ns: float
) -> Platform:
    """Two-level fat tree where every hop pays wire + FEC decode, and every switch its pipeline.

    Links into a switch (host->leaf, leaf->spine, spine->leaf) carry
    ``wire + fec + switch``; the last link into a host ``wire + fec``.
    """
    if link_gbps <= 0:
        raise ValueError(f"link_gbps must be > 0, got {link_gbps}")
    base = fat_tree(p, hosts_per_leaf, spines, link_gbps * 1e9 / 8, 0.0)
    links = {}
    for name, link in base.links.items():
        into_host = name.split("->")[1].startswith("h")
        lat = (wire_ns + fec_ns + (0.0 if into_host else switch_ns)) * 1e-9
        links[name] = replace(link, latency=lat)
    return replace(base, links=links)


def bytes_hops(sched: Schedule, platform: Platform, placement: Sequence[int]) -> float:
    """Sum over messages of ``bytes x links traversed`` (for the error-exposure count)."""
    return float(sum(m.elements * platform.hops(placement[m.src], placement[m.dst]) for m in messages(sched)))


def placement_for(p: int, seed: int) -> list[int]:
    """Rank-to-host map: identity for seed 0, a seeded random permutation otherwise."""
    return list(range(p)) if seed == 0 else [int(x) for x in np.random.default_rng(seed).permutation(p)]
