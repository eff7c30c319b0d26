"""Alpha-beta(-gamma) (Hockney) costs: closed forms and the cost of a schedule.

Model (multi-port, no contention): a step costs, on each rank, the slowest of
its messages (``alpha + bytes*beta``, sent or received) plus ``gamma`` times
the bytes it reduces in that step; a step costs its slowest rank; a schedule
costs the sum of its communicating steps.  Local copies are free.  With
``ports="single"`` a rank's sends (and, separately, its receives) are
serialised instead.  Under the multi-port model a rank's messages of one step
proceed in parallel even when two go to the same peer (this happens in
``lr_lr_pipe``, where the intra-node reduce-scatter of one segment and the
intra-node allgather of another overlap); SimGrid would make them share the
link.  For algorithms with one send and one receive per rank per
step both models agree; the all-to-all closed forms below are for the
multi-port model.

All closed forms take ``n`` in bytes (the allreduce vector, or the per-pair
block ``m`` of an all-to-all) and assume ``n`` divides evenly into the
algorithm's blocks; for other ``n`` the schedule's own cost
(:func:`schedule_cost`) is the exact value under the model.
"""

from __future__ import annotations

import math
from typing import Any

from repro.collectives.allreduce import pipeline_offsets
from repro.collectives.alltoall import resolve_grid
from repro.collectives.phases import ceil_log2, pof2_floor
from repro.hpc.ir import SUM, Schedule
from repro.hpc.platforms import GpuClusterSettings


def schedule_cost(schedule: Schedule, itemsize: int, alpha: float, beta: float,
                  gamma: float = 0.0, ports: str = "multi") -> float:
    """Cost of ``schedule`` in seconds under the alpha-beta-gamma model.

    Parameters
    ----------
    schedule:
        The schedule.
    itemsize:
        Bytes per element.
    alpha, beta, gamma:
        Start-up latency (s), time per byte on a link (s/B), time per reduced
        byte (s/B).
    ports:
        ``"multi"`` (all of a rank's messages in a step proceed in parallel) or
        ``"single"`` (a rank's sends are serialised, as are its receives).

    Returns
    -------
    float
        Total time in seconds.
    """
    if ports not in ("multi", "single"):
        raise ValueError(f"ports must be 'multi' or 'single', not {ports!r}")
    total = 0.0
    for row in schedule.steps:
        worst = 0.0
        for st in row:
            if not st.communicates:
                continue
            sends = [alpha + schedule.blocks_length(sd.blocks) * itemsize * beta for sd in st.sends]
            recvs = [alpha + schedule.blocks_length(rv.blocks) * itemsize * beta for rv in st.recvs]
            if ports == "multi":
                comm = max(sends + recvs)
            else:
                comm = max(sum(sends), sum(recvs))
            reduced = sum(schedule.blocks_length(rv.blocks) for rv in st.recvs if rv.op == SUM)
            worst = max(worst, comm + gamma * reduced * itemsize)
        total += worst
    return total


