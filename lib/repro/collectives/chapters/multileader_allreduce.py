"""Driver of the ``multileader-allreduce`` chapter: multi-leader hierarchical allreduce on a GPU cluster.

:func:`points` builds the sweep (every node count x algorithm x size on a
:func:`~repro.collectives.platforms.gpu_cluster`), :func:`add_energy` adds the
network energy of every simulated point under the TSUBAME3 power constants,
and :func:`claims` turns the table into the per-node-count values the ledger
records.  :func:`time_vs_size_figure` and :func:`comparison` are its figure and
table; :func:`short_label` and :func:`node_title` label them.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.collectives.algorithms import build_schedule, parse_spec
from repro.collectives.congestion import LinkPower, link_energy
from repro.collectives.figures import comparison_table, sim_vs_model
from repro.collectives.sweep import ELEMENT_BYTES, MiB, Point, build_platform, platform_key

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


def specs(gpus_per_node: int, segments: Sequence[int], baselines: Sequence[str]) -> list[str]:
    """Algorithm specs of the chapter: baselines, ``lr_lr``, ``lr_rab`` and ``lr_lr_pipe`` per segment count."""
    k = gpus_per_node
    return ([*baselines, f"lr_lr:k={k}", f"lr_rab:k={k}"]
            + [f"lr_lr_pipe:k={k},segments={s}" for s in segments])


def points(nodes: Sequence[int], gpus_per_node: int, sizes_mb: Sequence[float], sim_sizes_mb: Sequence[float],
           segments: Sequence[int], baselines: Sequence[str] = ("ring",), **platform_kw: Any) -> list[Point]:
    """Points of the chapter: every node count x algorithm x size.

    SimGrid runs at ``sim_sizes_mb`` only; the two alpha-beta models at every size.
    """
    pts = []
    for N in nodes:
        key = platform_key("gpu_cluster", nodes=N, gpus_per_node=gpus_per_node, **platform_kw)
        for spec in specs(gpus_per_node, segments, baselines):
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
        sched = build_schedule(name, row.p, row.nbytes // ELEMENT_BYTES, **params)
        energy.append(link_energy(sched, build_platform(key), row.sim_s, TSUBAME_LINK_POWER,
                                  gpu_link_class, ELEMENT_BYTES))
    out["energy_J"] = energy
    return out


def reduction_pct(df: pd.DataFrame, ours: str, base: str, column: str = "sim_s",
                  by: Sequence[str] = ("nodes", "nbytes")) -> pd.Series:
    """Percent reduction of ``column`` of algorithm ``ours`` against ``base``, per ``by`` group."""
    piv = df.pivot_table(index=list(by), columns="algorithm", values=column)
    return 100.0 * (1.0 - piv[ours] / piv[base])


def claims(df: pd.DataFrame, gpus_per_node: int, segments: Sequence[int]) -> dict[str, list[float]]:
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


def short_label(spec: str, gpus_per_node: int) -> str:
    """Figure label of a spec: the node size dropped (it is the chapter's ``gpus_per_node``), ``S=`` for segments."""
    return spec.replace(f":k={gpus_per_node}", "").replace(",segments=", " S=").replace(":segments=", " S=")


def node_title(nodes: int, gpus_per_node: int) -> str:
    """Panel title of one node count."""
    return f"{nodes} nodes × {gpus_per_node} GPUs"


def time_vs_size_figure(df: pd.DataFrame, gpus_per_node: int) -> plt.Figure:
    """Time against vector size, one panel per node count (SimGrid, route-aware model, closed form)."""
    return sim_vs_model(df, "nbytes", "algorithm", "nodes", xlabel="vector size (MiB)", xscale=MiB,
                        label=functools.partial(short_label, gpus_per_node=gpus_per_node),
                        title=functools.partial(node_title, gpus_per_node=gpus_per_node), ncols=2)


def comparison(df: pd.DataFrame, gpus_per_node: int) -> pd.DataFrame:
    """Every simulated point: SimGrid, both alpha-beta models and the network energy, sizes in MiB."""
    table = comparison_table(df, ["nodes", "algorithm", "nbytes"])
    table["algorithm"] = [short_label(s, gpus_per_node) for s in table.algorithm]
    table["MiB"] = table.nbytes / MiB
    table = table.drop(columns="nbytes")
    table["energy (J)"] = df[np.isfinite(df.sim_s)].energy_J.to_numpy()
    return table
