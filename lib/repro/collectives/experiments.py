"""Drivers of the collectives chapters: simulation sweeps, closed forms, MPI checks and claims.

A sweep is a list of :class:`Point` s (a platform, an algorithm, a size).  For
each point :func:`run_points` builds the schedule, evaluates the closed-form
alpha-beta cost (:func:`closed_form`), the platform-aware alpha-beta cost with
link sharing (:func:`~repro.collectives.congestion.congestion_cost`) and, when
asked, the SimGrid simulation (:func:`~repro.collectives.executors.simgrid.simulate`),
and returns one table row.  Simulations run in child processes, so a thread
pool overlaps them (``workers``).

Chapter drivers: :func:`multileader_points`, :func:`a2a_points`,
:func:`dln_points` build the sweeps; :func:`multileader_claims`,
:func:`a2a_claims`, :func:`dln_claims` turn the resulting table into the
per-run values the ledger records.  :func:`mpi_exactness` runs the same
schedules on a real MPI and compares them with MPI's own collective.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from repro.collectives import cost as cm
from repro.collectives import platforms as plat
from repro.collectives.algorithms import build_schedule, closed_form_cost, parse_spec
from repro.collectives.congestion import (LinkPower, congestion_cost, link_energy, max_link_flows,
                                          step_link_flows)
from repro.collectives.executors.mpi_worker import launch_worker
from repro.collectives.executors.simgrid import simulate

MiB = 2**20
ITEMSIZE = 4  # float32 gradients / 4-byte elements everywhere in these chapters


# ------------------------------------------------------------------ generic sweep
@dataclass(frozen=True)
class Point:
    """One (platform, algorithm, size) point of a sweep.

    Attributes
    ----------
    platform:
        ``(builder name in repro.collectives.platforms, sorted keyword items)``.
    spec:
        Algorithm spec, e.g. ``"lr_lr:k=4"`` (see :func:`parse_spec`).
    p:
        Ranks.
    nbytes:
        Allreduce vector bytes, or per-pair block bytes of an all-to-all.
    simulate:
        Run SimGrid for this point (otherwise only the two models).
    tags:
        Extra columns copied into the row (e.g. ``("network", "dln")``).
    """

    platform: tuple[str, tuple[tuple[str, Any], ...]]
    spec: str
    p: int
    nbytes: int
    simulate: bool = True
    tags: tuple[tuple[str, Any], ...] = field(default_factory=tuple)


def platform_key(builder: str, **kwargs: Any) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """Hashable description of a platform: builder name and its keyword arguments."""
    if not hasattr(plat, builder):
        raise ValueError(f"unknown platform builder {builder!r}")
    return builder, tuple(sorted(kwargs.items()))


@functools.lru_cache(maxsize=32)
def build_platform(key: tuple[str, tuple[tuple[str, Any], ...]]) -> plat.Platform:
    """Build (and cache) the platform described by :func:`platform_key`."""
    builder, items = key
    return getattr(plat, builder)(**dict(items))


def closed_form(point: Point) -> float:
    """Closed-form alpha-beta time of a point, with the platform's constants.

    * GPU cluster (``gpu_cluster``): the two-level formulas of
      :func:`hierarchical_closed_form`;
    * DLN and fat tree: :func:`halving_doubling_closed_form` for
      Rabenseifner, the ring formula with the longest route's latency for
      ``ring``;
    * 2dfc: :func:`~repro.collectives.algorithms.closed_form_cost` with one
      link's latency and bandwidth (the multi-port model of the paper).

    Returns NaN where no closed form applies (e.g. the pipelined variant).
    """
    builder, items = point.platform
    kw = dict(items)
    name, params = parse_spec(point.spec)
    if builder == "gpu_cluster":
        return hierarchical_closed_form(name, kw, point.nbytes, **params)
    if builder in ("distributed_loop", "fat_tree"):
        pf = build_platform(point.platform)
        alpha = max(pf.route_latency(i, j) for (i, j) in pf.routes)
        beta = 1.0 / kw["bandwidth"]
        if name == "ring":
            return cm.ring_cost(point.p, point.nbytes, alpha, beta)
        if name == "rabenseifner":
            group, share = contention_of(builder, kw)
            return halving_doubling_closed_form(point.p, point.nbytes, alpha, beta, group, share)
        return float("nan")
    if builder == "two_dim_fc":
        return closed_form_cost(name, point.p, point.nbytes, kw["latency"], 1.0 / kw["bandwidth"], **params)
    return float("nan")


def run_point(point: Point) -> dict[str, Any]:
    """Evaluate one point: closed form, congestion-aware model and (optionally) SimGrid."""
    name, params = parse_spec(point.spec)
    n = point.nbytes // ITEMSIZE
    sched = build_schedule(name, point.p, n, **params)
    pf = build_platform(point.platform)
    row: dict[str, Any] = dict(point.tags)
    flows = step_link_flows(sched, pf)
    row.update(algorithm=point.spec, p=point.p, nbytes=point.nbytes, steps=len(sched.comm_steps()),
               closed_form_s=closed_form(point), model_s=congestion_cost(sched, pf, ITEMSIZE, flows=flows),
               max_link_flows=max(max_link_flows(sched, pf, flows=flows), default=0))
    if point.simulate:
        res = simulate(sched, pf, ITEMSIZE)
        row.update(sim_s=res.time, sim_wall_s=res.wall_s)
    else:
        row.update(sim_s=float("nan"), sim_wall_s=float("nan"))
    return row


def run_points(points: Sequence[Point], workers: int = 1,
               progress: Callable[[Iterable[Any], int], Iterable[Any]] | None = None) -> pd.DataFrame:
    """Run every point (``workers`` at a time) and return one row per point, in order.

    ``progress`` optionally wraps the iterator of results (e.g. ``tqdm``).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    # Build every platform once in this thread (the cache is shared by the pool's threads).
    for key in dict.fromkeys(pt.platform for pt in points):
        build_platform(key)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        it = pool.map(run_point, points)
        if progress is not None:
            it = progress(it, len(points))
        rows = list(it)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ closed forms
