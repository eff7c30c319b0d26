"""Driver of the ``dln-allreduce`` chapter: halving-doubling allreduce on a distributed loop network.

:class:`Params` holds the parameters and :func:`run` the whole chapter:
:func:`platform` describes one of :data:`NETWORKS` (the DLN with one or
parallel chord links, a full-bisection and a 2:1 tapered fat tree, and a fat
tree with as many switch-to-switch links as the mitigated DLN, the fair
reference of the ``dln_vs_fat_tree`` claim), :func:`points` builds the sweep,
:func:`hop_profile` measures the route lengths and link sharing of every
halving step, :func:`network_inventory` counts the hardware,
:func:`latency_sweep` shows how the saving against the fair fat tree follows
the assumed switch latency, and :func:`claims` gives the ledger one value per
claim: the simulations are deterministic, so the speed claim is judged at one
named configuration (``judged_nodes`` hosts, ``judged_mb`` MiB) and the sweeps
over host counts, sizes and switch latencies are figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import matplotlib.pyplot as plt
import pandas as pd

from repro.collectives.algorithms import build_schedule
from repro.collectives.congestion import congestion_cost, max_link_flows
from repro.collectives.exactness import ExactnessResults, algorithm_exactness
from repro.collectives.figures import SeriesStyle, sim_vs_model
from repro.collectives.sweep import LinkConstants, MiB, PlatformKey, Point, build_platform, platform_key, run_points
from repro.params import ChapterParams, require

NEEDED = ("dln", "dln_mitigated", "fat_tree_equal_links")
"""Networks the claims compare."""
MPI_SPECS = ("rabenseifner", "ring", "recursive_doubling")
MPI_LENGTHS = (1, 1003, 65536)
MPI_DTYPES = ("int64", "float64")


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams, LinkConstants):
    """The chapter's parameters (the registry schema's, one field each)."""

    nodes: tuple[int, ...]
    hosts_per_switch: int
    sizes_mb: tuple[float, ...]
    sim_sizes_mb: tuple[float, ...]
    judged_nodes: int
    judged_mb: float
    networks: tuple[str, ...]
    ring_nodes: tuple[int, ...]
    link_gbs: float
    link_latency_us: float
    switch_latency_ns: float
    sweep_switch_latencies_ns: tuple[float, ...]
    mpi_ranks: int
    workers: int

    def checks(self) -> None:
        """Refuse impossible combinations before any simulation starts."""
        require(set(NEEDED) <= set(self.networks), self, "networks",
                "the claims need dln, dln_mitigated and fat_tree_equal_links")
        require(_power_of_two(self.hosts_per_switch), self, "hosts_per_switch", "hosts_per_switch must be a power of two")
        require(all(_power_of_two(p) and p % self.hosts_per_switch == 0 and p > self.hosts_per_switch
                    for p in self.nodes), self, ("nodes", "hosts_per_switch"),
                "every host count must be a power of two and a multiple of hosts_per_switch, larger than it")
        require(set(self.ring_nodes) <= set(self.nodes), self, ("ring_nodes", "nodes"),
                "every entry of ring_nodes must also be in nodes")
        require(set(self.sim_sizes_mb) <= set(self.sizes_mb), self, ("sim_sizes_mb", "sizes_mb"),
                "every simulated size must also be in sizes_mb")
        require(self.judged_nodes in self.nodes, self, ("judged_nodes", "nodes"),
                "the judged host count must be one of nodes")
        require(self.judged_mb in self.sim_sizes_mb, self, ("judged_mb", "sim_sizes_mb"),
                "the judged size must be one of the simulated sizes")
        require(all(int(mb * MiB) // 4 >= p for mb in self.sizes_mb for p in self.nodes), self, ("sizes_mb", "nodes"),
                "every vector must hold at least one float32 element per host")

    @property
    def switch_latency(self) -> float:
        """Latency per switch crossed, s."""
        return self.switch_latency_ns * 1e-9


@dataclass(frozen=True, kw_only=True)
class Results(ExactnessResults):
    """What one run of the chapter produced.

    Attributes
    ----------
    params:
        The parameters of the run.
    table:
        One row per (network, algorithm, host count, size) of :func:`repro.collectives.sweep.run_points`.
    hops:
        :func:`hop_profile` of every network and host count.
    latency_sweep:
        :func:`latency_sweep` at the judged host count, smallest and largest size.
    exactness:
        The MPI cases of :func:`repro.collectives.exactness.algorithm_exactness`.
    """

    params: Params
    table: pd.DataFrame
    hops: pd.DataFrame
    latency_sweep: pd.DataFrame
    exactness: pd.DataFrame


def run(params: Params) -> Results:
    """The route structure, the sweep (models everywhere, SimGrid at ``sim_sizes_mb``), the latency sweep and MPI."""
    prm = params
    hops = pd.concat([hop_profile(p, prm.hosts_per_switch, net, prm.bandwidth, prm.latency, prm.switch_latency)
                      for p in prm.nodes for net in prm.networks], ignore_index=True)
    pts = points(prm, sim_sizes_mb=prm.sim_sizes_mb)
    table = run_points(pts, prm.workers, desc="simulations")
    table["series"] = table.network + " / " + table.algorithm.replace({"rabenseifner": "halving-doubling"})
    sweep = latency_sweep(prm.judged_nodes, prm.hosts_per_switch, [min(prm.sizes_mb), max(prm.sizes_mb)],
                          prm.bandwidth, prm.latency, [ns * 1e-9 for ns in prm.sweep_switch_latencies_ns])
    mpi = algorithm_exactness(MPI_SPECS, prm.mpi_ranks, MPI_LENGTHS, MPI_DTYPES)
    return Results(params=prm, table=table, hops=hops, latency_sweep=sweep, exactness=mpi)


NETWORKS = ("dln", "dln_mitigated", "fat_tree", "fat_tree_tapered", "fat_tree_equal_links")


def _is_switch_link(name: str) -> bool:
    return not (name.startswith("h") or "->h" in name)


def equal_link_spines(p: int, hosts_per_switch: int) -> int:
    """Spines that give a two-level fat tree about as many switch-to-switch links as the mitigated DLN.

    The fat tree has ``2 x leaves x spines`` directed switch-to-switch links
    (``leaves = p / hosts_per_switch``); the mitigated DLN's count is read off
    its platform.
    """
    dln = build_platform(platform("dln_mitigated", p, hosts_per_switch, 1e10, 1e-6, 0.0))
    links = sum(1 for n in dln.links if _is_switch_link(n))
    return max(round(links / (2 * (p // hosts_per_switch))), 1)


def platform(network: str, p: int, hosts_per_switch: int, bandwidth: float, latency: float,
             switch_latency: float) -> PlatformKey:
    """Platform key of one of :data:`NETWORKS` with ``p`` hosts.

    ``dln``: one link per chord; ``dln_mitigated``: ``hosts_per_switch``
    parallel links per chord; ``fat_tree``: two levels, leaves of
    ``hosts_per_switch`` hosts, as many spines (full bisection);
    ``fat_tree_tapered``: half the spines (2:1); ``fat_tree_equal_links``:
    :func:`equal_link_spines` spines (as many switch-to-switch links as the
    mitigated DLN).  Every route pays ``switch_latency`` once per switch it
    crosses, on every network.
    """
    g = hosts_per_switch
    if p % g:
        raise ValueError(f"hosts_per_switch={g} must divide nodes={p}")
    if network in ("dln", "dln_mitigated"):
        return platform_key("distributed_loop", switches=p // g, hosts_per_switch=g, bandwidth=bandwidth,
                            latency=latency, chord_copies=g if network == "dln_mitigated" else 1,
                            switch_latency=switch_latency)
    if network in ("fat_tree", "fat_tree_tapered", "fat_tree_equal_links"):
        spines = {"fat_tree": g, "fat_tree_tapered": max(g // 2, 1)}.get(network) or equal_link_spines(p, g)
        return platform_key("fat_tree", p=p, hosts_per_leaf=g, spines=spines, bandwidth=bandwidth,
                            latency=latency, switch_latency=switch_latency)
    raise ValueError(f"unknown network {network!r}; known: {NETWORKS}")


def points(prm: Params, sim_sizes_mb: Sequence[float] | None = None) -> list[Point]:
    """Points of the chapter: halving-doubling on every network, plus ring on the full fat tree.

    SimGrid runs at ``sim_sizes_mb`` (default: every size), the alpha-beta
    models at every size.  The ring reference is simulated only at
    ``ring_nodes`` (its ``2(p-1)`` steps are slow to simulate).
    """
    nodes, hosts_per_switch, sizes_mb, networks = prm.nodes, prm.hosts_per_switch, prm.sizes_mb, prm.networks
    ring_nodes, bandwidth, latency, switch_latency = prm.ring_nodes, prm.bandwidth, prm.latency, prm.switch_latency
    sim_sizes = set(sizes_mb if sim_sizes_mb is None else sim_sizes_mb)
    pts = []
    for p in nodes:
        for net in networks:
            key = platform(net, p, hosts_per_switch, bandwidth, latency, switch_latency)
            for mb in sizes_mb:
                pts.append(
                    Point(
                        platform=key,
                        spec="rabenseifner",
                        p=p,
                        nbytes=int(mb * MiB),
                        simulate=mb in sim_sizes,
                        tags=(("network", net),),
                    )
                )
        key = platform("fat_tree", p, hosts_per_switch, bandwidth, latency, switch_latency)
        for mb in sizes_mb:
            pts.append(
                Point(
                    platform=key,
                    spec="ring",
                    p=p,
                    nbytes=int(mb * MiB),
                    simulate=p in ring_nodes and mb in sim_sizes,
                    tags=(("network", "fat_tree"),),
                )
            )
    return pts


def hop_profile(
    p: int, hosts_per_switch: int, network: str, bandwidth: float = 1e10, latency: float = 1e-6, switch_latency: float = 0.0
) -> pd.DataFrame:
    """Per halving step.

    Partner distance, the distinct route lengths (links) of all partner pairs, and the most flows sharing one
    link, on ``network``.
    """
    pf = build_platform(platform(network, p, hosts_per_switch, bandwidth, latency, switch_latency))
    sched = build_schedule("rabenseifner", p, p)
    flows = max_link_flows(sched, pf)
    rows: list[dict[str, Any]] = []
    for s in range(int(math.log2(p))):
        dist = p >> (s + 1)
        lengths = sorted({pf.hops(r, r ^ dist) for r in range(p)})
        rows.append(
            {
                "network": network,
                "p": p,
                "step": s,
                "distance": dist,
                "route_links": lengths,
                "distinct_lengths": len(lengths),
                "max_flows_per_link": flows[s],
            }
        )
    return pd.DataFrame(rows)


def latency_sweep(
    p: int, hosts_per_switch: int, sizes_mb: Sequence[float], bandwidth: float, latency: float, switch_latencies: Sequence[float]
) -> pd.DataFrame:
    """Halving-doubling time saved on the mitigated DLN against the equal-link fat tree, per switch latency.

    Uses the congestion-aware alpha-beta model (latency summed along each
    route, link sharing counted), which needs no simulation, so the switch
    latency the ``dln_vs_fat_tree`` claim depends on can be swept cheaply.

    Parameters
    ----------
    p, hosts_per_switch:
        Hosts and hosts per switch (or leaf).
    sizes_mb:
        Allreduce sizes (MiB).
    bandwidth, latency:
        Every link's bandwidth (bytes/s) and latency (s).
    switch_latencies:
        Latencies added per switch crossed (s).

    Returns
    -------
    pandas.DataFrame
        One row per (switch latency, size): ``switch_latency_ns``, ``size_mb``,
        the two model times and ``saving_pct`` (positive: the DLN is faster).
    """
    rows: list[dict[str, Any]] = []
    for sw in switch_latencies:
        pfs = {
            net: build_platform(platform(net, p, hosts_per_switch, bandwidth, latency, sw))
            for net in ("dln_mitigated", "fat_tree_equal_links")
        }
        for mb in sizes_mb:
            sched = build_schedule("rabenseifner", p, int(mb * MiB) // 4)
            t = {net: congestion_cost(sched, pf) for net, pf in pfs.items()}
            rows.append(
                {
                    "switch_latency_ns": sw * 1e9,
                    "size_mb": mb,
                    "dln_mitigated_s": t["dln_mitigated"],
                    "fat_tree_equal_links_s": t["fat_tree_equal_links"],
                    "saving_pct": 100 * (1 - t["dln_mitigated"] / t["fat_tree_equal_links"]),
                }
            )
    return pd.DataFrame(rows)


def claims(results: Results) -> dict[str, list[float]]:
    """One value per claim (the simulations are deterministic).

    The two structural claims take the worst halving step over every host count of the run; the time
    saving is SimGrid's at the judged host count and size, against the fat tree with as many
    switch-to-switch links as the mitigated DLN (``fat_tree_equal_links``); the full and tapered fat
    trees stay in the figures as context.
    """
    prm, df, hops = results.params, results.table, results.hops
    at = df[(df.algorithm == "rabenseifner") & (df.p == prm.judged_nodes) & (df.nbytes == int(prm.judged_mb * MiB))]
    t = at.set_index("network").sim_s
    dln = hops[hops.network == "dln_mitigated"]
    return {
        "fixed_path_length": [float(dln.distinct_lengths.max())],
        "contention_free": [float(dln.max_flows_per_link.max())],
        "dln_vs_fat_tree": [float(100 * (1 - t["dln_mitigated"] / t["fat_tree_equal_links"]))],
    }


def time_figures(results: Results) -> tuple[plt.Figure, plt.Figure]:
    """Time against the host count at the judged size, and against the size at the judged host count."""
    prm, df = results.params, results.table
    big = df[df.nbytes == int(prm.judged_mb * MiB)]
    by_hosts = sim_vs_model(big, "p", "series", style=SeriesStyle(xlabel="hosts", ylog=False))
    by_hosts.axes[0].set_title(f"{prm.judged_mb:g} MiB allreduce")
    by_size = sim_vs_model(df[df.p == prm.judged_nodes], "nbytes", "series",
                           style=SeriesStyle(xlabel="vector size (MiB)", xscale=MiB))
    by_size.axes[0].set_title(f"{prm.judged_nodes} hosts")
    return by_hosts, by_size


def latency_sweep_figure(results: Results) -> plt.Figure:
    """Time saved by the mitigated DLN against the equal-link fat tree, per assumed switch latency (model)."""
    prm, sweep = results.params, results.latency_sweep
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for mb, g in sweep.groupby("size_mb"):
        ax.plot(g.switch_latency_ns, g.saving_pct, marker="o", label=f"{mb:g} MiB")
    ax.axvline(prm.switch_latency_ns, color="grey", ls=":", label="chapter's assumption")
    ax.set(xlabel="switch latency (ns)", ylabel="time saved by the DLN (%)", yscale="symlog",
           title=f"mitigated DLN vs equal-link fat tree, {prm.judged_nodes} hosts (model)")
    ax.legend()
    fig.tight_layout()
    return fig


def network_inventory(p: int, hosts_per_switch: int, networks: Sequence[str]) -> pd.DataFrame:
    """Switches and directed links of each network with ``p`` hosts (hardware cost at a glance).

    ``switch-to-switch links`` counts the links the network is built with (a two-level fat tree has
    ``2 x leaves x spines``), ``used by routes`` those on some route: with static D-mod-k routing a leaf
    is reached through ``hosts_per_switch`` spines only, so a fat tree with more spines than that leaves
    some of its spine-to-leaf links idle.
    """
    rows = []
    for net in networks:
        key = platform(net, p, hosts_per_switch, 1e10, 1e-6, 0.0)
        pf = build_platform(key)
        names = [n for n, link in pf.links.items() if link.sharing != "FATPIPE"]
        host_links = [n for n in names if not _is_switch_link(n)]
        switches = {part for n in names for part in n.split("#")[0].split("->") if not part.startswith("h")}
        used = len(names) - len(host_links)
        builder, items = key
        spines = dict(items).get("spines", 0)
        built = 2 * (p // hosts_per_switch) * spines if builder == "fat_tree" else used
        rows.append(
            {
                "network": net,
                "hosts": p,
                "switches": len(switches) if builder != "fat_tree" else p // hosts_per_switch + spines,
                "host links": len(host_links),
                "switch-to-switch links": built,
                "used by routes": used,
            }
        )
    return pd.DataFrame(rows)
