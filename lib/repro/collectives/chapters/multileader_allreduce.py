"""Driver of the ``multileader-allreduce`` chapter: multi-leader hierarchical allreduce on a GPU cluster.

:class:`Params` holds the parameters and :func:`run` the chapter: :func:`points`
builds the sweep (every node count x algorithm x size on a
:func:`~repro.hpc.platforms.gpu_cluster`), :func:`add_energy` adds the network
energy of every simulated point under the TSUBAME3 power constants, and
:func:`claims` gives the ledger one value per claim at the one named
configuration (``judged_nodes`` nodes, ``judged_mb`` MiB: the authors'
256-rank, 32 MiB run, whose logs give all four of the abstract's numbers); the
simulations are deterministic, so the node-count and size sweeps are figures.
Every claim is *modelled* (fixed by assumed platform and power constants), so
:func:`constant_sweep` and :func:`idle_power_sweep` move the deciding
constants (NVLink bandwidth, adapters per node, idle share of link power) and
:func:`constant_sweep_figure` shows where each verdict flips.
:func:`time_vs_size_figure`, :func:`reduction_figure` and :func:`comparison`
are its figures and table; :func:`short_label` and :func:`node_title` label them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.collectives.algorithms import build_schedule, parse_spec
from repro.collectives.congestion import LinkPower, link_energy
from repro.collectives.exactness import ExactnessResults, algorithm_exactness
from repro.collectives.figures import SeriesStyle, bars, comparison_table, sim_vs_model
from repro.collectives.sweep import ELEMENT_BYTES, MiB, PlatformKey, Point, build_platform, platform_key, run_points
from repro.hpc.platforms import GpuClusterSettings, Platform
from repro.params import ChapterParams, require
from repro.registry import load_registry
from repro.verdicts import in_band

CHAPTER = "multileader-allreduce"
MPI_DTYPES = ("int64", "float32")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    nodes: tuple[int, ...]
    gpus_per_node: int
    nics_per_node: int
    sizes_mb: tuple[float, ...]
    sim_sizes_mb: tuple[float, ...]
    judged_nodes: int
    judged_mb: float
    segments: tuple[int, ...]
    baselines: tuple[str, ...]
    nvlink_gbs: float
    pcie_gbs: float
    ib_gbs: float
    mpi_ranks: int
    mpi_length: int
    workers: int

    def checks(self) -> None:
        """Refuse impossible combinations before any simulation starts."""
        require("ring" in self.baselines, self, "baselines",
                "baselines must contain 'ring' (the flat logical ring lr every claim compares with)")
        require(set(self.sim_sizes_mb) <= set(self.sizes_mb), self, ("sim_sizes_mb", "sizes_mb"),
                "every simulated size must also be in sizes_mb")
        require(self.gpus_per_node % self.nics_per_node == 0, self, ("gpus_per_node", "nics_per_node"),
                "nics_per_node must divide gpus_per_node")
        require(self.mpi_ranks % self.gpus_per_node == 0, self, ("mpi_ranks", "gpus_per_node"),
                "mpi_ranks must be a multiple of gpus_per_node")
        require(self.judged_nodes in self.nodes, self, ("judged_nodes", "nodes"), "the judged node count must be one of nodes")
        require(self.judged_mb in self.sim_sizes_mb, self, ("judged_mb", "sim_sizes_mb"),
                "the judged size must be one of the simulated sizes")
        require(all(int(mb * MiB) // ELEMENT_BYTES >= n * self.gpus_per_node * max(self.segments)
                    for mb in self.sizes_mb for n in self.nodes), self, ("sizes_mb", "nodes", "segments"),
                "every vector must hold at least one float32 element per rank and pipeline segment")

    def settings(self) -> GpuClusterSettings:
        """The cluster's link constants as :func:`~repro.hpc.platforms.gpu_cluster` takes them (bytes/s)."""
        return GpuClusterSettings(nics_per_node=self.nics_per_node, nvlink_bandwidth=self.nvlink_gbs * 1e9,
                                  pcie_bandwidth=self.pcie_gbs * 1e9, nic_bandwidth=self.ib_gbs * 1e9)

    def platform(self, nodes: int) -> Platform:
        """The cluster of ``nodes`` nodes."""
        return build_platform(cluster_key(nodes, self.gpus_per_node, self.settings()))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Results(ExactnessResults):
    """What one run of the chapter produced.

    Attributes
    ----------
    params:
        The parameters of the run.
    table:
        One row per (node count, algorithm, size): closed form, route-aware model, SimGrid and network energy.
    sweep:
        :func:`constant_sweep` and :func:`idle_power_sweep` at the judged configuration.
    exactness:
        The MPI cases of :func:`repro.collectives.exactness.algorithm_exactness`.
    """

    params: Params
    table: pd.DataFrame
    sweep: pd.DataFrame
    exactness: pd.DataFrame

    @property
    def judged(self) -> pd.DataFrame:
        """The simulated rows of the judged configuration."""
        df, prm = self.table, self.params
        return df[np.isfinite(df.sim_s) & (df.nodes == prm.judged_nodes) & (df.nbytes == int(prm.judged_mb * MiB))]


