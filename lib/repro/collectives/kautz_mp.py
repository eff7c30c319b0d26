"""Multi-port collectives on the switchless Kautz network ``K(d, 2)`` (chapter ``kautz-fpga``).

``K(d, 2)`` has the ``N = d(d+1)`` words ``ab`` over ``{0..d}`` (``a != b``)
as vertices and an arc ``ab -> bx`` for every ``x != b``.  Its adjacency
matrix satisfies ``A^2 + A = J``: between two distinct vertices there is either
an arc or exactly one path of two arcs, and every vertex reaches itself in two
arcs through its bidirectional partner ``ba``.  The schedules below use only
arcs (every message goes to an out-neighbour), so no packet is ever forwarded
by an intermediate FPGA; the two-hop paths are walked by the algorithm instead.

Schedules (our reconstruction of "a combination of unicasts that forms
multi-port collective communications"; the paper's text was not available):

* :func:`kautz_allgather` (2 steps): every node sends its block to its ``d``
  out-neighbours; then every node ``w`` forwards, to each out-neighbour ``v``,
  the blocks of its in-neighbours ``u != v``.  Link load: 1 block, then ``d``
  or ``d-1`` blocks.
* :func:`kautz_reduce_scatter` (2 steps): the mirror image; ``u`` sends to
  each out-neighbour ``w`` its partial values for the blocks of ``w``'s
  out-neighbours ``v != u``, which ``w`` adds to its own; then ``w`` sends
  block ``v`` to every out-neighbour ``v``.
* :func:`kautz_allreduce` (4 steps): the two above.
* :func:`hamiltonian_ring_order`: a Hamiltonian cycle of ``K(d, 2)`` (from
  an Eulerian circuit of the complete digraph on ``d+1`` letters), so that the
  single-port ring baseline also uses one arc per message.
"""

from __future__ import annotations

import networkx as nx

from repro.hpc.ir import COPY, SUM, Copy, Recv, Schedule, Send, Step, split_lengths
from repro.hpc.platforms import kautz_arcs


def _check_d(d: int) -> None:
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d (Kautz degree) must be an integer >= 1, got {d!r}")


def kautz_size(d: int) -> int:
    """Number of vertices ``d(d+1)`` of ``K(d, 2)``."""
    _check_d(d)
    return d * (d + 1)


def degree_for(p: int) -> int:
    """The ``d`` with ``d(d+1) == p``; ``ValueError`` naming ``p`` if there is none."""
    d = int((p ** 0.5))
    while d * (d + 1) < p:
        d += 1
    if d < 1 or d * (d + 1) != p:
        raise ValueError(f"p={p} is not d(d+1) for an integer d >= 1 (Kautz K(d,2) sizes: 2, 6, 12, 20, ...)")
    return d


def kautz_digraph(d: int) -> nx.DiGraph:
    """``K(d, 2)`` as a networkx digraph on ``0..N-1`` (node attribute ``word``)."""
    _check_d(d)
    names, arcs = kautz_arcs(d)
    g = nx.DiGraph()
    for i, name in enumerate(names):
        g.add_node(i, word=name)
    g.add_edges_from(sorted(arcs))
    return g


def _neighbours(d: int) -> tuple[int, list[list[int]], list[list[int]]]:
    g = kautz_digraph(d)
    n = g.number_of_nodes()
    return n, [sorted(g.successors(i)) for i in range(n)], [sorted(g.predecessors(i)) for i in range(n)]


def _empty_rows(p: int, nsteps: int) -> list[list[dict[str, list]]]:
    return [[{"copies": [], "sends": [], "recvs": []} for _ in range(p)] for _ in range(nsteps)]


def _freeze(rows: list[list[dict[str, list]]]) -> tuple[tuple[Step, ...], ...]:
    return tuple(tuple(Step(rank=r, index=s, copies=tuple(o["copies"]), sends=tuple(o["sends"]), recvs=tuple(o["recvs"]))
                       for r, o in enumerate(row)) for s, row in enumerate(rows))


def _gather_steps(rows: list[list[dict[str, list]]], first: int, succ: list[list[int]],
                  pred: list[list[int]], block_of: list[int]) -> None:
    """Two allgather steps from ``first``: node ``u``'s data is block ``block_of[u]``."""
    for u, outs in enumerate(succ):
        for w in outs:
            rows[first][u]["sends"].append(Send(peer=w, blocks=(block_of[u],)))
            rows[first][w]["recvs"].append(Recv(peer=u, blocks=(block_of[u],), op=COPY))
    for w, outs in enumerate(succ):
        for v in outs:
            blocks = tuple(block_of[u] for u in pred[w] if u != v)
            if blocks:
                rows[first + 1][w]["sends"].append(Send(peer=v, blocks=blocks))
                rows[first + 1][v]["recvs"].append(Recv(peer=w, blocks=blocks, op=COPY))


def _reduce_scatter_steps(rows: list[list[dict[str, list]]], first: int, succ: list[list[int]]) -> None:
    """Two reduce-scatter steps from ``first``: node ``v`` ends with the sum of block ``v``."""
    for u, outs in enumerate(succ):
        for w in outs:
            blocks = tuple(v for v in succ[w] if v != u)
            if blocks:
                rows[first][u]["sends"].append(Send(peer=w, blocks=blocks))
                rows[first][w]["recvs"].append(Recv(peer=u, blocks=blocks, op=SUM))
    for w, outs in enumerate(succ):
        for v in outs:
            rows[first + 1][w]["sends"].append(Send(peer=v, blocks=(v,)))
            rows[first + 1][v]["recvs"].append(Recv(peer=w, blocks=(v,), op=SUM))


