"""All-to-All (personalized exchange) schedules.

Every rank holds ``p`` blocks of ``m`` elements; block ``j`` of rank ``i`` must
end up as block ``i`` of rank ``j`` (the "transpose").  Work-buffer layout:
input blocks first, then output blocks, then scratch.

Algorithms: ``linear`` (all messages in one step, multi-port), ``pairwise``
(``p-1`` steps, rank ``r`` sends to ``r+s``), ``bruck`` (``ceil(log2 p)``
steps with store-and-forward), and for an ``R x C`` two-dimensional fully
connected (2dfc) network: ``two_phase`` (whole blocks, row then column) and
``2dfc`` (striped two-phase, bandwidth-optimal).

The 2dfc algorithm (spec ``a2a-2dfc``) is a reconstruction: the paper's text
was not available, only its abstract ("parallel non-blocking intra- and
inter-group communications with striping data placement").  Every block is
cut into halves A (routed row then column) and B (column then row); both
phases use every row and every column port at once.  Node ``(r, c)`` is rank
``r*C + c``.
"""

from __future__ import annotations

import math

from repro.collectives.phases import Layout, Phase, finalize, local_copy, new_phase, transfer
from repro.hpc.ir import Schedule


def grid_shape(p: int) -> tuple[int, int]:
    """The most square ``R x C`` grid with ``R*C == p`` and ``R <= C``."""
    if p < 1:
        raise ValueError("p must be >= 1")
    r = max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)
    return r, p // r


def _check(p: int, m: int) -> None:
    if p < 1 or m < 0:
        raise ValueError(f"need p >= 1 and m >= 0, got p={p}, m={m}")


def _alltoall(ph: Phase, name: str, p: int, m: int, lengths: list[int], inputs: range,
              outputs: range, **params: object) -> Schedule:
    return finalize(ph, Layout(name=name, kind="alltoall", p=p, n=m, block_lengths=lengths,
                               input_blocks=tuple(inputs), output_blocks=tuple(outputs), params=params))


def linear(p: int, m: int) -> Schedule:
    """Direct all-to-all: one step in which every rank sends ``p-1`` messages at once."""
    _check(p, m)
    ph = new_phase(1)
    for r in range(p):
        local_copy(ph, 0, r, (r,), (p + r,))
        for d in range(p):
            if d != r:
                transfer(ph, 0, r, d, (d,), (p + r,))
    return _alltoall(ph, "linear", p, m, [m] * (2 * p), range(p), range(p, 2 * p))


def pairwise(p: int, m: int) -> Schedule:
    """Pairwise exchange: in step ``s = 1..p-1`` rank ``r`` sends to ``r+s`` and receives from ``r-s``."""
    _check(p, m)
    ph = new_phase(max(p - 1, 1))
    for r in range(p):
        local_copy(ph, 0, r, (r,), (p + r,))
        for s in range(1, p):
            d = (r + s) % p
            transfer(ph, s - 1, r, d, (d,), (p + r,))
    return _alltoall(ph, "pairwise", p, m, [m] * (2 * p), range(p), range(p, 2 * p))


def bruck(p: int, m: int) -> Schedule:
    """Bruck's all-to-all: ``ceil(log2 p)`` store-and-forward steps.

    Blocks are first rotated so that scratch slot ``i`` holds the block for
    rank ``r+i``; in step ``s`` every slot with bit ``s`` set moves to rank
    ``r + 2^s``; finally slot ``(r-j) mod p`` is copied to output block ``j``.
    """
    _check(p, m)
    nsteps = (p - 1).bit_length()
    ph = new_phase(nsteps + 1)
    inp, out, tmp = 0, p, 2 * p
    for r in range(p):
        for i in range(p):
            local_copy(ph, 0, r, (inp + (r + i) % p,), (tmp + i,))
        for s in range(nsteps):
            slots = tuple(tmp + i for i in range(p) if (i >> s) & 1)
            transfer(ph, s, r, (r + (1 << s)) % p, slots)
        for j in range(p):
            local_copy(ph, nsteps, r, (tmp + (r - j) % p,), (out + j,))
    return _alltoall(ph, "bruck", p, m, [m] * (3 * p), range(p), range(p, 2 * p))


def resolve_grid(p: int, rows: int | None) -> tuple[int, int]:
    """``(R, C)`` for ``p`` ranks: :func:`grid_shape` if ``rows`` is None, else ``(rows, p/rows)``."""
    if rows is None:
        return grid_shape(p)
    if rows < 1 or p % rows:
        raise ValueError(f"rows={rows} must divide p={p}")
    return rows, p // rows


