"""Driver of the ``multileader-allreduce`` chapter: multi-leader hierarchical allreduce on a GPU cluster.

:func:`points` builds the sweep (every node count x algorithm x size on a
:func:`~repro.hpc.platforms.gpu_cluster`), :func:`add_energy` adds the
network energy of every simulated point under the TSUBAME3 power constants,
and :func:`claims` turns the table into the per-node-count values the ledger
records.  Every claim is *modelled* (fixed by assumed platform and power
constants), so :func:`constant_sweep` and :func:`idle_power_sweep` move the
deciding constants (NVLink bandwidth, adapters per node, idle share of link
power) and :func:`constant_sweep_figure` shows where each verdict flips.
:func:`time_vs_size_figure` and :func:`comparison` are its figure and table;
:func:`short_label` and :func:`node_title` label them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.collectives.algorithms import build_schedule, parse_spec
from repro.collectives.congestion import LinkPower, link_energy
from repro.collectives.figures import comparison_table, sim_vs_model
from repro.collectives.sweep import ELEMENT_BYTES, MiB, Point, build_platform, platform_key, run_points

TSUBAME_LINK_POWER = {
    "nvlink": LinkPower(peak_w=11.2 / 2),
    "pcie": LinkPower(peak_w=1.0 / 2),
    # One NIC port = an edge-switch down port, its 1:1 up port and a spine port (W per port, halved per direction).
    "ib": LinkPower(peak_w=(408 / 48 + 408 / 48 + 11600 / 768) / 2),
}
"""Peak power per directed link (idle = 85% of peak), from the authors' TSUBAME3 platform constants
as summarised in spec ``multileader-allreduce`` (edge switch 408 W / 48 ports, spine 11600 W / 768 ports,
NVLink 11.2 W, PCIe 1 W)."""


def gpu_link_class(name: str) -> str | None:
    """Power class of a :func:`~repro.hpc.platforms.gpu_cluster` link (None: not counted)."""
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
                pts.append(Point(platform=key, spec=spec, p=N * gpus_per_node, nbytes=int(mb * MiB), simulate=mb in sim_sizes_mb,
                                 tags=(("nodes", N),)))
    return pts


NVLINK_SWEEP_GBS = (12.5, 25.0, 50.0, 100.0, 200.0)
"""NVLink bandwidths (GB/s) of the constant sweep."""
IDLE_FRACTION_SWEEP = (0.0, 0.25, 0.5, 0.85, 1.0)
"""Idle shares of peak link power of the energy sweep (0.85 is the chapter's assumption)."""


def add_energy(df: pd.DataFrame, gpus_per_node: int, power: Mapping[str, LinkPower] | None = None,
               **platform_kw: Any) -> pd.DataFrame:
    """Add ``energy_J``: network energy of every simulated row (links draw idle power for the run).

    ``power`` defaults to :data:`TSUBAME_LINK_POWER`.
    """
    power = TSUBAME_LINK_POWER if power is None else power
    out = df.copy()
    energy = []
    for row in out.itertuples():
        if not np.isfinite(row.sim_s):
            energy.append(float("nan"))
            continue
        key = platform_key("gpu_cluster", nodes=row.nodes, gpus_per_node=gpus_per_node, **platform_kw)
        name, params = parse_spec(row.algorithm)
        sched = build_schedule(name, row.p, row.nbytes // ELEMENT_BYTES, **params)
        energy.append(link_energy(sched, build_platform(key), row.sim_s, power,
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


def constant_sweep(nodes: int, gpus_per_node: int, size_mb: float, platform_kw: Mapping[str, Any],
                   nvlink_gbs: Sequence[float] = NVLINK_SWEEP_GBS, nics: Sequence[int] | None = None,
                   workers: int = 1) -> pd.DataFrame:
    """Time saved by ``lr_lr`` and ``lr_rab`` against ``ring`` while one assumed constant moves.

    Each variant changes one constant of ``platform_kw`` (NVLink bandwidth, or
    adapters per node) and evaluates the route-aware alpha-beta model, which
    the chapter checks against SimGrid on the simulated points.

    Parameters
    ----------
    nodes, gpus_per_node, size_mb
        The platform size and the vector size of the sweep.
    platform_kw
        The run's own platform constants (``nvlink_bandwidth`` in B/s, ``nics_per_node`` ...).
    nvlink_gbs
        NVLink bandwidths to try, GB/s.
    nics
        Adapters per node to try (default: every divisor of ``gpus_per_node``).
    workers
        Points evaluated at once.

    Returns
    -------
    pandas.DataFrame
        ``constant`` (``"nvlink_gbs"`` or ``"nics_per_node"``), ``value``, ``claim``
        (``lr_lr_vs_lr`` or ``lr_rab_vs_lr``) and ``saving_pct``.
    """
    nics = [n for n in range(1, gpus_per_node + 1) if gpus_per_node % n == 0] if nics is None else list(nics)
    variants = ([("nvlink_gbs", v, {**platform_kw, "nvlink_bandwidth": v * 1e9}) for v in nvlink_gbs]
                + [("nics_per_node", n, {**platform_kw, "nics_per_node": n}) for n in nics])
    k = gpus_per_node
    pts = [
        Point(
            platform=platform_key("gpu_cluster", nodes=nodes, gpus_per_node=k, **kw),
            spec=spec,
            p=nodes * k,
            nbytes=int(size_mb * MiB),
            simulate=False,
            tags=(("constant", name), ("value", value)),
        )
        for name, value, kw in variants
        for spec in ("ring", f"lr_lr:k={k}", f"lr_rab:k={k}")
    ]
    df = run_points(pts, workers, desc="constant sweep")
    piv = df.pivot_table(index=["constant", "value"], columns="algorithm", values="model_s")
    saving = 100.0 * (1.0 - piv.div(piv["ring"], axis=0))
    rows = [
        dict(constant=c, value=v, claim=claim, saving_pct=float(saving.loc[(c, v), spec]))
        for (c, v) in piv.index
        for claim, spec in (("lr_lr_vs_lr", f"lr_lr:k={k}"), ("lr_rab_vs_lr", f"lr_rab:k={k}"))
    ]
    return pd.DataFrame(rows)


def idle_power_sweep(
    df: pd.DataFrame, gpus_per_node: int, platform_kw: Mapping[str, Any], idle_fractions: Sequence[float] = IDLE_FRACTION_SWEEP
) -> pd.DataFrame:
    """Network energy saved by ``lr_lr`` and ``lr_rab`` against ``ring`` for each idle share of link power.

    Uses the simulated rows of the largest node count at the largest simulated size.

    Returns
    -------
    pandas.DataFrame
        ``constant`` (``"idle_fraction"``), ``value``, ``claim`` and ``saving_pct``.
    """
    sim = df[np.isfinite(df.sim_s)]
    big = sim[(sim.nbytes == sim.nbytes.max()) & (sim.nodes == sim.nodes.max())].drop(columns="energy_J", errors="ignore")
    k = gpus_per_node
    rows = []
    for idle in idle_fractions:
        power = {cls: dataclasses.replace(lp, idle_fraction=idle) for cls, lp in TSUBAME_LINK_POWER.items()}
        e = add_energy(big, gpus_per_node, power, **platform_kw).set_index("algorithm").energy_J
        for claim, spec in (("energy_lr_lr_vs_lr", f"lr_lr:k={k}"), ("energy_lr_rab_vs_lr", f"lr_rab:k={k}")):
            rows.append(
                dict(constant="idle_fraction", value=idle, claim=claim, saving_pct=float(100.0 * (1.0 - e[spec] / e["ring"])))
            )
    return pd.DataFrame(rows)


def constant_sweep_figure(
    sweep: pd.DataFrame, paper: Mapping[str, float | None], band: tuple[float, float], assumed: Mapping[str, float]
) -> plt.Figure:
    """One panel per swept constant: the saving of each claim, its paper band shaded, the run's value marked.

    A curve inside its band would count as matching the paper; below zero the
    sign of the claim fails.
    """
    constants = list(dict.fromkeys(sweep.constant))
    fig, axes = plt.subplots(1, len(constants), figsize=(4.2 * len(constants), 3.6), squeeze=False)
    xlabels = {
        "nvlink_gbs": "NVLink bandwidth (GB/s)",
        "nics_per_node": "InfiniBand adapters per node",
        "idle_fraction": "idle share of peak link power",
    }
    for ax, const in zip(axes[0], constants):
        part = sweep[sweep.constant == const]
        for claim, g in part.groupby("claim", sort=False):
            (line,) = ax.plot(g.value, g.saving_pct, "-o", label=claim)
            pv = paper.get(claim)
            if pv is not None:
                ax.axhspan(band[0] * pv, band[1] * pv, color=line.get_color(), alpha=0.12)
        ax.axhline(0.0, color="black", lw=0.8)
        ax.axvline(assumed[const], color="grey", ls=":", label="this run")
        if const == "nvlink_gbs":
            ax.set_xscale("log")
            ax.minorticks_off()
        ax.set_xticks(sorted(set(part.value)), [f"{v:g}" for v in sorted(set(part.value))])
        ax.set_xlabel(xlabels.get(const, const))
        ax.set_ylabel("saved against lr (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def short_label(spec: str, gpus_per_node: int) -> str:
    """Figure label of a spec: the node size dropped (it is the chapter's ``gpus_per_node``), ``S=`` for segments."""
    return spec.replace(f":k={gpus_per_node}", "").replace(",segments=", " S=").replace(":segments=", " S=")


def node_title(nodes: int, gpus_per_node: int) -> str:
    """Panel title of one node count."""
    return f"{nodes} nodes × {gpus_per_node} GPUs"


def time_vs_size_figure(df: pd.DataFrame, gpus_per_node: int) -> plt.Figure:
    """Time against vector size, one panel per node count (SimGrid, route-aware model, closed form)."""
    return sim_vs_model(
        df,
        "nbytes",
        "algorithm",
        "nodes",
        xlabel="vector size (MiB)",
        xscale=MiB,
        label=functools.partial(short_label, gpus_per_node=gpus_per_node),
        title=functools.partial(node_title, gpus_per_node=gpus_per_node),
        ncols=2,
    )


def comparison(df: pd.DataFrame, gpus_per_node: int) -> pd.DataFrame:
    """Every simulated point: SimGrid, both alpha-beta models and the network energy, sizes in MiB."""
    table = comparison_table(df, ["nodes", "algorithm", "nbytes"])
    table["algorithm"] = [short_label(s, gpus_per_node) for s in table.algorithm]
    table["MiB"] = table.nbytes / MiB
    table = table.drop(columns="nbytes")
    table["energy (J)"] = df[np.isfinite(df.sim_s)].energy_J.to_numpy()
    return table
