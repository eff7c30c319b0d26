"""Paper-scale exchange times of the two-phase kernels: SimGrid and the endpoint model.

The exact MPI runs (:mod:`repro.pario.mpi_worker`) check what the kernels
deliver; their timings on an oversubscribed 2-core host are not evidence.
Times at the paper's scale (thousands of ranks) come from two models whose
constants are stated and swept:

* **SimGrid** (the shared executor :func:`repro.hpc.simgrid.simulate`)
  runs the kernel's IR schedule on a Dragonfly
  (:func:`repro.hpc.dragonfly.dragonfly`) with a per-message start-up
  ``alpha`` at both ends.  Its flow model shares links max-min fairly and
  has no notion of MPI's message queues.  The platform is written as SimGrid
  zones (routes composed by SimGrid), so thousands of hosts load; the flow
  solver's work, which grows with the flows in flight, is what bounds a run
  (:attr:`~repro.pario.kernels.RoundTable.busiest_round` estimates them).
* **The endpoint model** (:func:`repro.pario.kernels.endpoint_model`) adds the
  per-message queue-search term ``n (o0 + o1 n)`` at a receiver with ``n``
  posted receives, and runs to 16384 ranks in milliseconds.

Access patterns at scale come from :func:`repro.pario.decomp.irregular_run_table`
counted per (sender, aggregator) by :func:`repro.pario.twophase.pair_counts`.
:func:`best_speedup` compares a baseline with the best of its alternatives
in a table of such times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from repro.hpc.dragonfly import dragonfly, with_endpoint_overhead
from repro.hpc.platforms import Platform
from repro.hpc.simgrid import simulate
from repro.pario.decomp import irregular_run_table
from repro.pario.kernels import EndpointModel, KernelSpec, endpoint_model, round_table, to_schedule
from repro.pario.twophase import aggregator_ranks, file_domains, pair_counts


@dataclass(frozen=True, kw_only=True)
class Pattern:
    """An all-to-many pattern at scale: ``p`` senders, ``A`` aggregators, bytes per pair.

    Attributes
    ----------
    p:
        Number of ranks.
    aggregators:
        Rank of each aggregator.
    counts:
        ``p x A`` bytes from each sender to each aggregator.
    pieces:
        Noncontiguous runs each rank writes.
    """

    p: int
    aggregators: tuple[int, ...]
    counts: np.ndarray
    pieces: np.ndarray

    @property
    def messages(self) -> int:
        """Messages of an all-at-once exchange (pairs with data, not to oneself)."""
        agg = np.asarray(self.aggregators)
        return int(((self.counts > 0) & (np.arange(self.p)[:, None] != agg[None, :])).sum())


def irregular_pattern(p: int, ranks_per_aggregator: int, bytes_per_rank: int, mean_run: int, seed: int,
                      skew: float = 0.0) -> Pattern:
    """An E3SM-like pattern: ``p * bytes_per_rank`` bytes in short runs, one aggregator per node.

    Parameters
    ----------
    p:
        Number of ranks.
    ranks_per_aggregator:
        Ranks per node; the ``A = p / ranks_per_aggregator`` aggregators (ROMIO's
        default of one per node) own even file domains.
    bytes_per_rank:
        Mean bytes each rank writes.
    mean_run:
        Mean run length (bytes).
    seed:
        Seed of the map.
    skew:
        Unevenness of the ranks' shares (see :func:`~repro.pario.decomp.irregular_runs`).
    """
    if p % ranks_per_aggregator:
        raise ValueError(f"p={p} is not a multiple of ranks_per_aggregator={ranks_per_aggregator}")
    A = p // ranks_per_aggregator
    size = p * bytes_per_rank
    runs = irregular_run_table(size, p, mean_run, seed, skew=skew)
    counts = pair_counts(runs, file_domains(0, size, A))
    return Pattern(p=p, aggregators=tuple(aggregator_ranks(p, A)), counts=counts, pieces=np.bincount(runs.owner, minlength=p))


@dataclass(frozen=True, kw_only=True)
class DragonflyConstants:
    """Platform constants of the SimGrid runs (bytes/s and seconds).

    Attributes
    ----------
    bandwidth:
        Host and local link bandwidth.
    global_bandwidth:
        Bandwidth of a link between groups.
    link_latency, switch_latency:
        Wire and router latency per hop.
    alpha:
        Per-message software start-up, half at each end.
    """

    bandwidth: float
    global_bandwidth: float
    link_latency: float
    switch_latency: float
    alpha: float


def dragonfly_shape(p: int, hosts_per_router: int) -> tuple[int, int]:
    """``(groups, routers per group)`` of the smallest near-square Dragonfly holding ``p`` hosts."""
    if p % hosts_per_router:
        raise ValueError(f"p={p} is not a multiple of hosts_per_router={hosts_per_router}")
    routers_total = p // hosts_per_router
    routers = max(1, int(np.sqrt(routers_total)))
    while routers_total % routers:
        routers -= 1
    return routers_total // routers, routers


def platform_for(p: int, hosts_per_router: int, constants: DragonflyConstants) -> Platform:
    """The Dragonfly platform of ``p`` hosts with the endpoint start-up added."""
    groups, routers = dragonfly_shape(p, hosts_per_router)
    pf = dragonfly(groups, routers, hosts_per_router, constants.bandwidth, constants.link_latency,
                   constants.switch_latency, constants.global_bandwidth)
    return with_endpoint_overhead(pf, constants.alpha)


SIMGRID_TIMEOUT_S = 6 * 3600.0
"""Wall-clock limit of one SimGrid point.  The paper profiles' unordered exchange at 1024 ranks of 64 per node
(16,368 flows in flight at once) took SimGrid 18 minutes on a moderately loaded host; one of 512 ranks of 16 per
router (about as many flows) was still running after 50 minutes under heavier load."""


@dataclass(frozen=True, kw_only=True)
class SimPoint:
    """One SimGrid run of a kernel on a pattern.

    Attributes
    ----------
    kernel:
        The kernel's label.
    p:
        Number of ranks.
    time:
        Simulated exchange time (s).
    rounds, messages:
        The kernel's rounds and messages.
    wall_s:
        Wall time of the simulation itself (s).
    """

    kernel: str
    p: int
    time: float
    rounds: int
    messages: int
    wall_s: float


def simulate_kernel(pattern: Pattern, kernel: KernelSpec | str, platform: Platform,
                    timeout: float = SIMGRID_TIMEOUT_S, placement: list[int] | None = None) -> SimPoint:
    """Run one kernel's exchange schedule for ``pattern`` on ``platform`` with SimGrid.

    ``placement[r]`` is the host of rank ``r`` (default: host ``r``).
    """
    table = round_table(kernel, pattern.counts, pattern.aggregators)
    schedule = to_schedule(table, pattern.counts)
    res = simulate(schedule, platform, itemsize=1, timeout=timeout, placement=placement)
    return SimPoint(kernel=table.kernel.label, p=pattern.p, time=res.time, rounds=table.num_rounds,
                    messages=int((table.rounds >= 0).sum()), wall_s=res.wall_s)


def model_time(pattern: Pattern, kernel: KernelSpec | str, model: EndpointModel) -> float:
    """The endpoint model's exchange time of one kernel on ``pattern`` (s)."""
    return endpoint_model(round_table(kernel, pattern.counts, pattern.aggregators), pattern.counts, model)