def hierarchical_closed_form(name: str, kw: dict[str, Any], nbytes: float, k: int | None = None,
                             segments: int | None = None) -> float:
    """Two-level alpha-beta time on a :func:`~repro.collectives.platforms.gpu_cluster`.

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
    P = N * kk
    a_i, b_i = kw.get("nvlink_latency", 1e-6), 1.0 / kw.get("nvlink_bandwidth", 50e9)
    a_x = (2 * kw.get("pcie_latency", 5e-7) + 2 * kw.get("nic_latency", 5e-7)
           + kw.get("switch_hops", 3) * kw.get("switch_latency", 1e-7))
    b_x = 1.0 / min(kw.get("nic_bandwidth", 12.5e9), kw.get("pcie_bandwidth", 16e9))
    share = kk // kw.get("nics_per_node", 2)
    if name == "ring":
        return 2 * (P - 1) * (a_x + nbytes / P * b_x) if N > 1 else cm.ring_cost(P, nbytes, a_i, b_i)
    if k is not None and k != kk:
        return float("nan")
    if name == "lr_lr":
        return cm.ring_cost(kk, nbytes, a_i, b_i) + cm.ring_cost(N, nbytes / kk, a_x, b_x * share)
    if name == "lr_rab":
        return cm.ring_cost(kk, nbytes, a_i, b_i) + cm.rabenseifner_cost(N, nbytes / kk, a_x, b_x * share)
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


def contention_of(builder: str, kw: dict[str, Any]) -> tuple[int, float]:
    """``(hosts per switch/leaf, flows sharing an uplink)`` of a DLN or fat-tree platform."""
    if builder == "distributed_loop":
        p = kw["hosts_per_switch"]
        return p, p / kw.get("chord_copies", 1)
    if builder == "fat_tree":
        return kw["hosts_per_leaf"], kw["hosts_per_leaf"] / kw["spines"]
    raise ValueError(f"no contention model for {builder!r}")


# ------------------------------------------------------------------ multileader-allreduce
TSUBAME_LINK_POWER = {
    "nvlink": LinkPower(11.2 / 2),
    "pcie": LinkPower(1.0 / 2),
    # One NIC port = an edge-switch down port, its 1:1 up port and a spine port (W per port, halved per direction).
    "ib": LinkPower((408 / 48 + 408 / 48 + 11600 / 768) / 2),
}
"""Peak power per directed link (idle = 85% of peak), from the authors' TSUBAME3 platform constants
as summarised in spec ``multileader-allreduce`` (edge switch 408 W / 48 ports, spine 11600 W / 768 ports,
NVLink 11.2 W, PCIe 1 W)."""


def gpu_link_class(name: str) -> str | None:
    """Power class of a :func:`~repro.collectives.platforms.gpu_cluster` link (None: not counted)."""
    for prefix, cls in (("nvl", "nvlink"), ("pcie", "pcie"), ("nic", "ib")):
        if name.startswith(prefix):
            return cls
    return None


def multileader_specs(gpus_per_node: int, segments: Sequence[int], baselines: Sequence[str]) -> list[str]:
    """Algorithm specs of the chapter: baselines, ``lr_lr``, ``lr_rab`` and ``lr_lr_pipe`` per segment count."""
    k = gpus_per_node
    return ([*baselines, f"lr_lr:k={k}", f"lr_rab:k={k}"]
            + [f"lr_lr_pipe:k={k},segments={s}" for s in segments])


def multileader_points(nodes: Sequence[int], gpus_per_node: int, sizes_mb: Sequence[float],
                       sim_sizes_mb: Sequence[float], segments: Sequence[int],
                       baselines: Sequence[str] = ("ring",), **platform_kw: Any) -> list[Point]:
    """Points of the multi-leader chapter: every node count x algorithm x size.

    SimGrid runs at ``sim_sizes_mb`` only; the two alpha-beta models at every size.
    """
    pts = []
    for N in nodes:
        key = platform_key("gpu_cluster", nodes=N, gpus_per_node=gpus_per_node, **platform_kw)
        for spec in multileader_specs(gpus_per_node, segments, baselines):
            for mb in sizes_mb:
                pts.append(Point(key, spec, N * gpus_per_node, int(mb * MiB), mb in sim_sizes_mb,
                                 (("nodes", N),)))
    return pts


def add_energy(df: pd.DataFrame, gpus_per_node: int, **platform_kw: Any) -> pd.DataFrame:
    """Add ``energy_J``: network energy of every simulated row (links draw idle power for the run)."""
    out = df.copy()
    energy = []
    for row in out.itertuples():
        if not np.isfinite(row.sim_s):
            energy.append(float("nan"))
            continue
        key = platform_key("gpu_cluster", nodes=row.nodes, gpus_per_node=gpus_per_node, **platform_kw)
        name, params = parse_spec(row.algorithm)
        sched = build_schedule(name, row.p, row.nbytes // ITEMSIZE, **params)
        energy.append(link_energy(sched, build_platform(key), row.sim_s, TSUBAME_LINK_POWER,
                                  gpu_link_class, ITEMSIZE))
    out["energy_J"] = energy
    return out


def reduction_pct(df: pd.DataFrame, ours: str, base: str, column: str = "sim_s",
                  by: Sequence[str] = ("nodes", "nbytes")) -> pd.Series:
    """Percent reduction of ``column`` of algorithm ``ours`` against ``base``, per ``by`` group."""
    piv = df.pivot_table(index=list(by), columns="algorithm", values=column)
    return 100.0 * (1.0 - piv[ours] / piv[base])


def multileader_claims(df: pd.DataFrame, gpus_per_node: int, segments: Sequence[int]) -> dict[str, list[float]]:
    """Per-node-count values of the chapter's claims at the largest simulated size.

    Time reductions come from SimGrid; the pipelining gain takes the best
    segment count; energy reductions come from :func:`add_energy`.
    """
    k = gpus_per_node
    sim = df[np.isfinite(df.sim_s)]
    big = sim[sim.nbytes == sim.nbytes.max()]
    lrlr, lrrab = f"lr_lr:k={k}", f"lr_rab:k={k}"
    pipes = [f"lr_lr_pipe:k={k},segments={s}" for s in segments]
    pipe_gain = pd.concat([reduction_pct(big, p, lrlr) for p in pipes], axis=1).max(axis=1)
    return {
        "lr_lr_vs_lr": reduction_pct(big, lrlr, "ring").tolist(),
        "lr_rab_vs_lr": reduction_pct(big, lrrab, "ring").tolist(),
        "pipe_vs_lr_lr": pipe_gain.tolist(),
        "energy_lr_lr_vs_lr": reduction_pct(big, lrlr, "ring", "energy_J").tolist(),
        "energy_lr_rab_vs_lr": reduction_pct(big, lrrab, "ring", "energy_J").tolist(),
    }


# ------------------------------------------------------------------ a2a-2dfc
def a2a_specs(rows: int, algorithms: Sequence[str]) -> list[str]:
    """Specs of the all-to-all algorithms; the two grid algorithms get ``rows``."""
    return [f"{a}:rows={rows}" if a in ("2dfc", "two_phase") else a for a in algorithms]


def a2a_points(rows: int, cols: int, sizes_kb: Sequence[float], algorithms: Sequence[str],
               bandwidth: float, latency: float, model_only: Sequence[str] = ()) -> list[Point]:
    """Points of the 2dfc chapter: every algorithm x per-pair block size on an ``R x C`` 2dfc.

    Algorithms in ``model_only`` are evaluated by the two alpha-beta models but not simulated.
    """
    key = platform_key("two_dim_fc", rows=rows, cols=cols, bandwidth=bandwidth, latency=latency)
    return [Point(key, spec, rows * cols, int(kb * 1024), spec.split(":")[0] not in model_only,
                  (("grid", f"{rows}x{cols}"),))
            for spec in a2a_specs(rows, algorithms) for kb in sizes_kb]


def best_time(df: pd.DataFrame) -> pd.Series:
    """SimGrid's time where the point was simulated, else the route-aware alpha-beta model's."""
    return df.sim_s.where(np.isfinite(df.sim_s), df.model_s)


def a2a_lower_bound(rows: int, cols: int, m: float, bandwidth: float) -> float:
    """Multi-port bandwidth lower bound of an all-to-all on an ``R x C`` 2dfc (seconds).

    Minimal routing puts ``m[(R-1) + (C-1) + 2(R-1)(C-1)]`` bytes per node on
    its ``R + C - 2`` outgoing links; for ``R = C = k`` this is ``k m / B``.
    """
    load = m * ((rows - 1) + (cols - 1) + 2 * (rows - 1) * (cols - 1))
    return load / ((rows + cols - 2) * bandwidth)


def a2a_claims(df: pd.DataFrame, rows: int, conventional: Sequence[str]) -> dict[str, list[float]]:
    """Per-block-size values of the 2dfc claims (speed-ups from SimGrid times).

    ``speedup_vs_existing``: the fastest of the ``conventional`` algorithms
    over the striped 2dfc algorithm; ``speedup_vs_topology_aware``: the
    non-striped two-phase over it; ``speedup_vs_direct``: the direct
    all-at-once exchange (``linear``) over it.  Times are SimGrid's, or the
    route-aware model's for algorithms that were not simulated (:func:`best_time`).
    """
    piv = df.assign(t=best_time(df)).pivot_table(index="nbytes", columns="algorithm", values="t")
    ours = piv[f"2dfc:rows={rows}"]
    return {
        "speedup_vs_existing": (piv[list(conventional)].min(axis=1) / ours).tolist(),
        "speedup_vs_topology_aware": (piv[f"two_phase:rows={rows}"] / ours).tolist(),
        "speedup_vs_direct": (piv["linear"] / ours).tolist(),
    }


def a2a_speedups(df: pd.DataFrame, rows: int, bandwidth: float) -> pd.DataFrame:
    """Time of every algorithm over the striped one (:func:`best_time`), per block size, plus the
    striped time over the multi-port bandwidth lower bound (``striped/bound``)."""
    cols = int(df.p.iloc[0]) // rows
    piv = df.assign(t=best_time(df)).pivot_table(index="nbytes", columns="algorithm", values="t")
    ours = piv[f"2dfc:rows={rows}"]
    out = piv.drop(columns=[f"2dfc:rows={rows}"]).div(ours, axis=0)
    out["striped/bound"] = ours / [a2a_lower_bound(rows, cols, m, bandwidth) for m in piv.index]
    out.index = [f"{m / 1024:g} KiB" for m in piv.index]
    out.index.name = "block per pair"
    return out


def require(ok: bool, name: str, message: str) -> None:
    """Raise ``ValueError`` naming parameter ``name`` unless ``ok``."""
    if not ok:
        raise ValueError(f"parameter {name!r}: {message}")


# ------------------------------------------------------------------ dln-allreduce
DLN_NETWORKS = ("dln", "dln_mitigated", "fat_tree", "fat_tree_tapered")


def dln_platform(network: str, p: int, hosts_per_switch: int, bandwidth: float, latency: float,
                 switch_latency: float) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """Platform key of one of :data:`DLN_NETWORKS` with ``p`` hosts.

    ``dln``: one link per chord; ``dln_mitigated``: ``hosts_per_switch``
    parallel links per chord; ``fat_tree``: two levels, leaves of
    ``hosts_per_switch`` hosts, as many spines (full bisection);
    ``fat_tree_tapered``: half the spines (2:1).  Link latencies include
    ``switch_latency`` per switch (added to the host-link latency of the
    fat tree's four-link routes, once per switch crossed).
    """
    g = hosts_per_switch
    if p % g:
        raise ValueError(f"hosts_per_switch={g} must divide nodes={p}")
    if network in ("dln", "dln_mitigated"):
        return platform_key("distributed_loop", switches=p // g, hosts_per_switch=g, bandwidth=bandwidth,
                            latency=latency, chord_copies=g if network == "dln_mitigated" else 1,
                            switch_latency=switch_latency)
    if network in ("fat_tree", "fat_tree_tapered"):
        spines = g if network == "fat_tree" else max(g // 2, 1)
        return platform_key("fat_tree", p=p, hosts_per_leaf=g, spines=spines, bandwidth=bandwidth,
                            latency=latency + switch_latency)
    raise ValueError(f"unknown network {network!r}; known: {DLN_NETWORKS}")


def dln_points(nodes: Sequence[int], hosts_per_switch: int, sizes_mb: Sequence[float],
               networks: Sequence[str], ring_nodes: Sequence[int], bandwidth: float, latency: float,
               switch_latency: float, sim_sizes_mb: Sequence[float] | None = None) -> list[Point]:
    """Points of the DLN chapter: halving-doubling on every network, plus ring on the full fat tree.

    SimGrid runs at ``sim_sizes_mb`` (default: every size), the alpha-beta
    models at every size.  The ring reference is simulated only at
    ``ring_nodes`` (its ``2(p-1)`` steps are slow to simulate).
    """
    sim_sizes = set(sizes_mb if sim_sizes_mb is None else sim_sizes_mb)
    pts = []
    for p in nodes:
        for net in networks:
            key = dln_platform(net, p, hosts_per_switch, bandwidth, latency, switch_latency)
            for mb in sizes_mb:
                pts.append(Point(key, "rabenseifner", p, int(mb * MiB), mb in sim_sizes, (("network", net),)))
        key = dln_platform("fat_tree", p, hosts_per_switch, bandwidth, latency, switch_latency)
        for mb in sizes_mb:
            pts.append(Point(key, "ring", p, int(mb * MiB), p in ring_nodes and mb in sim_sizes,
                             (("network", "fat_tree"),)))
    return pts


def hop_profile(p: int, hosts_per_switch: int, network: str, bandwidth: float = 1e10, latency: float = 1e-6,
                switch_latency: float = 0.0) -> pd.DataFrame:
    """Per halving step: partner distance, the distinct route lengths (links) of all partner pairs,
    and the most flows sharing one link, on ``network``."""
    key = dln_platform(network, p, hosts_per_switch, bandwidth, latency, switch_latency)
    pf = build_platform(key)
    sched = build_schedule("rabenseifner", p, p)
    flows = max_link_flows(sched, pf)
    rows = []
    for s in range(int(math.log2(p))):
        dist = p >> (s + 1)
        lengths = sorted({pf.hops(r, r ^ dist) for r in range(p)})
        rows.append({"network": network, "p": p, "step": s, "distance": dist,
                     "route_links": lengths, "distinct_lengths": len(lengths), "max_flows_per_link": flows[s]})
    return pd.DataFrame(rows)


def dln_claims(df: pd.DataFrame, hops: pd.DataFrame) -> dict[str, list[float]]:
    """Per-node-count values of the DLN claims (largest size; times from SimGrid)."""
    hd = df[(df.algorithm == "rabenseifner") & np.isfinite(df.sim_s)]
    big = hd[hd.nbytes == hd.nbytes.max()]
    piv = big.pivot_table(index="p", columns="network", values="sim_s")
    dln = hops[hops.network == "dln_mitigated"]
    return {
        "fixed_path_length": dln.groupby("p").distinct_lengths.max().tolist(),
        "contention_free": dln.groupby("p").max_flows_per_link.max().tolist(),
        "dln_vs_fat_tree": (100 * (1 - piv["dln_mitigated"] / piv["fat_tree"])).tolist(),
        "dln_vs_tapered_fat_tree": (100 * (1 - piv["dln_mitigated"] / piv["fat_tree_tapered"])).tolist(),
    }


def network_inventory(p: int, hosts_per_switch: int, networks: Sequence[str]) -> pd.DataFrame:
    """Switches and directed links of each network with ``p`` hosts (hardware cost at a glance)."""
    rows = []
    for net in networks:
        pf = build_platform(dln_platform(net, p, hosts_per_switch, 1e10, 1e-6, 0.0))
        names = [n for n, link in pf.links.items() if link.sharing != "FATPIPE"]
        host_links = [n for n in names if n.startswith("h") or "->h" in n]
        switches = {part for n in names for part in n.split("#")[0].split("->") if not part.startswith("h")}
        rows.append({"network": net, "hosts": p, "switches": len(switches), "host links": len(host_links),
                     "switch-to-switch links": len(names) - len(host_links)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ MPI exactness
def mpi_exactness(specs: Sequence[str], nprocs: int, lengths: Sequence[int], dtypes: Sequence[str],
                  seed: int = 0, timeout: float = 120.0) -> pd.DataFrame:
    """Run the schedules on a real MPI (``run_mpi`` + the worker's check mode).

    Every case compares our result with MPI's own ``Allreduce``/``Alltoall``
    on every rank (exact for integers and all-to-alls, within the
    summation-order bound for floats).  Returns one row per case.
    """
    lens = ",".join(map(str, lengths))
    report = launch_worker("check", nprocs, ["--algos", ";".join(specs), "--lengths", lens, "--a2a-lengths", lens,
                                             "--dtypes", ",".join(dtypes), "--seed", str(seed)], timeout=timeout)
    rows = [{"algorithm": c["spec"], "ranks": c["p"], "elements": c["n"], "dtype": c["dtype"],
             "equal to MPI": c["ok"], "max |error|": c.get("max_abs_err"), "steps": c.get("steps")}
            for c in report["cases"]]
    return pd.DataFrame(rows).assign(mpi=report["mpi_library"])


def mpi_summary(cases: pd.DataFrame) -> pd.DataFrame:
    """One row per algorithm of :func:`mpi_exactness`'s cases: what ran, what was skipped, whether all matched.

    A case that did not apply (``equal to MPI`` is ``None``) is counted as
    skipped, never as a match.

    Raises
    ------
    ValueError
        If an algorithm had no case that ran (nothing was compared, so nothing
        can be reported as equal to MPI).
    """
    ran = cases["equal to MPI"].notna()
    g = cases.assign(ran=ran, matched=cases["equal to MPI"].eq(True) & ran).groupby("algorithm", sort=False)
    out = pd.DataFrame({
        "ranks": g.ranks.first(),
        "lengths": g.elements.apply(lambda v: ", ".join(map(str, sorted(set(v))))),
        "dtypes": g.dtype.apply(lambda v: ", ".join(dict.fromkeys(v))),
        "cases run": g.ran.sum().astype(int),
        "skipped": (g.size() - g.ran.sum()).astype(int),
        "all equal to MPI": g.matched.sum() == g.ran.sum(),
        "max |error|": g["max |error|"].max(),
        "steps": g.steps.first(),
    }).reset_index()
    none_ran = out.loc[out["cases run"] == 0, "algorithm"].tolist()
    if none_ran:
        raise ValueError(f"no MPI case ran for {none_ran}: every case was skipped as not applicable")
    return out
