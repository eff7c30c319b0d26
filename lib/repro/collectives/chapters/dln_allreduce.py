"""Driver of the ``dln-allreduce`` chapter: halving-doubling allreduce on a distributed loop network.

:func:`platform` describes one of :data:`NETWORKS` (the DLN with one or
parallel chord links, a full-bisection and a 2:1 tapered fat tree, and a fat
tree with as many switch-to-switch links as the mitigated DLN, the fair
reference of the ``dln_vs_fat_tree`` claim),
:func:`points` builds the sweep, :func:`hop_profile` measures the route
lengths and link sharing of every halving step, :func:`network_inventory`
counts the hardware, :func:`latency_sweep` shows how the saving against the
fair fat tree follows the assumed switch latency, and :func:`claims` turns the
tables into the values the ledger records.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from repro.collectives.algorithms import build_schedule
from repro.collectives.congestion import congestion_cost, max_link_flows
from repro.collectives.sweep import MiB, PlatformKey, Point, build_platform, platform_key

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


def points(nodes: Sequence[int], hosts_per_switch: int, sizes_mb: Sequence[float],
           networks: Sequence[str], ring_nodes: Sequence[int], bandwidth: float, latency: float,
           switch_latency: float, sim_sizes_mb: Sequence[float] | None = None) -> list[Point]:
    """Points of the chapter: halving-doubling on every network, plus ring on the full fat tree.

    SimGrid runs at ``sim_sizes_mb`` (default: every size), the alpha-beta
    models at every size.  The ring reference is simulated only at
    ``ring_nodes`` (its ``2(p-1)`` steps are slow to simulate).
    """
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


def claims(df: pd.DataFrame, hops: pd.DataFrame) -> dict[str, list[float]]:
    """Per-node-count values of the chapter's claims (largest size; times from SimGrid).

    The time saving is judged against the fat tree with as many switch-to-switch
    links as the mitigated DLN (``fat_tree_equal_links``); the full and tapered
    fat trees stay in the figures as context.
    """
    hd = df[(df.algorithm == "rabenseifner") & np.isfinite(df.sim_s)]
    big = hd[hd.nbytes == hd.nbytes.max()]
    piv = big.pivot_table(index="p", columns="network", values="sim_s")
    dln = hops[hops.network == "dln_mitigated"]
    return {
        "fixed_path_length": dln.groupby("p").distinct_lengths.max().tolist(),
        "contention_free": dln.groupby("p").max_flows_per_link.max().tolist(),
        "dln_vs_fat_tree": (100 * (1 - piv["dln_mitigated"] / piv["fat_tree_equal_links"])).tolist(),
    }


def network_inventory(p: int, hosts_per_switch: int, networks: Sequence[str]) -> pd.DataFrame:
    """Switches and directed links of each network with ``p`` hosts (hardware cost at a glance)."""
    rows = []
    for net in networks:
        pf = build_platform(platform(net, p, hosts_per_switch, 1e10, 1e-6, 0.0))
        names = [n for n, link in pf.links.items() if link.sharing != "FATPIPE"]
        host_links = [n for n in names if not _is_switch_link(n)]
        switches = {part for n in names for part in n.split("#")[0].split("->") if not part.startswith("h")}
        rows.append(
            {
                "network": net,
                "hosts": p,
                "switches": len(switches),
                "host links": len(host_links),
                "switch-to-switch links": len(names) - len(host_links),
            }
        )
    return pd.DataFrame(rows)
