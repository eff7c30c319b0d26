"""Chapter ``tpio-intranode``: intra-node aggregation in front of two-phase I/O (Kang et al., TPDS 2020).

* :func:`exact_runs` writes an uneven irregular decomposition on 8 to 16 MPI
  ranks, pretending groups of ``ranks_per_node`` consecutive ranks are a node,
  with MPI's own ``Write_at_all`` on all ranks and with TAM for every ``k``
  (:mod:`repro.pario.mpi_tam`); files must be byte-identical and only the
  ``N k`` INAs may call MPI-IO.  Times are indicative only.
* :func:`simgrid_runs` simulates the inter-node exchange of plain two-phase
  I/O and of TAM's layer 2 with SimGrid on a Dragonfly (one node per router).
* :func:`model_runs` costs both layers at 16 to 256 nodes of 64 ranks with
  the endpoint model (:mod:`repro.pario.tam_model`), sweeping the
  per-message overheads ``o0`` and ``o1`` that decide the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.pario.exchange_sim import DragonflyConstants, best_speedup, irregular_pattern, platform_for, simulate_kernel
from repro.pario.figures import speedup_against_queue_cost
from repro.pario.intranode import IntraNodeLayout
from repro.pario.kernels import UNORDERED_TEXT, EndpointModel
from repro.pario.mpi_worker import launch_irregular
from repro.pario.tam_model import NodeConstants, layer2_loads, plain_loads, simulate_layer2, tam_time

PLAIN = "two-phase"


@dataclass(frozen=True, kw_only=True)
class ExactConfig:
    """The real-MPI runs.

    Attributes
    ----------
    ranks:
        MPI rank counts.
    ranks_per_node:
        Ranks that act as one node.
    per_node:
        INAs per node ``k`` to run (divisors of ``ranks_per_node``).
    file_bytes, mean_run:
        File size and mean run length (bytes) of the irregular map.
    repeats:
        Timed repetitions (median kept).
    """

    ranks: tuple[int, ...]
    ranks_per_node: int
    per_node: tuple[int, ...]
    file_bytes: int
    mean_run: int
    repeats: int


@dataclass(frozen=True, kw_only=True)
class ExactRecord:
    """One TAM write on real MPI, with MPI's own all-rank write of the same requests beside it."""

    p: int
    seed: int
    per_node: int
    nodes: int
    participants: int
    layer1_messages: int
    layer1_bytes: int
    pieces_in: int
    pieces_out: int
    identical_to_mpi: bool
    read_back_ok: bool
    tam_s: float
    mpi_write_s: float


def exact_runs(cfg: ExactConfig, seeds: list[int], timeout: float = 300.0) -> list[ExactRecord]:
    """TAM writes for every rank count, seed and ``k``, each checked against MPI's file."""
    def job(p: int) -> dict:
        return {"aggregators": p // cfg.ranks_per_node, "kernels": [], "repeats": cfg.repeats,
                "tam": {"ranks_per_node": cfg.ranks_per_node, "per_node": list(cfg.per_node)}}

    out = []
    for run in launch_irregular(cfg.ranks, seeds, cfg.file_bytes, cfg.mean_run, job, timeout):
        for t in run.report["tam"]:
            out.append(
                ExactRecord(
                    p=run.p,
                    seed=run.seed,
                    per_node=t["per_node"],
                    nodes=t["nodes"],
                    participants=t["participants"],
                    layer1_messages=t["layer1_messages"],
                    layer1_bytes=t["layer1_bytes"],
                    pieces_in=t["pieces_in"],
                    pieces_out=t["pieces_out"],
                    identical_to_mpi=bool(t["identical_to_mpi"] and t["equals_pattern"]),
                    read_back_ok=bool(t["read_back_ok"]),
                    tam_s=t["total_s"],
                    mpi_write_s=run.report["mpi"]["write_s"],
                )
            )
    return out


