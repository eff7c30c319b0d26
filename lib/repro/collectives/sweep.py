"""Sweep plumbing shared by the SimGrid chapters: points, platforms, closed forms and rows.

A sweep is a list of :class:`Point` s (a platform, an algorithm, a size).  For
each point :func:`run_points` builds the schedule, evaluates the closed-form
alpha-beta cost (:func:`closed_form`), the platform-aware alpha-beta cost with
link sharing (:func:`~repro.collectives.congestion.congestion_cost`) and, when
asked, the SimGrid simulation (:func:`~repro.hpc.simgrid.simulate`),
and returns one table row.  Each simulation runs in its own child process, so
a pool of threads overlaps them (``workers``) and shares one platform cache.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from repro.collectives import cost as cm
from repro.collectives.algorithms import build_schedule, closed_form_cost, parse_spec
from repro.collectives.congestion import congestion_cost, contention_of, max_link_flows, step_link_flows
from repro.hpc import platforms as plat
from repro.hpc.simgrid import simulate
from repro.parallel import thread_map

MiB = 2**20
ELEMENT_BYTES = 4
"""Bytes per vector element in the collectives chapters (float32 gradients)."""

PlatformKey = tuple[str, tuple[tuple[str, Any], ...]]


@dataclass(frozen=True, kw_only=True)
class Point:
    """One (platform, algorithm, size) point of a sweep.

    Attributes
    ----------
    platform:
        ``(builder name in repro.hpc.platforms, sorted keyword items)``, see :func:`platform_key`.
    spec:
        Algorithm spec, e.g. ``"lr_lr:k=4"`` (see :func:`~repro.collectives.algorithms.parse_spec`).
    p:
        Ranks.
    nbytes:
        Allreduce vector bytes, or per-pair block bytes of an all-to-all.
    simulate:
        Run SimGrid for this point (otherwise only the two models).
    tags:
        Extra columns copied into the row (e.g. ``("network", "dln")``).
    """

    platform: PlatformKey
    spec: str
    p: int
    nbytes: int
    simulate: bool = True
    tags: tuple[tuple[str, Any], ...] = field(default_factory=tuple)


class LinkConstants:
    """A chapter ``Params`` mixin: its ``link_gbs`` and ``link_latency_us`` fields in SI units."""

    link_gbs: float
    link_latency_us: float

    @property
    def bandwidth(self) -> float:
        """Link bandwidth, bytes/s."""
        return self.link_gbs * 1e9

    @property
    def latency(self) -> float:
        """Link latency, s."""
        return self.link_latency_us * 1e-6


def platform_key(builder: str, **kwargs: Any) -> PlatformKey:
    """Hashable description of a platform: builder name and its keyword arguments."""
    if not hasattr(plat, builder):
        raise ValueError(f"unknown platform builder {builder!r}")
    return builder, tuple(sorted(kwargs.items()))


@functools.lru_cache(maxsize=32)
def build_platform(key: PlatformKey) -> plat.Platform:
    """Build (and cache) the platform described by :func:`platform_key`."""
    builder, items = key
    return getattr(plat, builder)(**dict(items))


def closed_form(point: Point) -> float:
    """Closed-form alpha-beta time of a point, with the platform's constants.

    * GPU cluster (``gpu_cluster``): the two-level formulas of
      :func:`~repro.collectives.cost.hierarchical_closed_form`;
    * DLN and fat tree: :func:`~repro.collectives.cost.halving_doubling_closed_form`
      for Rabenseifner, the ring formula with the longest route's latency for
      ``ring``;
    * 2dfc: :func:`~repro.collectives.algorithms.closed_form_cost` with one
      link's latency and bandwidth (the multi-port model of the paper).

    Returns NaN where no closed form applies (e.g. the pipelined variant).
    """
    builder, items = point.platform
    kw = dict(items)
    name, params = parse_spec(point.spec)
    if builder == "gpu_cluster":
        return cm.hierarchical_closed_form(name, kw, point.nbytes, **params)
    if builder in ("distributed_loop", "fat_tree"):
        pf = build_platform(point.platform)
        alpha = max(pf.route_latency(i, j) for (i, j) in pf.routes)
        beta = 1.0 / kw["bandwidth"]
        if name == "ring":
            return cm.ring_cost(point.p, point.nbytes, alpha, beta)
        if name == "rabenseifner":
            group, share = contention_of(builder, kw)
            return cm.halving_doubling_closed_form(point.p, point.nbytes, alpha, beta, group, share)
        return float("nan")
    if builder == "two_dim_fc":
        return closed_form_cost(name, point.p, point.nbytes, kw["latency"], 1.0 / kw["bandwidth"], **params)
    return float("nan")


def run_point(point: Point) -> dict[str, Any]:
    """Evaluate one point: closed form, congestion-aware model and (optionally) SimGrid."""
    name, params = parse_spec(point.spec)
    n = point.nbytes // ELEMENT_BYTES
    sched = build_schedule(name, point.p, n, **params)
    pf = build_platform(point.platform)
    row: dict[str, Any] = dict(point.tags)
    flows = step_link_flows(sched, pf)
    row.update(algorithm=point.spec, p=point.p, nbytes=point.nbytes, steps=len(sched.comm_steps()),
               closed_form_s=closed_form(point), model_s=congestion_cost(sched, pf, ELEMENT_BYTES, flows=flows),
               max_link_flows=max(max_link_flows(sched, pf, flows=flows), default=0))
    if point.simulate:
        res = simulate(sched, pf, ELEMENT_BYTES)
        row.update(sim_s=res.time, sim_wall_s=res.wall_s)
    else:
        row.update(sim_s=float("nan"), sim_wall_s=float("nan"))
    return row


def run_points(points: Sequence[Point], workers: int = 1, desc: str = "points") -> pd.DataFrame:
    """Run every point (``workers`` at a time, with a progress bar) and return one row per point, in order.

    Raises
    ------
    ValueError
        If ``workers`` is below 1.
    """
    if workers < 1:
        raise ValueError(f"parameter 'workers': must be >= 1, got {workers}")
    # Build every platform once in this thread (the cache is shared by the pool's threads).
    for key in dict.fromkeys(pt.platform for pt in points):
        build_platform(key)
    return pd.DataFrame(thread_map(run_point, points, workers, desc=desc))