def kautz_allgather(d: int, m: int) -> Schedule:
    """Two-step multi-port allgather on ``K(d, 2)``.

    Parameters
    ----------
    d:
        Kautz degree (``N = d(d+1)`` ranks).
    m:
        Elements contributed by every rank.

    Returns
    -------
    Schedule
        Kind ``"allgather"``: each rank's input (``m`` elements) lands in block
        ``rank``; the output is blocks ``0..N-1`` (``N*m`` elements, ordered by rank).
    """
    if m < 0:
        raise ValueError(f"m must be >= 0, got {m}")
    n, succ, pred = _neighbours(d)
    rows = _empty_rows(n, 2)
    for r in range(n):
        rows[0][r]["copies"].append(Copy(src=(n,), dst=(r,)))
    _gather_steps(rows, 0, succ, pred, list(range(n)))
    return Schedule(name="kautz_allgather", kind="allgather", p=n, n=m, block_lengths=tuple([m] * (n + 1)),
                    input_blocks=(n,), output_blocks=tuple(range(n)), steps=_freeze(rows), params={"d": d})


def kautz_reduce_scatter(d: int, n: int) -> Schedule:
    """Two-step multi-port reduce-scatter on ``K(d, 2)``: rank ``v`` ends with block ``v`` of the sum.

    The vector of ``n`` elements is cut into ``N`` blocks by :func:`split_lengths`;
    the output of rank ``v`` is its block ``v`` (kind ``"reduce_scatter"``).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    p, succ, _ = _neighbours(d)
    rows = _empty_rows(p, 2)
    _reduce_scatter_steps(rows, 0, succ)
    lengths = split_lengths(n, p)
    return Schedule(name="kautz_reduce_scatter", kind="reduce_scatter", p=p, n=n,
                    block_lengths=tuple(lengths), input_blocks=tuple(range(p)), output_blocks=tuple(range(p)),
                    steps=_freeze(rows), params={"d": d})


def kautz_allreduce(d: int, n: int) -> Schedule:
    """Four-step multi-port allreduce on ``K(d, 2)``: reduce-scatter then allgather.

    Parameters
    ----------
    d:
        Kautz degree (``N = d(d+1)`` ranks).
    n:
        Vector length (elements), cut into ``N`` blocks.

    Returns
    -------
    Schedule
        Kind ``"allreduce"`` (every rank ends with the element-wise sum).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    p, succ, pred = _neighbours(d)
    rows = _empty_rows(p, 4)
    _reduce_scatter_steps(rows, 0, succ)
    _gather_steps(rows, 2, succ, pred, list(range(p)))
    blocks = tuple(range(p))
    return Schedule(name="kautz_allreduce", kind="allreduce", p=p, n=n, block_lengths=tuple(split_lengths(n, p)),
                    input_blocks=blocks, output_blocks=blocks, steps=_freeze(rows), params={"d": d})


def kautz_allreduce_cost(d: int, nbytes: float, alpha: float, beta: float) -> float:
    """Alpha-beta time of :func:`kautz_allreduce` when ``N`` divides the vector.

    Four start-ups; the busiest link carries ``d`` blocks in the first and the
    last step and one block in the middle two: ``4 alpha + 2(d+1) (nbytes/N) beta
    = 4 alpha + (2/d) nbytes beta``.
    """
    p = kautz_size(d)
    return 4 * alpha + 2 * (d + 1) * (nbytes / p) * beta


def kautz_allgather_cost(d: int, mbytes: float, alpha: float, beta: float) -> float:
    """Alpha-beta time of :func:`kautz_allgather`: ``2 alpha + (d+1) m beta``."""
    _check_d(d)
    return 2 * alpha + (d + 1) * mbytes * beta


def hamiltonian_ring_order(d: int) -> list[int]:
    """A Hamiltonian cycle of ``K(d, 2)`` as a list of vertex ids.

    The arcs of the complete digraph on the letters ``{0..d}`` are the vertices
    of ``K(d, 2)``, and consecutive arcs of an Eulerian circuit are joined by a
    Kautz arc, so the circuit visits every vertex once along arcs.
    """
    _check_d(d)
    names, arcs = kautz_arcs(d)
    index = {name: i for i, name in enumerate(names)}
    complete = nx.complete_graph(d + 1, create_using=nx.DiGraph)
    order = [index[f"k{a}_{b}"] for a, b in nx.eulerian_circuit(complete, source=0)]
    assert len(order) == len(names) and all((order[i], order[(i + 1) % len(order)]) in arcs
                                            for i in range(len(order)))
    return order


def awg_wavelength_map(d: int) -> dict[tuple[int, int], tuple[int, int]]:
    """WDM mapping of ``K(d, 2)`` onto ``d+1`` cyclic ``d x d`` AWGs.

    The arcs ``a b -> b x`` that pass through letter ``b`` form a complete
    bipartite ``d x d`` graph between the ``d`` vertices ending in ``b`` and the
    ``d`` vertices starting with ``b``; they are carried by AWG number ``b``.
    Input port ``i`` (the sender's first letter, ranked among letters ``!= b``)
    reaches output port ``o`` (the receiver's last letter, ranked likewise) on
    wavelength ``(o - i) mod d`` of a cyclic AWG.  Reconstructed from the abstract.

    Returns
    -------
    dict
        ``(src, dst) -> (awg, wavelength)`` for every arc.
    """
    names, arcs = kautz_arcs(d)
    words = [tuple(int(x) for x in name[1:].split("_")) for name in names]
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for u, v in sorted(arcs):
        a, b = words[u]
        _, x = words[v]
        letters = [c for c in range(d + 1) if c != b]
        i, o = letters.index(a), letters.index(x)
        out[(u, v)] = (b, (o - i) % d)
    return out