@dataclass(frozen=True, kw_only=True)
class ScaleConfig:
    """Pattern, platform and model constants at scale.

    Attributes
    ----------
    bytes_per_rank, mean_run:
        Mean bytes per rank and mean run length (bytes) of the E3SM-like map.
    model_nodes, model_ranks_per_node, model_per_node:
        Node counts, ranks per node and the ``k`` values of the endpoint model.
    sim_nodes, sim_ranks_per_node, sim_per_node:
        The same for SimGrid (one node per Dragonfly router).
    platform:
        SimGrid Dragonfly constants.
    model:
        Endpoint-model constants; ``o0`` and ``o1`` are the stated values.
    node:
        Intra-node (layer 1) constants.
    queue_costs, fixed_costs:
        Values of ``o1`` and ``o0`` (s) swept.
    """

    bytes_per_rank: int
    mean_run: int
    model_nodes: tuple[int, ...]
    model_ranks_per_node: int
    model_per_node: tuple[int, ...]
    sim_nodes: tuple[int, ...]
    sim_ranks_per_node: int
    sim_per_node: tuple[int, ...]
    platform: DragonflyConstants
    model: EndpointModel
    node: NodeConstants
    queue_costs: tuple[float, ...]
    fixed_costs: tuple[float, ...]


def model_runs(cfg: ScaleConfig, seeds: list[int]) -> pd.DataFrame:
    """Endpoint-model communication time of plain two-phase and of TAM for every ``k``, ``o0`` and ``o1``.

    Returns
    -------
    pandas.DataFrame
        Columns ``nodes, p, seed, o0, o1, method, per_node, layer1_s, layer2_s, total_s``
        (plain two-phase has ``per_node = ranks_per_node`` and no layer 1).
    """
    rows = []
    ppn = cfg.model_ranks_per_node
    o0s = sorted(set(cfg.fixed_costs) | {cfg.model.o0})
    o1s = sorted(set(cfg.queue_costs) | {cfg.model.o1})
    for nodes in tqdm(cfg.model_nodes, desc="endpoint model (node counts)"):
        p = nodes * ppn
        for seed in seeds:
            pat = irregular_pattern(p, ppn, cfg.bytes_per_rank, cfg.mean_run, seed)
            plain = plain_loads(pat)
            layouts = {k: IntraNodeLayout(p=p, ranks_per_node=ppn, per_node=k) for k in cfg.model_per_node}
            inter = {k: layer2_loads(pat, lay) for k, lay in layouts.items()}
            for o0 in o0s:
                for o1 in o1s:
                    m = EndpointModel(alpha=cfg.model.alpha, bandwidth=cfg.model.bandwidth, o0=o0, o1=o1)
                    base = dict(nodes=nodes, p=p, seed=seed, o0=o0, o1=o1)
                    t = plain.time(m)
                    rows.append(base | dict(method=PLAIN, per_node=ppn, layer1_s=0.0, layer2_s=t, total_s=t))
                    for k in cfg.model_per_node:
                        tt = tam_time(pat, layouts[k], m, cfg.node, inter[k])
                        rows.append(
                            base | dict(method=f"TAM k={k}", per_node=k, layer1_s=tt.layer1, layer2_s=tt.layer2, total_s=tt.total)
                        )
    return pd.DataFrame(rows)


@dataclass(frozen=True, kw_only=True)
class SimRecord:
    """The inter-node exchange simulated by SimGrid: plain two-phase (``per_node = ppn``) or TAM's layer 2."""

    nodes: int
    seed: int
    method: str
    per_node: int
    sim_s: float
    senders: int
    wall_s: float


def simgrid_runs(cfg: ScaleConfig, seeds: list[int]) -> list[SimRecord]:
    """SimGrid runs of the inter-node exchange for every node count, seed and ``k``."""
    ppn = cfg.sim_ranks_per_node
    out = []
    points = [(n, s, k) for n in cfg.sim_nodes for s in seeds for k in (None, *cfg.sim_per_node)]
    platforms = {n: platform_for(n * ppn, ppn, cfg.platform) for n in cfg.sim_nodes}
    for nodes, seed, k in tqdm(points, desc="SimGrid runs"):
        pat = irregular_pattern(nodes * ppn, ppn, cfg.bytes_per_rank, cfg.mean_run, seed)
        if k is None:
            sim = simulate_kernel(pat, UNORDERED_TEXT, platforms[nodes])
            out.append(
                SimRecord(nodes=nodes, seed=seed, method=PLAIN, per_node=ppn, sim_s=sim.time, senders=pat.p, wall_s=sim.wall_s)
            )
        else:
            layout = IntraNodeLayout(p=pat.p, ranks_per_node=ppn, per_node=k)
            sim = simulate_layer2(pat, layout, platforms[nodes])
            out.append(
                SimRecord(
                    nodes=nodes,
                    seed=seed,
                    method=f"TAM k={k}",
                    per_node=k,
                    sim_s=sim.time,
                    senders=len(layout.inas()),
                    wall_s=sim.wall_s,
                )
            )
    return out