def best_speedup(times: pd.DataFrame, *, keys: Sequence[str], label: str, baseline: str,
                 is_candidate: Callable[[pd.Series], pd.Series], column: str) -> pd.DataFrame:
    """The baseline's time over the best candidate's, per group of the key columns present in ``times``.

    Parameters
    ----------
    times
        One row per (point, method): the key columns, ``label`` and ``column``.
    keys
        Columns that name a point (``p``, ``seed``, ``o1`` ...); those absent from ``times`` are skipped.
    label
        The column that names the method (``kernel``, ``method``).
    baseline
        The baseline's name in ``label``; each group holds exactly one baseline row.
    is_candidate
        Marks, from the ``label`` column of a group, the rows the best is chosen among.
    column
        The time column (lower is better).

    Returns
    -------
    pandas.DataFrame
        The key columns present, ``best`` (the winning candidate's name) and
        ``speedup`` (baseline time over the best candidate's time).
    """
    present = [c for c in keys if c in times.columns]
    rows = []
    for key, grp in times.groupby(present):
        base = float(grp[grp[label] == baseline][column].iloc[0])
        candidates = grp[is_candidate(grp[label])]
        best = candidates.loc[candidates[column].idxmin()]
        rows.append(dict(zip(present, key if isinstance(key, tuple) else (key,)), best=best[label],
                         speedup=base / float(best[column])))
    return pd.DataFrame(rows)
