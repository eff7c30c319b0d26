"""Allreduce (sum) schedules: flat and hierarchical multi-leader.

Flat algorithms: ring (``lr``), recursive doubling (``rdb``), Rabenseifner
recursive halving-doubling (``rab``), binomial reduce + broadcast.

Hierarchical multi-leader algorithms (spec ``multileader-allreduce``): ``p =
N*k`` ranks, ``k`` per node, rank ``= node*k + local``.  Every local rank
leads ``1/k`` of the vector.

* ``lr_lr``: intra-node ring reduce-scatter (``k-1`` steps), ``k`` inter-node
  ring reduce-scatters + allgathers among ranks of the same local index
  (``2(N-1)`` steps, in parallel), intra-node ring allgather (``k-1`` steps).
* ``lr_rab``: the inter-node part is Rabenseifner instead of a ring.
* ``lr_lr_pipe``: the vector is cut into ``S`` segments and run through a
  three-stage pipeline: in macro step ``t`` the intra-node reduce-scatter of
  segment ``t``, the inter-node part of segment ``t-1`` and the intra-node
  allgather of segment ``t-2`` run concurrently (``S+2`` macro steps).

Reconstruction notes: the phase structure of ``lr_lr``/``lr_rab`` follows the
spec's description of the authors' SimGrid code; the authors send the
remainder ``n mod P`` through a default allreduce, whereas here uneven block
lengths are handled directly.  The exact overlap pattern of the authors'
pipelined variant is not known: the three-stage pipeline above is our
inference from "intra-node phases of segment s run concurrently with the
inter-node phases of segment s-1".
"""

from __future__ import annotations

from repro.collectives.phases import (
    Chunk,
    Layout,
    Phase,
    binomial_bcast,
    binomial_reduce,
    finalize,
    par,
    par_at,
    pof2_floor,
    rabenseifner_phase,
    recursive_doubling_phase,
    ring_allgather,
    ring_reduce_scatter,
    seq,
)
from repro.hpc.ir import Schedule, split_lengths


def _allreduce(phase: Phase, name: str, p: int, n: int, lengths: list[int], **params: object) -> Schedule:
    blocks = tuple(range(len(lengths)))
    return finalize(phase, Layout(name=name, kind="allreduce", p=p, n=n, block_lengths=lengths,
                                  input_blocks=blocks, output_blocks=blocks, params=params))


def _check(p: int, n: int) -> None:
    if p < 1 or n < 0:
        raise ValueError(f"need p >= 1 and n >= 0, got p={p}, n={n}")


def ring(p: int, n: int) -> Schedule:
    """Ring allreduce (``lr``): ring reduce-scatter then ring allgather.

    ``2(p-1)`` steps, each moving one ``n/p`` block per rank.
    """
    _check(p, n)
    chunks = [(b,) for b in range(p)]
    ph = seq(ring_reduce_scatter(range(p), chunks), ring_allgather(range(p), chunks))
    return _allreduce(ph, "ring", p, n, split_lengths(n, p))


def recursive_doubling(p: int, n: int) -> Schedule:
    """Recursive-doubling allreduce (``rdb``): whole vector exchanged in each of ``log2 p'`` steps.

    Non-power-of-two ``p`` uses the fold-in of :func:`~repro.collectives.phases.with_fold_in`.
    """
    _check(p, n)
    return _allreduce(recursive_doubling_phase(range(p), (0,)), "recursive_doubling", p, n, [n])


def rabenseifner(p: int, n: int) -> Schedule:
    """Rabenseifner allreduce (``rab``): recursive-halving reduce-scatter + recursive-doubling allgather.

    The vector is split into ``p' = pof2_floor(p)`` blocks; extra ranks are folded in.
    """
    _check(p, n)
    q = pof2_floor(p)
    chunks = [(b,) for b in range(q)]
    return _allreduce(rabenseifner_phase(range(p), chunks), "rabenseifner", p, n, split_lengths(n, q))


def binomial(p: int, n: int) -> Schedule:
    """Binomial-tree reduce to rank 0 followed by a binomial-tree broadcast."""
    _check(p, n)
    ph = seq(binomial_reduce(range(p), (0,)), binomial_bcast(range(p), (0,)))
    return _allreduce(ph, "binomial", p, n, [n])


# -------------------------------------------------------------------- hierarchical
def _nodes(p: int, k: int) -> int:
    if k < 1 or p % k:
        raise ValueError(f"node size k={k} must divide p={p}")
    return p // k


def _node_group(m: int, k: int) -> list[int]:
    return [m * k + local for local in range(k)]


def _leader_group(local: int, k: int, nn: int) -> list[int]:
    return [m * k + local for m in range(nn)]