def run(params: Params) -> Results:
    """The sweep, its network energy, the constant sweeps at the judged configuration and the MPI check."""
    prm = params
    links = prm.settings()
    df = run_points(points(prm), prm.workers, desc="simulations")
    df = add_energy(df, prm.gpus_per_node, links)
    judged = df[np.isfinite(df.sim_s) & (df.nodes == prm.judged_nodes) & (df.nbytes == int(prm.judged_mb * MiB))]
    sweep = pd.concat([constant_sweep(prm.judged_nodes, prm.gpus_per_node, prm.judged_mb, links, workers=prm.workers),
                       idle_power_sweep(judged, prm.gpus_per_node, links)], ignore_index=True)
    mpi = algorithm_exactness(specs(prm.gpus_per_node, prm.segments, ["ring"]), prm.mpi_ranks, [prm.mpi_length],
                              MPI_DTYPES)
    return Results(params=prm, table=df, sweep=sweep, exactness=mpi)


TSUBAME_LINK_POWER = {
    "nvlink": LinkPower(peak_w=11.2 / 2),
    "pcie": LinkPower(peak_w=1.0 / 2),
    # One NIC port = an edge-switch down port, its 1:1 up port and a spine port (W per port, halved per direction).
    "ib": LinkPower(peak_w=(408 / 48 + 408 / 48 + 11600 / 768) / 2),
}
"""Peak power per directed link (idle = 85% of peak), from the authors' TSUBAME3 platform constants
as summarised in spec ``multileader-allreduce`` (edge switch 408 W / 48 ports, spine 11600 W / 768 ports,
NVLink 11.2 W, PCIe 1 W)."""


def cluster_key(nodes: int, gpus_per_node: int, settings: GpuClusterSettings) -> PlatformKey:
    """The platform key of a :func:`~repro.hpc.platforms.gpu_cluster` of ``nodes`` nodes."""
    return platform_key("gpu_cluster", nodes=nodes, gpus_per_node=gpus_per_node, settings=settings)


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


def points(prm: Params) -> list[Point]:
    """Points of the chapter: every node count x algorithm x size.

    SimGrid runs at ``sim_sizes_mb`` only; the two alpha-beta models at every size.
    """
    nodes, gpus_per_node, sizes_mb, sim_sizes_mb = prm.nodes, prm.gpus_per_node, prm.sizes_mb, prm.sim_sizes_mb
    segments, baselines, links = prm.segments, prm.baselines, prm.settings()
    pts = []
    for N in nodes:
        key = cluster_key(N, gpus_per_node, links)
        for spec in specs(gpus_per_node, segments, baselines):
            for mb in sizes_mb:
                pts.append(Point(platform=key, spec=spec, p=N * gpus_per_node, nbytes=int(mb * MiB), simulate=mb in sim_sizes_mb,
                                 tags=(("nodes", N),)))
    return pts


NVLINK_SWEEP_GBS = (12.5, 50.0, 200.0)
"""NVLink bandwidths (GB/s) of the constant sweep (a quarter of, equal to and four times the assumed 50 GB/s;
each value is a 256-host model evaluation of every algorithm, so the cpu budget keeps three)."""
IDLE_FRACTION_SWEEP = (0.0, 0.25, 0.5, 0.85, 1.0)
"""Idle shares of peak link power of the energy sweep (0.85 is the chapter's assumption)."""