# ------------------------------------------------------------------ allreduce
def ring_cost(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Ring: ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma``."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def _fold_cost(p: int, n: float, alpha: float, beta: float, gamma: float) -> float:
    """Extra cost of the non-power-of-two fold-in: two whole-vector steps and one reduction."""
    return 0.0 if p == pof2_floor(p) else 2 * (alpha + n * beta) + n * gamma


def recursive_doubling_cost(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Recursive doubling: ``log2(p') (alpha + n beta + n gamma)`` plus the fold-in."""
    q = pof2_floor(p)
    return math.log2(q) * (alpha + n * beta + n * gamma) + _fold_cost(p, n, alpha, beta, gamma)


def rabenseifner_cost(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Rabenseifner: ``2 log2(p') alpha + 2(p'-1)/p' n beta + (p'-1)/p' n gamma`` plus the fold-in."""
    q = pof2_floor(p)
    return (2 * math.log2(q) * alpha + 2 * (q - 1) / q * n * beta + (q - 1) / q * n * gamma
            + _fold_cost(p, n, alpha, beta, gamma))


def binomial_cost(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Binomial reduce + broadcast: ``ceil(log2 p) (2 alpha + 2 n beta + n gamma)``."""
    return ceil_log2(p) * (2 * alpha + 2 * n * beta + n * gamma)


def lr_lr_cost(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0, k: int = 1) -> float:
    """Multi-leader ring/ring: ``ring(k, n)`` inside nodes + ``ring(N, n/k)`` across nodes."""
    nn = p // k
    return ring_cost(k, n, alpha, beta, gamma) + ring_cost(nn, n / k, alpha, beta, gamma)


def lr_rab_cost(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0, k: int = 1) -> float:
    """Multi-leader ring/Rabenseifner: ``ring(k, n)`` inside nodes + ``rab(N, n/k)`` across nodes."""
    nn = p // k
    return ring_cost(k, n, alpha, beta, gamma) + rabenseifner_cost(nn, n / k, alpha, beta, gamma)


def lr_lr_pipe_cost(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0,
                    k: int = 1, segments: int = 2) -> float:
    """Pipelined multi-leader ring/ring (our three-stage pipeline).

    Intra-node stages move ``c_I = n/(kS)`` per message for ``k-1`` steps; the
    inter-node stage moves ``c_X = n/(kNS)`` for ``2(N-1)`` steps (reducing in
    the first ``N-1``).  Stages of one macro step start together; in every
    step the cost is ``alpha`` plus ``beta`` times the largest active message
    plus ``gamma`` times the bytes a rank reduces (intra and inter reductions
    of the same step add up).
    """
    nn, S = p // k, segments
    c_i, c_x = n / (k * S), n / (k * nn * S)
    lens = (k - 1, 2 * (nn - 1), k - 1)
    offs = pipeline_offsets(*lens, S)
    horizon = max((offs[s][st] + lens[st] for s in range(S) for st in range(3)), default=0)
    total = 0.0
    for t in range(horizon):
        msg, red = 0.0, 0.0
        active = False
        for s in range(S):
            i_rs, i_x, i_ag = t - offs[s][0], t - offs[s][1], t - offs[s][2]
            if 0 <= i_rs < lens[0]:
                active, msg, red = True, max(msg, c_i), red + c_i
            if 0 <= i_x < lens[1]:
                active, msg = True, max(msg, c_x)
                red += c_x if i_x < nn - 1 else 0.0
            if 0 <= i_ag < lens[2]:
                active, msg = True, max(msg, c_i)
        if active:
            total += alpha + msg * beta + red * gamma
    return total


# ------------------------------------------------------------------- all-to-all
def linear_a2a_cost(p: int, m: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Direct all-to-all, multi-port: one step of ``alpha + m beta``."""
    return 0.0 if p == 1 else alpha + m * beta


def pairwise_cost(p: int, m: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Pairwise exchange: ``(p-1)(alpha + m beta)``."""
    return (p - 1) * (alpha + m * beta)


def bruck_cost(p: int, m: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Bruck: ``sum_s (alpha + b_s m beta)``, ``b_s`` = number of ``i < p`` with bit ``s`` set.

    For ``p`` a power of two this is ``log2(p) (alpha + p/2 m beta)``.
    """
    total = 0.0
    for s in range((p - 1).bit_length()):
        count = sum(1 for i in range(p) if (i >> s) & 1)
        total += alpha + count * m * beta
    return total


def two_dim_cost(p: int, m: float, alpha: float, beta: float, gamma: float = 0.0,
                 rows: int | None = None, striped: bool = True) -> float:
    """Two-phase 2dfc all-to-all on ``R x C``.

    Striped: ``2 (alpha + max(R, C) m/2 beta)`` (for ``R, C > 1``), i.e.
    ``2 alpha + k m beta`` for ``R = C = k``, the multi-port lower bound's
    bandwidth term.  Non-striped: ``(alpha + R m beta) + (alpha + C m beta)``.
    A dimension of size one has no links and contributes nothing.
    """
    R, C = resolve_grid(p, rows)
    if p == 1:
        return 0.0
    row_load = R if C > 1 else 0  # halves (or blocks) per row-link message
    col_load = C if R > 1 else 0
    if striped:
        return 2 * (alpha + max(row_load, col_load) * m / 2 * beta)
    total = 0.0
    if C > 1:
        total += alpha + R * m * beta
    if R > 1:
        total += alpha + C * m * beta
    return total


# ------------------------------------------------------------ platform-level closed forms
def hierarchical_closed_form(name: str, kw: dict[str, Any], nbytes: float, k: int | None = None,
                             segments: int | None = None) -> float:
    """Two-level alpha-beta time on a :func:`~repro.hpc.platforms.gpu_cluster`.

    ``kw`` holds the builder's ``nodes``, ``gpus_per_node`` and ``settings``
    (:class:`~repro.hpc.platforms.GpuClusterSettings`, its defaults when absent).
    Intra-node messages cost ``alpha_i + b/B_nvlink``; inter-node messages
    ``alpha_x + b * s / B_nic`` where ``alpha_x`` is the latency of the
    5-link route and ``s`` the number of concurrent flows that share one NIC
    (``1`` for the flat ring, whose only inter-node flow per node is its
    wrap-around; ``k / nics_per_node`` for the multi-leader algorithms).

    * ``ring`` (``lr``): ``2(P-1)(alpha_x + n/P beta_x)``, every step waits
      for its one inter-node message;
    * ``lr_lr``: ``ring(k, n)`` on NVLink + ``ring(N, n/k)`` across nodes;
    * ``lr_rab``: ``ring(k, n)`` on NVLink + ``rab(N, n/k)`` across nodes.

    Other algorithms give NaN (their time is read from the route-aware model).
    """
    N, kk = kw["nodes"], kw["gpus_per_node"]
    links = kw.get("settings") or GpuClusterSettings()
    P = N * kk
    a_i, b_i = links.nvlink_latency, 1.0 / links.nvlink_bandwidth
    a_x, b_x = links.inter_node_latency, links.inter_node_beta
    share = kk // links.nics_per_node
    if name == "ring":
        return 2 * (P - 1) * (a_x + nbytes / P * b_x) if N > 1 else ring_cost(P, nbytes, a_i, b_i)
    if k is not None and k != kk:
        return float("nan")
    if name == "lr_lr":
        return ring_cost(kk, nbytes, a_i, b_i) + ring_cost(N, nbytes / kk, a_x, b_x * share)
    if name == "lr_rab":
        return ring_cost(kk, nbytes, a_i, b_i) + rabenseifner_cost(N, nbytes / kk, a_x, b_x * share)
    return float("nan")


def halving_doubling_closed_form(p: int, nbytes: float, alpha: float, beta: float,
                                 group: int = 1, share: float = 1.0) -> float:
    """Rabenseifner (halving-doubling) time with contention on far steps.

    Halving step ``s`` (partner distance ``p/2^(s+1)``) and its mirror
    doubling step each move ``n/2^(s+1)`` bytes; when the distance is at
    least ``group`` (hosts per switch or leaf) the flows of a group share an
    uplink ``share`` ways (``1``: no contention; ``p``-host switches with one
    chord: ``share = group``; a 2:1 tapered fat tree: ``share = 2``).

    With ``share = 1`` this is ``2 log2(p) alpha + 2 (p-1)/p n beta``.
    """
    if p & (p - 1):
        raise ValueError(f"p={p} must be a power of two")
    total = 0.0
    for s in range(int(math.log2(p))):
        dist, size = p >> (s + 1), nbytes / 2 ** (s + 1)
        total += 2 * (alpha + size * beta * (share if dist >= group else 1.0))
    return total