def two_dim(p: int, m: int, rows: int | None = None, striped: bool = True) -> Schedule:
    """Two-phase all-to-all on an ``R x C`` 2dfc network.

    Parameters
    ----------
    p, m:
        Ranks and elements per block.
    rows:
        ``R`` (must divide ``p``); default :func:`grid_shape`.
    striped:
        ``True``: the bandwidth-optimal striped algorithm (half A row-first,
        half B column-first, both dimensions busy in both phases; A gets
        ``ceil(m/2)`` elements).  ``False``: the topology-aware baseline that
        sends whole blocks along rows in phase 1 and along columns in phase 2.

    Notes
    -----
    Phase 1, node ``(r,c)``: to row neighbour ``(r,c')`` the A halves of all
    blocks for column ``c'``; to column neighbour ``(r',c)`` the B halves of
    all blocks for row ``r'``.  Phase 2 forwards, along the other dimension,
    what arrived for other nodes together with the node's own halves that
    did not move in phase 1.  Every half crosses at most two links and is
    written into its destination's output exactly once.
    """
    _check(p, m)
    R, C = resolve_grid(p, rows)
    ha = (m + 1) // 2 if striped else m
    hb = m - ha
    node = lambda r, c: r * C + c  # noqa: E731
    # Layout: input halves (A_j, B_j), output halves (A_i, B_i), scratch A[(c_src, r_dst)], B[(r_src, c_dst)].
    lengths = [ha, hb] * (2 * p) + [ha] * (C * R) + [hb] * (R * C)
    in_a, in_b = (lambda j: 2 * j), (lambda j: 2 * j + 1)
    out_a, out_b = (lambda i: 2 * p + 2 * i), (lambda i: 2 * p + 2 * i + 1)
    tmp_a = lambda cs, rd: 4 * p + cs * R + rd  # noqa: E731
    tmp_b = lambda rs, cd: 4 * p + C * R + rs * C + cd  # noqa: E731
    use_b = hb > 0
    ph = new_phase(2)
    for r in range(R):
        for c in range(C):
            me = node(r, c)
            local_copy(ph, 0, me, (in_a(me), in_b(me)), (out_a(me), out_b(me)))
            # Phase 1, rows: A halves for every node of column c2.
            for c2 in range(C):
                if c2 == c:
                    continue
                src = tuple(in_a(node(rd, c2)) for rd in range(R))
                dst = tuple(out_a(me) if rd == r else tmp_a(c, rd) for rd in range(R))
                transfer(ph, 0, me, node(r, c2), src, dst)
            # Phase 1, columns: B halves for every node of row r2.
            for r2 in range(R) if use_b else ():
                if r2 == r:
                    continue
                src = tuple(in_b(node(r2, cd)) for cd in range(C))
                dst = tuple(out_b(me) if cd == c else tmp_b(r, cd) for cd in range(C))
                transfer(ph, 0, me, node(r2, c), src, dst)
            # Phase 2, columns: A halves for (r2, c) from every source of row r.
            for r2 in range(R):
                if r2 == r:
                    continue
                src = tuple(in_a(node(r2, c)) if cs == c else tmp_a(cs, r2) for cs in range(C))
                dst = tuple(out_a(node(r, cs)) for cs in range(C))
                transfer(ph, 1, me, node(r2, c), src, dst)
            # Phase 2, rows: B halves for (r, c2) from every source of column c.
            for c2 in range(C) if use_b else ():
                if c2 == c:
                    continue
                src = tuple(in_b(node(r, c2)) if rs == r else tmp_b(rs, c2) for rs in range(R))
                dst = tuple(out_b(node(rs, c)) for rs in range(R))
                transfer(ph, 1, me, node(r, c2), src, dst)
    name = "2dfc" if striped else "two_phase"
    return _alltoall(ph, name, p, m, lengths, range(2 * p), range(2 * p, 4 * p), rows=R, cols=C)


def two_phase(p: int, m: int, rows: int | None = None) -> Schedule:
    """Topology-aware two-phase all-to-all (rows, then columns; whole blocks)."""
    return two_dim(p, m, rows, striped=False)


def two_dim_fc(p: int, m: int, rows: int | None = None) -> Schedule:
    """Striped bandwidth-optimal 2dfc all-to-all (reconstruction, see :func:`two_dim`)."""
    return two_dim(p, m, rows, striped=True)