def add_energy(df: pd.DataFrame, gpus_per_node: int, settings: GpuClusterSettings,
               power: Mapping[str, LinkPower] | None = None) -> pd.DataFrame:
    """Add ``energy_J``: network energy of every simulated row (links draw idle power for the run).

    The rows' platforms are :func:`~repro.hpc.platforms.gpu_cluster` s with ``settings``;
    ``power`` defaults to :data:`TSUBAME_LINK_POWER`.
    """
    power = TSUBAME_LINK_POWER if power is None else power
    out = df.copy()
    energy = []
    for row in out.itertuples():
        if not np.isfinite(row.sim_s):
            energy.append(float("nan"))
            continue
        key = cluster_key(row.nodes, gpus_per_node, settings)
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


def claims(results: Results) -> dict[str, list[float]]:
    """One value per claim at the judged configuration (deterministic).

    Time reductions come from SimGrid; the pipelining gain takes the best
    segment count; energy reductions come from :func:`add_energy`.
    """
    prm, at = results.params, results.judged
    k = prm.gpus_per_node
    lrlr, lrrab = f"lr_lr:k={k}", f"lr_rab:k={k}"
    pipe_gain = max(reduction_pct(at, f"lr_lr_pipe:k={k},segments={s}", lrlr).iloc[0] for s in prm.segments)
    return {
        "lr_lr_vs_lr": [float(reduction_pct(at, lrlr, "ring").iloc[0])],
        "lr_rab_vs_lr": [float(reduction_pct(at, lrrab, "ring").iloc[0])],
        "pipe_vs_lr_lr": [float(pipe_gain)],
        "energy_lr_lr_vs_lr": [float(reduction_pct(at, lrlr, "ring", "energy_J").iloc[0])],
        "energy_lr_rab_vs_lr": [float(reduction_pct(at, lrrab, "ring", "energy_J").iloc[0])],
    }