def tam_speedup(times: pd.DataFrame, column: str) -> pd.DataFrame:
    """Plain two-phase time over the best TAM time, per group of the other key columns.

    ``times`` holds ``method`` and ``column`` plus any of ``nodes, seed, o0, o1``.
    """
    return best_speedup(
        times,
        keys=("nodes", "seed", "o0", "o1"),
        label="method",
        baseline=PLAIN,
        is_candidate=lambda methods: methods != PLAIN,
        column=column,
    )


def claims(
    exact: list[ExactRecord], sims: list[SimRecord], sweep: pd.DataFrame, cfg: ScaleConfig, seeds: list[int]
) -> dict[str, list[float]]:
    """Per-seed values of every claim of the chapter (see its registry file)."""
    n_model, n_sim = max(cfg.model_nodes), max(cfg.sim_nodes)
    stated = sweep[(sweep.nodes == n_model) & (sweep.o0 == cfg.model.o0) & (sweep.o1 == cfg.model.o1)]
    model_sp = tam_speedup(stated, "total_s")
    sim_df = pd.DataFrame([r.__dict__ for r in sims])
    sim_sp = tam_speedup(sim_df[sim_df.nodes == n_sim], "sim_s")
    return {
        "tam_comm_speedup": [float(model_sp[model_sp.seed == s].speedup.iloc[0]) for s in seeds],
        "tam_flow_speedup": [float(sim_sp[sim_sp.seed == s].speedup.iloc[0]) for s in seeds],
        "files_identical": [float(sum(not (r.identical_to_mpi and r.read_back_ok) for r in exact if r.seed == s)) for s in seeds],
        "participants": [float(max(abs(r.participants - r.nodes * r.per_node) for r in exact if r.seed == s)) for s in seeds],
    }


def scaling_figure(sweep: pd.DataFrame, cfg: ScaleConfig) -> plt.Figure:
    """Communication time against processes (left) and the layers per ``k`` at the largest scale (right)."""
    stated = sweep[(sweep.o0 == cfg.model.o0) & (sweep.o1 == cfg.model.o1)]
    mean = stated.groupby(["method", "per_node", "p"])[["layer1_s", "layer2_s", "total_s"]].mean().reset_index()
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=(11, 4))
    for (method, _), grp in mean.groupby(["method", "per_node"], sort=False):
        ax_l.plot(grp.p, grp.total_s * 1e3, marker="o", label=method, **({"color": "k", "lw": 2} if method == PLAIN else {}))
    ax_l.set(
        xscale="log",
        yscale="log",
        xlabel="processes",
        ylabel="communication time, ms (model)",
        title=f"o0 = {cfg.model.o0 * 1e9:g} ns, o1 = {cfg.model.o1 * 1e9:g} ns",
    )
    ax_l.legend(fontsize=7)
    top = mean[mean.p == mean.p.max()].sort_values("per_node")
    x = np.arange(len(top))
    ax_r.bar(x, top.layer1_s * 1e3, label="layer 1 (intra-node gather + merge)")
    ax_r.bar(x, top.layer2_s * 1e3, bottom=top.layer1_s * 1e3, label="layer 2 (inter-node exchange)")
    ax_r.set_xticks(x)
    ax_r.set_xticklabels(top.method, rotation=20, fontsize=8)
    ax_r.set(yscale="log", ylabel="ms (model)", title=f"{int(mean.p.max())} processes")
    ax_r.legend(fontsize=7)
    fig.tight_layout()
    return fig


def overhead_sweep_figure(sweep: pd.DataFrame) -> plt.Figure:
    """Plain over best-TAM speedup against ``o1``, one line per ``o0``, at the largest node count."""
    top = sweep[sweep.nodes == sweep.nodes.max()]
    sp = tam_speedup(top, "total_s")
    stats = sp.groupby(["o0", "o1"]).speedup.agg(["mean", "std"]).reset_index()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    speedup_against_queue_cost(ax, stats, "o0", lambda o0: f"o0 = {o0 * 1e9:g} ns")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="queue-search cost o1, ns (dotted: o1 = 0)",
        ylabel="two-phase time / best TAM time",
        title=f"{int(top.p.max())} processes, model",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
