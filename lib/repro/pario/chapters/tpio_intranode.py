"""Chapter ``tpio-intranode``: intra-node aggregation in front of two-phase I/O (Kang et al., TPDS 2020).

* :func:`exact_runs` writes an uneven irregular decomposition on 8 to 16 MPI
  ranks, pretending groups of ``ranks_per_node`` consecutive ranks are a node,
  with MPI's own ``Write_at_all`` on all ranks and with TAM for every ``k``
  (:mod:`repro.pario.mpi_tam`), and with independent I/O (every rank writes
  its own extents with ``Write_at``, no aggregation); files must be
  byte-identical, and the ranks that really open the file for a TAM write
  (counted at :func:`repro.pario.mpiio.open_file`) must be the ``N k`` INAs.
  Times are indicative only.  One launch per rank count runs every seed.
* :func:`simgrid_runs` simulates the inter-node exchange of plain two-phase
  I/O and of TAM's layer 2 with SimGrid on a Dragonfly (one node per router).
* :func:`model_runs` costs both layers at 16 to 256 nodes of 64 ranks with
  the endpoint model (:mod:`repro.pario.tam_model`), sweeping the
  per-message overheads ``o0`` and ``o1`` that decide the verdict.

:class:`Params` holds the chapter's parameters, :func:`run` runs it and :func:`claims` gives the ledger
its evidence (one value per seed of the irregular map).
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.params import ChapterParams, require
from repro.pario.exchange_sim import DragonflyConstants, best_speedup, irregular_pattern, platform_for, simulate_kernel
from repro.pario.figures import speedup_against_queue_cost
from repro.pario.intranode import IntraNodeLayout
from repro.pario.kernels import UNORDERED_TEXT, EndpointModel
from repro.pario.mpi_worker import launch_irregular
from repro.pario.tam_model import NodeConstants, layer2_loads, plain_loads, simulate_layer2, tam_time

PLAIN = "two-phase"


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    exact_ranks: tuple[int, ...]
    exact_ranks_per_node: int
    exact_per_node: tuple[int, ...]
    exact_file_kib: int
    exact_mean_run: int
    repeats: int
    seeds: tuple[int, ...]
    bytes_per_rank: int
    mean_run: int
    model_nodes: tuple[int, ...]
    model_ranks_per_node: int
    model_per_node: tuple[int, ...]
    sim_nodes: tuple[int, ...]
    sim_ranks_per_node: int
    sim_per_node: tuple[int, ...]
    bandwidth_gbs: float
    global_bandwidth_gbs: float
    link_latency_ns: float
    switch_latency_ns: float
    alpha_us: float
    shm_alpha_us: float
    memory_bandwidth_gbs: float
    merge_ns: float
    o0_ns: float
    o1_ns: float
    fixed_costs_ns: tuple[float, ...]
    queue_costs_ns: tuple[float, ...]

    def checks(self) -> None:
        """Refuse impossible combinations before any MPI job or simulation starts."""
        require(all(p % self.exact_ranks_per_node == 0 for p in self.exact_ranks), self,
                ("exact_ranks", "exact_ranks_per_node"), "every exact_ranks value must be a multiple of exact_ranks_per_node")
        require(all(self.exact_ranks_per_node % k == 0 for k in self.exact_per_node), self,
                ("exact_per_node", "exact_ranks_per_node"), "every exact_per_node value must divide exact_ranks_per_node")
        require(all(self.model_ranks_per_node % k == 0 and k < self.model_ranks_per_node for k in self.model_per_node),
                self, ("model_per_node", "model_ranks_per_node"),
                "every model_per_node value must be a proper divisor of model_ranks_per_node")
        require(all(self.sim_ranks_per_node % k == 0 and k < self.sim_ranks_per_node for k in self.sim_per_node),
                self, ("sim_per_node", "sim_ranks_per_node"),
                "every sim_per_node value must be a proper divisor of sim_ranks_per_node")
        require(max(self.sim_nodes) * self.sim_ranks_per_node <= 1024, self, ("sim_nodes", "sim_ranks_per_node"),
                "plain two-phase puts every message in flight at once, and SimGrid's flow solver needs minutes for the "
                "16k flows of 1024 hosts and hours beyond: at most 1024 hosts")
        require(self.exact_file_kib * 1024 >= max(self.exact_ranks) * self.exact_mean_run, self,
                ("exact_file_kib", "exact_ranks", "exact_mean_run"),
                "the real writes' file must hold at least one mean run per rank")

    def exact_config(self) -> ExactConfig:
        """The real-MPI runs of the chapter."""
        return ExactConfig(ranks=self.exact_ranks, ranks_per_node=self.exact_ranks_per_node,
                           per_node=self.exact_per_node, file_bytes=self.exact_file_kib * 1024,
                           mean_run=self.exact_mean_run, repeats=self.repeats)

    def scale_config(self) -> ScaleConfig:
        """Pattern, platform and model constants at scale (seconds and bytes/s)."""
        return ScaleConfig(
            bytes_per_rank=self.bytes_per_rank, mean_run=self.mean_run, model_nodes=self.model_nodes,
            model_ranks_per_node=self.model_ranks_per_node, model_per_node=self.model_per_node,
            sim_nodes=self.sim_nodes, sim_ranks_per_node=self.sim_ranks_per_node, sim_per_node=self.sim_per_node,
            platform=DragonflyConstants(bandwidth=self.bandwidth_gbs * 1e9, global_bandwidth=self.global_bandwidth_gbs * 1e9,
                                        link_latency=self.link_latency_ns * 1e-9,
                                        switch_latency=self.switch_latency_ns * 1e-9, alpha=self.alpha_us * 1e-6),
            model=EndpointModel(alpha=self.alpha_us * 1e-6, bandwidth=self.bandwidth_gbs * 1e9, o0=self.o0_ns * 1e-9,
                                o1=self.o1_ns * 1e-9),
            node=NodeConstants(alpha_shm=self.shm_alpha_us * 1e-6, memory_bandwidth=self.memory_bandwidth_gbs * 1e9,
                               merge=self.merge_ns * 1e-9),
            queue_costs=tuple(c * 1e-9 for c in self.queue_costs_ns),
            fixed_costs=tuple(c * 1e-9 for c in self.fixed_costs_ns))


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


@dataclass(frozen=True, kw_only=True)
class IndependentRecord:
    """One independent write on real MPI (every rank writes its extents with ``Write_at``), MPI's write beside it."""

    p: int
    seed: int
    participants: int
    writes: int
    identical_to_mpi: bool
    read_back_ok: bool
    write_s: float
    mpi_write_s: float