def _two_level_lengths(n: int, k: int, sub: int) -> list[int]:
    """Split ``n`` into ``k`` chunks and every chunk into ``sub`` blocks (block ``a*sub + j``)."""
    return [x for c in split_lengths(n, k) for x in split_lengths(c, sub)]


def _multileader_stages(k: int, nn: int, sub: int, base: int, inter: str) -> tuple[Phase, Phase, Phase]:
    """The three stages of a multi-leader allreduce on blocks ``base .. base + k*sub - 1``.

    Returns (intra reduce-scatter, inter-node allreduce of each leader's chunk,
    intra allgather).  ``inter`` is ``"ring"`` or ``"rab"``.
    """
    def chunk(a: int) -> Chunk:
        return tuple(base + a * sub + j for j in range(sub))

    node_chunks = [chunk(a) for a in range(k)]
    rs = par(*(ring_reduce_scatter(_node_group(m, k), node_chunks) for m in range(nn)))
    ag = par(*(ring_allgather(_node_group(m, k), node_chunks) for m in range(nn)))
    inter_phases = []
    for local in range(k):
        grp = _leader_group(local, k, nn)
        subs = [(b,) for b in chunk(local)]
        if inter == "ring":
            inter_phases.append(seq(ring_reduce_scatter(grp, subs), ring_allgather(grp, subs)))
        elif inter == "rab":
            inter_phases.append(rabenseifner_phase(grp, subs))
        else:
            raise ValueError(f"unknown inter-node algorithm {inter!r}")
    return rs, par(*inter_phases), ag


def lr_lr(p: int, n: int, k: int) -> Schedule:
    """Multi-leader hierarchical allreduce with rings inside and across nodes.

    Parameters
    ----------
    p, n:
        Ranks and vector length.
    k:
        Ranks per node (must divide ``p``); ``N = p/k`` nodes.
    """
    _check(p, n)
    nn = _nodes(p, k)
    ph = seq(*_multileader_stages(k, nn, nn, 0, "ring"))
    return _allreduce(ph, "lr_lr", p, n, _two_level_lengths(n, k, nn), k=k)


def lr_rab(p: int, n: int, k: int) -> Schedule:
    """Multi-leader hierarchical allreduce: intra-node rings, inter-node Rabenseifner.

    Each leader's chunk is split into ``pof2_floor(N)`` blocks for the
    inter-node Rabenseifner (with fold-in when ``N`` is not a power of two).
    """
    _check(p, n)
    nn = _nodes(p, k)
    sub = pof2_floor(nn)
    ph = seq(*_multileader_stages(k, nn, sub, 0, "rab"))
    return _allreduce(ph, "lr_rab", p, n, _two_level_lengths(n, k, sub), k=k)


def pipeline_offsets(len_rs: int, len_inter: int, len_ag: int, segments: int) -> list[tuple[int, int, int]]:
    """Start steps of the three pipeline stages of every segment.

    Macro step ``t`` (``t = 0 .. S+1``) runs stage 0 of segment ``t``, stage 1
    of segment ``t-1`` and stage 2 of segment ``t-2``; it lasts as long as its
    longest active stage.

    Returns
    -------
    list[tuple[int, int, int]]
        ``out[s]`` = start steps of (intra reduce-scatter, inter-node, intra
        allgather) of segment ``s``.
    """
    lens = (len_rs, len_inter, len_ag)
    start = 0
    starts: list[list[int]] = [[0, 0, 0] for _ in range(segments)]
    for t in range(segments + 2):
        active = [(st, t - st) for st in range(3) if 0 <= t - st < segments]
        for st, seg in active:
            starts[seg][st] = start
        start += max((lens[st] for st, _ in active), default=0)
    return [tuple(s) for s in starts]  # type: ignore[misc]


def lr_lr_pipe(p: int, n: int, k: int, segments: int = 2) -> Schedule:
    """Pipelined ``lr_lr``: ``segments`` pieces through a three-stage pipeline.

    With ``segments=1`` the schedule is step for step ``lr_lr``.  The overlap
    pattern is reconstructed (see the module docstring).
    """
    _check(p, n)
    if segments < 1:
        raise ValueError("segments must be >= 1")
    nn = _nodes(p, k)
    per_seg = k * nn
    lengths = [x for seg in split_lengths(n, segments) for x in _two_level_lengths(seg, k, nn)]
    stages = [_multileader_stages(k, nn, nn, s * per_seg, "ring") for s in range(segments)]
    offs = pipeline_offsets(len(stages[0][0]), len(stages[0][1]), len(stages[0][2]), segments)
    parts = [(offs[s][st], stages[s][st]) for s in range(segments) for st in range(3)]
    return _allreduce(par_at(parts), "lr_lr_pipe", p, n, lengths, k=k, segments=segments)