def constant_sweep(nodes: int, gpus_per_node: int, size_mb: float, settings: GpuClusterSettings,
                   nvlink_gbs: Sequence[float] = NVLINK_SWEEP_GBS, nics: Sequence[int] | None = None,
                   workers: int = 1) -> pd.DataFrame:
    """Time saved by ``lr_lr`` and ``lr_rab`` against ``ring`` while one assumed constant moves.

    Each variant changes one constant of ``settings`` (NVLink bandwidth, or
    adapters per node) and evaluates the route-aware alpha-beta model, which
    the chapter checks against SimGrid on the simulated points.

    Parameters
    ----------
    nodes, gpus_per_node, size_mb
        The platform size and the vector size of the sweep.
    settings
        The run's own link constants (:class:`~repro.hpc.platforms.GpuClusterSettings`).
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
    variants = ([("nvlink_gbs", v, dataclasses.replace(settings, nvlink_bandwidth=v * 1e9)) for v in nvlink_gbs]
                + [("nics_per_node", n, dataclasses.replace(settings, nics_per_node=n)) for n in nics])
    k = gpus_per_node
    pts = [
        Point(
            platform=cluster_key(nodes, k, links),
            spec=spec,
            p=nodes * k,
            nbytes=int(size_mb * MiB),
            simulate=False,
            tags=(("constant", name), ("value", value)),
        )
        for name, value, links in variants
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
    df: pd.DataFrame, gpus_per_node: int, settings: GpuClusterSettings,
    idle_fractions: Sequence[float] = IDLE_FRACTION_SWEEP
) -> pd.DataFrame:
    """Network energy saved by ``lr_lr`` and ``lr_rab`` against ``ring`` for each idle share of link power.

    Uses the simulated rows of the largest node count at the largest simulated size of ``df`` (the run
    passes the judged configuration's rows).

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
        e = add_energy(big, gpus_per_node, settings, power).set_index("algorithm").energy_J
        for claim, spec in (("energy_lr_lr_vs_lr", f"lr_lr:k={k}"), ("energy_lr_rab_vs_lr", f"lr_rab:k={k}")):
            rows.append(
                dict(constant="idle_fraction", value=idle, claim=claim, saving_pct=float(100.0 * (1.0 - e[spec] / e["ring"])))
            )
    return pd.DataFrame(rows)


def constant_sweep_figure(results: Results) -> plt.Figure:
    """One panel per swept constant: the saving of each claim, where it would lie in the paper's band, the run's value.

    Points that the book's convention would call in band (:func:`repro.verdicts.in_band`) are filled;
    below zero the sign of the claim fails.
    """
    sweep, prm = sweep_verdicts(results.sweep), results.params
    assumed = {"nvlink_gbs": prm.nvlink_gbs, "nics_per_node": prm.nics_per_node,
               "idle_fraction": TSUBAME_LINK_POWER["ib"].idle_fraction}
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
            (line,) = ax.plot(g.value, g.saving_pct, "-o", mfc="none", label=claim)
            ax.plot(g.value[g.in_band], g.saving_pct[g.in_band], "o", color=line.get_color())
            if g.paper.notna().any():
                ax.axhline(float(g.paper.iloc[0]), color=line.get_color(), ls="--", lw=0.8)
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


def sweep_verdicts(sweep: pd.DataFrame) -> pd.DataFrame:
    """The constant sweep with each point's paper value and whether it would lie in the book's band.

    The band is the convention's (:func:`repro.verdicts.in_band` on our saving over the paper's).
    """
    paper = {c.id: c.paper_value for c in load_registry().get(CHAPTER).claims}
    out = sweep.assign(paper=sweep.claim.map(paper))
    out["in_band"] = [pv is not None and np.isfinite(pv) and in_band(s / pv) for s, pv in zip(out.saving_pct, out.paper)]
    return out


def in_band_values(results: Results, claim: str, constant: str) -> list[float]:
    """Values of a swept constant at which ``claim`` would lie in the book's band of the paper's number."""
    sw = sweep_verdicts(results.sweep)
    sel = sw[(sw.claim == claim) & (sw.constant == constant) & sw.in_band]
    return [float(v) for v in sel.value]


def short_label(spec: str, gpus_per_node: int) -> str:
    """Figure label of a spec: the node size dropped (it is the chapter's ``gpus_per_node``), ``S=`` for segments."""
    return spec.replace(f":k={gpus_per_node}", "").replace(",segments=", " S=").replace(":segments=", " S=")


def node_title(nodes: int, gpus_per_node: int) -> str:
    """Panel title of one node count."""
    return f"{nodes} nodes × {gpus_per_node} GPUs"


def time_vs_size_figure(results: Results) -> plt.Figure:
    """Time against vector size, one panel per node count (SimGrid, route-aware model, closed form)."""
    k = results.params.gpus_per_node
    style = SeriesStyle(xlabel="vector size (MiB)", xscale=MiB, label=functools.partial(short_label, gpus_per_node=k),
                        title=functools.partial(node_title, gpus_per_node=k), ncols=2)
    return sim_vs_model(results.table, "nbytes", "algorithm", "nodes", style=style)


def reductions(results: Results) -> pd.DataFrame:
    """Time saved by every multi-leader variant against the flat ring at the judged size, per node count (SimGrid)."""
    prm, df = results.params, results.table
    at = df[np.isfinite(df.sim_s) & (df.nbytes == int(prm.judged_mb * MiB))]
    ours = [s for s in specs(prm.gpus_per_node, prm.segments, prm.baselines) if s.startswith("lr_")]
    return pd.DataFrame({short_label(s, prm.gpus_per_node): reduction_pct(at, s, "ring").droplevel("nbytes")
                         for s in ours})


def reduction_figure(results: Results) -> plt.Figure:
    """Bars of :func:`reductions`."""
    return bars(reductions(results), ylabel="time saved against lr (%)",
                title=f"{results.params.judged_mb:g} MiB allreduce, SimGrid")


def comparison(results: Results) -> pd.DataFrame:
    """Every simulated point: SimGrid, both alpha-beta models and the network energy, sizes in MiB."""
    df, k = results.table, results.params.gpus_per_node
    table = comparison_table(df, ["nodes", "algorithm", "nbytes"])
    table["algorithm"] = [short_label(s, k) for s in table.algorithm]
    table["MiB"] = table.nbytes / MiB
    table = table.drop(columns="nbytes")
    table["energy (J)"] = df[np.isfinite(df.sim_s)].energy_J.to_numpy()
    return table