def exact_runs(cfg: ExactConfig, seeds: list[int], timeout: float = 900.0) -> tuple[list[ExactRecord], list[IndependentRecord]]:
    """TAM writes for every rank count, seed and ``k``, and independent writes, each checked against MPI's file."""
    def job(p: int) -> dict:
        return {"aggregators": p // cfg.ranks_per_node, "kernels": [], "repeats": cfg.repeats, "independent": True,
                "tam": {"ranks_per_node": cfg.ranks_per_node, "per_node": list(cfg.per_node)}}

    out, independent = [], []
    for run in launch_irregular(cfg.ranks, seeds, cfg.file_bytes, cfg.mean_run, job, timeout):
        ind = run.report["independent"]
        independent.append(IndependentRecord(p=run.p, seed=run.seed, participants=ind["participants"],
                                             writes=ind["writes"],
                                             identical_to_mpi=bool(ind["identical_to_mpi"] and ind["equals_pattern"]),
                                             read_back_ok=bool(ind["read_back_ok"]), write_s=ind["write_s"],
                                             mpi_write_s=run.report["mpi"]["write_s"]))
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
    return out, independent


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


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params:
        The parameters of the run.
    exact, independent:
        The TAM writes and the independent writes on real MPI.
    sims:
        The SimGrid runs of the inter-node exchange.
    sweep:
        :func:`model_runs`: the endpoint model for every node count, seed, ``k``, ``o0`` and ``o1``.
    """

    params: Params
    exact: list[ExactRecord]
    independent: list[IndependentRecord]
    sims: list[SimRecord]
    sweep: pd.DataFrame


def run(params: Params) -> Results:
    """The real MPI writes, the SimGrid runs and the endpoint model."""
    seeds = list(params.seeds)
    exact, independent = exact_runs(params.exact_config(), seeds)
    scale = params.scale_config()
    return Results(params=params, exact=exact, independent=independent, sims=simgrid_runs(scale, seeds),
                   sweep=model_runs(scale, seeds))


def claims(results: Results) -> dict[str, list[float]]:
    """Per-seed values of every claim of the chapter (see its registry file).

    ``participants`` compares the ranks that really opened the file for each TAM write with ``N k``.
    """
    prm, cfg, sweep = results.params, results.params.scale_config(), results.sweep
    seeds = list(prm.seeds)
    n_model, n_sim = max(cfg.model_nodes), max(cfg.sim_nodes)
    stated = sweep[(sweep.nodes == n_model) & (sweep.o0 == cfg.model.o0) & (sweep.o1 == cfg.model.o1)]
    model_sp = tam_speedup(stated, "total_s")
    sim_df = pd.DataFrame([r.__dict__ for r in results.sims])
    sim_sp = tam_speedup(sim_df[sim_df.nodes == n_sim], "sim_s")
    return {
        "tam_comm_speedup": [float(model_sp[model_sp.seed == s].speedup.iloc[0]) for s in seeds],
        "tam_flow_speedup": [float(sim_sp[sim_sp.seed == s].speedup.iloc[0]) for s in seeds],
        **real_run_checks(results),
    }


def real_run_checks(results: Results) -> dict[str, list[float]]:
    """The two checks of the real runs, per seed.

    ``files_identical``: files that differ from MPI's or fail to read back; ``participants``: the largest gap
    between the ranks that opened the file for a TAM write and ``N k``.
    """
    seeds, exact, independent = list(results.params.seeds), results.exact, results.independent
    return {
        "files_identical": [float(sum(not (r.identical_to_mpi and r.read_back_ok) for r in exact if r.seed == s)
                                  + sum(not (r.identical_to_mpi and r.read_back_ok) for r in independent if r.seed == s))
                            for s in seeds],
        "participants": [float(max(abs(r.participants - r.nodes * r.per_node) for r in exact if r.seed == s))
                         for s in seeds],
    }


def write_table(results: Results) -> pd.DataFrame:
    """The real writes side by side per rank count: MPI's all-rank write, independent I/O and TAM per ``k``.

    Times are medians on an oversubscribed shared host: indicative only.
    """
    rows = [dict(p=r.p, seed=r.seed, method="independent I/O (Write_at per extent)", participants=r.participants,
                 write_s=r.write_s, identical=r.identical_to_mpi and r.read_back_ok) for r in results.independent]
    rows += [dict(p=r.p, seed=r.seed, method="MPI Write_at_all, every rank", participants=r.p, write_s=r.mpi_write_s,
                  identical=True) for r in results.independent]
    rows += [dict(p=r.p, seed=r.seed, method=f"TAM k={r.per_node}", participants=r.participants, write_s=r.tam_s,
                  identical=r.identical_to_mpi and r.read_back_ok) for r in results.exact]
    df = pd.DataFrame(rows)
    return df.groupby(["p", "method"], sort=False).agg(participants=("participants", "max"),
                                                       write_s=("write_s", "mean"), identical=("identical", "all"))


def scaling_figure(results: Results) -> plt.Figure:
    """Communication time against processes (left) and the layers per ``k`` at the largest scale (right)."""
    sweep, cfg = results.sweep, results.params.scale_config()
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


def overhead_sweep_figure(results: Results) -> plt.Figure:
    """Plain over best-TAM speedup against ``o1``, one line per ``o0``, at the largest node count."""
    sweep = results.sweep
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
