"""Driver of the ``sparse-allreduce`` chapter: topology-aware allreduce of mixed dense and sparse gradients.

Each (algorithm, density, seed) point is first *dry-run* on real random sparse
vectors with all ranks in one process (:func:`repro.collectives.sparse.dry_run`),
which records the bytes of every message, step by step, as the formats switch;
the recorded messages are then replayed with SimGrid on a GPU-cluster platform
(:meth:`ClusterModel.platform`).  The replay may scale the payloads to a larger vector
(``model_dim / dim``): fill-in depends on the density, not on the length, so
the byte counts scale with the vector.  :func:`sparse_exactness` runs every
algorithm on a real MPI, :func:`claims` gives the values the ledger records:
one per seed (the seed draws the random sparse gradients), at the one judged
density (``judged_density``) and, for the overhead claim, at density 1.
The speed-up claims are *modelled* (their size follows the assumed platform
constants), so :func:`constant_sweep` moves the NIC bandwidth and the start-up
one at a time at the judged density (:func:`constant_sweep_figure`).
:class:`Params` holds the chapter's parameters and :func:`run` the chapter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.collectives import sparse
from repro.collectives.congestion import congestion_cost
from repro.collectives.mpi_worker import launch_worker
from repro.collectives.npb_skeletons import trace_schedule
from repro.hpc.dragonfly import with_endpoint_overhead
from repro.hpc.ir import Schedule
from repro.hpc.platforms import GpuClusterSettings, Platform, gpu_cluster
from repro.hpc.simgrid import simulate
from repro.params import ChapterParams, require
from repro.registry import load_registry
from repro.verdicts import in_band

NEEDED = ("dense_ring_ring", "sparse_ring_ring")
"""Algorithms the claims compare."""
SPARCML = ("sparse_rdb", "sparse_split_ag")
"""The SparCML-style sparse allreduces."""
MPI_LENGTHS = (0, 5, 1000, 4096)
CHAPTER = "sparse-allreduce"
SWEEP_FACTORS = {"nic_gbs": (0.25, 1.0, 4.0), "alpha_us": (0.0, 1.0, 4.0)}
"""Multiples of the run's own NIC bandwidth and start-up tried by :func:`constant_sweep` (1: the run's value)."""
SPEEDUP_CLAIMS = ("rr_speedup_vs_dense_low_density", "rr_speedup_vs_sparcml_low_density")


@dataclass(frozen=True, kw_only=True)
class ClusterModel:
    """An ABCI-like GPU cluster (stated assumptions).

    Attributes
    ----------
    nodes, k:
        Nodes and GPUs per node.
    nvlink_gbs, nvlink_us:
        Direct GPU-GPU links inside a node (GB/s, latency).
    pcie_gbs:
        GPU to NIC path (GB/s), one per GPU.
    nic_gbs, nic_us:
        Node injection bandwidth (all NICs together) and latency of a NIC link.
    switch_us:
        Switch traversal of the (non-blocking) inter-node network.
    alpha_us:
        Software start-up per message.
    """

    nodes: int
    k: int
    nvlink_gbs: float = 50.0
    nvlink_us: float = 0.7
    pcie_gbs: float = 16.0
    nic_gbs: float = 25.0
    nic_us: float = 1.0
    switch_us: float = 0.2
    alpha_us: float = 2.0

    @property
    def p(self) -> int:
        """Total GPUs (ranks)."""
        return self.nodes * self.k

    def platform(self) -> Platform:
        """The cluster as a SimGrid platform, built by :func:`repro.hpc.platforms.gpu_cluster`.

        NVLink inside a node; between nodes GPU -> PCIe switch -> NIC (two per node
        when ``k`` is even, sharing ``nic_gbs``) -> non-blocking fabric -> mirror
        path; plus the start-up ``alpha_us`` at both ends of every message.
        """
        if self.nodes < 1 or self.k < 1:
            raise ValueError(f"nodes and k must be >= 1, got nodes={self.nodes}, k={self.k}")
        nics = 2 if self.k % 2 == 0 else 1
        gb = 1e9
        links = GpuClusterSettings(nvlink_bandwidth=self.nvlink_gbs * gb, nvlink_latency=self.nvlink_us * 1e-6,
                                   pcie_bandwidth=self.pcie_gbs * gb, pcie_latency=0.0,
                                   nic_bandwidth=self.nic_gbs * gb / nics, nic_latency=self.nic_us * 1e-6,
                                   nics_per_node=nics, switch_latency=self.switch_us * 1e-6, switch_hops=1)
        pf = gpu_cluster(self.nodes, self.k, links)
        return with_endpoint_overhead(pf, self.alpha_us * 1e-6)


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    nodes: int
    k: int
    algorithms: tuple[str, ...]
    densities: tuple[float, ...]
    judged_density: float
    dim: int
    model_dim: int
    nvlink_gbs: float
    pcie_gbs: float
    nic_gbs: float
    alpha_us: float
    mpi_ranks: int
    mpi_densities: tuple[float, ...]
    seeds: tuple[int, ...]

    def checks(self) -> None:
        """Refuse impossible combinations before any dry run starts."""
        require(set(NEEDED) <= set(self.algorithms), self, "algorithms",
                "algorithms must contain dense_ring_ring and sparse_ring_ring (the claims compare them)")
        require(any(a in self.algorithms for a in SPARCML), self, "algorithms",
                "algorithms must contain sparse_rdb or sparse_split_ag (the SparCML claim compares them)")
        require(self.judged_density in self.densities, self, ("judged_density", "densities"),
                "the judged density must be one of densities")
        require(1.0 in self.densities, self, "densities", "densities must contain 1.0 (the overhead claim reads it)")
        require(self.dim >= self.nodes * self.k, self, ("dim", "nodes", "k"),
                "dim must be at least the number of ranks (nodes x k)")
        require(self.model_dim >= self.dim, self, ("model_dim", "dim"), "model_dim must be at least dim")
        require(self.mpi_ranks % min(self.k, self.mpi_ranks) == 0, self, ("mpi_ranks", "k"),
                "the MPI check groups its ranks into nodes of min(k, mpi_ranks): mpi_ranks must be a multiple of it")
        rdb_mpi = "sparse_rdb" in self.algorithms
        require(not rdb_mpi or self.mpi_ranks & (self.mpi_ranks - 1) == 0, self, ("mpi_ranks", "algorithms"),
                "sparse_rdb needs a power-of-two number of MPI ranks")
        require(not rdb_mpi or (self.nodes * self.k) & (self.nodes * self.k - 1) == 0, self,
                ("nodes", "k", "algorithms"), "sparse_rdb needs a power-of-two number of ranks (nodes x k)")

    @property
    def dense_mib(self) -> float:
        """MiB of one rank's vector at ``model_dim`` elements, dense (4-byte values)."""
        return self.model_dim * 4 / 2**20

    def model(self) -> ClusterModel:
        """The cluster of the run."""
        return ClusterModel(nodes=self.nodes, k=self.k, nvlink_gbs=self.nvlink_gbs, pcie_gbs=self.pcie_gbs,
                            nic_gbs=self.nic_gbs, alpha_us=self.alpha_us)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params:
        The parameters of the run.
    table:
        :func:`density_sweep`: every algorithm, density and seed.
    exactness:
        :func:`sparse_exactness` on a real MPI.
    sweep:
        :func:`constant_sweep` at the judged density.
    """

    params: Params
    table: pd.DataFrame
    exactness: pd.DataFrame
    sweep: pd.DataFrame


def run(params: Params, *, progress: bool = True) -> Results:
    """Exactness on a real MPI, then the dry runs and SimGrid replays of every algorithm, density and seed."""
    prm = params
    mpi_k = min(prm.k, prm.mpi_ranks)
    exact = sparse_exactness(list(prm.algorithms), list(prm.mpi_densities), prm.mpi_ranks, mpi_k, MPI_LENGTHS,
                             seed=prm.seeds[0])
    table = density_sweep(prm.model(), list(prm.algorithms), list(prm.densities), prm.dim, prm.model_dim,
                          list(prm.seeds), progress=progress)
    return Results(params=prm, table=table, exactness=exact, sweep=constant_sweep(prm))


def replay_schedule(logs: list[list[tuple[int, int, int]]], scale: float, name: str) -> Schedule:
    """A trace schedule from the ranks' message logs, payloads scaled by ``scale`` (headers kept)."""
    nsteps = 1 + max((s for log in logs for s, _, _ in log), default=-1)
    steps: list[list[tuple[int, int, int]]] = [[] for _ in range(nsteps)]
    for src, log in enumerate(logs):
        for s, dst, b in log:
            payload = b - sparse.HEADER_BYTES
            steps[s].append((src, dst, int(sparse.HEADER_BYTES + round(payload * scale))))
    return trace_schedule(name, len(logs), [s for s in steps if s])


def density_sweep(model: ClusterModel, algorithms: list[str], densities: list[float], dim: int, model_dim: int,
                  seeds: list[int], progress: bool = True) -> pd.DataFrame:
    """Dry-run and replay every (algorithm, density, seed).

    Points whose data cannot change the bytes (dense algorithms, and sparse
    ones at densities where every input is already dense) are computed once
    and reused for every seed.

    Returns
    -------
    pandas.DataFrame
        ``algorithm, density, seed, time_s, bytes_per_rank, messages_per_rank, steps, result_dense``.
    """
    bad = set(algorithms) - set(sparse.ALGORITHMS)
    if bad:
        raise ValueError(f"algorithms: unknown {sorted(bad)}; choose from {sparse.ALGORITHMS}")
    if dim < model.p:
        raise ValueError(f"dim ({dim}) must be at least the number of ranks ({model.p})")
    if model_dim < dim:
        raise ValueError(f"model_dim ({model_dim}) must be >= dim ({dim})")
    pf = model.platform()
    scale = model_dim / dim
    cache: dict[tuple[str, float], dict] = {}
    rows = []
    bar = tqdm(total=len(algorithms) * len(densities) * len(seeds), desc="dry runs + SimGrid", disable=not progress)
    for algo in algorithms:
        for dens in densities:
            fixed = algo.startswith("dense") or sparse.prefers_dense(int(round(dim * dens)), dim)
            for seed in seeds:
                key = (algo, dens)
                if fixed and key in cache:
                    rows.append({**cache[key], "seed": seed})
                    bar.update()
                    continue
                outs, logs = sparse.dry_run(algo, model.p, dim, dens, seed, k=model.k)
                sched = replay_schedule(logs, scale, f"{algo}@{dens:g}")
                res = simulate(sched, pf, 1)
                row = dict(algorithm=algo, density=dens, seed=seed, time_s=res.time,
                           bytes_per_rank=float(np.mean([sum(b for _, _, b in lg) for lg in logs])) * scale,
                           messages_per_rank=float(np.mean([len(lg) for lg in logs])),
                           steps=len(sched.comm_steps()), result_dense=bool(outs[0].is_dense))
                if fixed:
                    cache[key] = row
                rows.append(row)
                bar.update()
    bar.close()
    return pd.DataFrame(rows)


def _t(df: pd.DataFrame, algo: str, dens: float, seed: int) -> float:
    sel = df[(df.algorithm == algo) & np.isclose(df.density, dens) & (df.seed == seed)]
    return float(sel.time_s.iloc[0])


def claims(results: Results) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (the seed draws the random gradients).

    The two speed-ups are read at the judged density, the overhead at density 1.
    """
    df, low = results.table, results.params.judged_density
    seeds = sorted(df.seed.unique())
    sparcml = [a for a in SPARCML if a in set(df.algorithm)]
    return {
        "rr_speedup_vs_dense_low_density": [_t(df, "dense_ring_ring", low, s) / _t(df, "sparse_ring_ring", low, s)
                                             for s in seeds],
        "rr_overhead_at_density_1": [_t(df, "sparse_ring_ring", 1.0, s) / _t(df, "dense_ring_ring", 1.0, s)
                                     for s in seeds],
        "rr_speedup_vs_sparcml_low_density": [min(_t(df, a, low, s) for a in sparcml)
                                              / _t(df, "sparse_ring_ring", low, s) for s in seeds],
    }


def expected_fill_in(density: float, q: int) -> float:
    """Expected density after summing ``q`` independent uniform vectors of density ``density``."""
    return 1.0 - (1.0 - density) ** q


def sparse_exactness(algorithms: list[str], densities: list[float], p: int, k: int, lengths: tuple[int, ...],
                     seed: int = 0, timeout: float = 180.0) -> pd.DataFrame:
    """Every algorithm and density on a real MPI (one ``mpiexec -n p`` launch), against MPI's dense Allreduce.

    Raises
    ------
    ValueError
        If the launch ran no case.
    """
    cases = [f"{a}:k={k}:density={d!r}" for a in algorithms for d in densities]
    rep = launch_worker("sparse", p, ["--cases", ";".join(cases), "--lengths", ",".join(map(str, lengths)),
                                      "--seed", str(seed)], timeout=timeout)
    if rep["n_cases"] == 0:
        raise ValueError(f"no sparse case ran on {p} ranks")
    rows = [dict(algorithm=c["algorithm"], density=c["density"], elements=c["n"], ranks=c["p"], equal_to_MPI=c["ok"],
                 bytes_sent_rank0=c["bytes_sent"], result_dense=c["result_dense"]) for c in rep["cases"]]
    return pd.DataFrame(rows)


def density_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per density and algorithm.

    Mean and sd (over seeds) of the time in ms, MB sent per rank, steps, and whether the result came out
    dense.
    """
    rows = []
    for (density, algo), g in df.groupby(["density", "algorithm"]):
        rows.append({"density": density, "algorithm": algo, "time_ms": 1e3 * g.time_s.mean(),
                     "time_sd_ms": 1e3 * g.time_s.std(ddof=0), "MB_per_rank": g.bytes_per_rank.mean() / 1e6,
                     "steps": g.steps.iloc[0], "result_dense": bool(g.result_dense.all())})
    return pd.DataFrame(rows).set_index(["density", "algorithm"])


def plot_time_vs_density(results: Results) -> plt.Figure:
    """Headline figure: allreduce time against density, per algorithm (mean and min-max over seeds)."""
    df = results.table
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for algo, g in df.groupby("algorithm", sort=False):
        agg = g.groupby("density").time_s.agg(["mean", "min", "max"])
        style = "--" if algo.startswith("dense") else "-"
        ax.plot(agg.index, agg["mean"] * 1e3, style + "o", label=algo, ms=4)
        ax.fill_between(agg.index, agg["min"] * 1e3, agg["max"] * 1e3, alpha=0.2)
        b = g.groupby("density").bytes_per_rank.mean()
        bx.plot(b.index, b.values / 1e6, style + "o", label=algo, ms=4)
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xlabel("density of each rank's gradient")
    ax.set_yscale("log")
    ax.set_ylabel("simulated allreduce time (ms)")
    ax.set_title("time (mean over seeds; band: min-max)")
    bx.set_yscale("log")
    bx.set_ylabel("MB sent per rank")
    bx.set_title("bytes sent per rank")
    ax.axvline(results.params.judged_density, color="grey", ls=":", lw=1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def constant_sweep(prm: Params) -> pd.DataFrame:
    """The two speed-up claims at the judged density while one assumed platform constant moves.

    Every compared algorithm is dry-run once (first seed) at ``judged_density``; its replayed schedule is
    costed by the route-aware alpha-beta model (:func:`~repro.collectives.congestion.congestion_cost`) on
    the cluster with the NIC bandwidth or the start-up set to each multiple in :data:`SWEEP_FACTORS`
    (the factor 1 is the run's own cluster, where ``sim_s`` also gives SimGrid's speed-ups, so the gap
    between the model and SimGrid can be read off).

    Returns
    -------
    pandas.DataFrame
        ``constant``, ``value``, ``claim``, ``model`` (the speed-up by the model) and ``sim``
        (SimGrid's, at the run's own constants only; NaN elsewhere).
    """
    base = prm.model()
    algos = [a for a in (*NEEDED, *SPARCML) if a in prm.algorithms]
    scheds = {}
    for algo in algos:
        _, logs = sparse.dry_run(algo, base.p, prm.dim, prm.judged_density, prm.seeds[0], k=base.k)
        scheds[algo] = replay_schedule(logs, prm.model_dim / prm.dim, f"{algo}@{prm.judged_density:g}")
    sim = {algo: simulate(sched, base.platform(), 1).time for algo, sched in scheds.items()}
    rows = []
    for constant, factors in SWEEP_FACTORS.items():
        for factor in factors:
            value = getattr(base, constant) * factor
            pf = replace(base, **{constant: value}).platform()
            t = {algo: congestion_cost(sched, pf, 1) for algo, sched in scheds.items()}
            for claim, (model, simulated) in _speedups(t, sim, own=factor == 1.0).items():
                rows.append(dict(constant=constant, value=value, claim=claim, model=model, sim=simulated))
    return pd.DataFrame(rows)


def _speedups(t: dict[str, float], sim: dict[str, float], own: bool) -> dict[str, tuple[float, float]]:
    """The two speed-ups from model times ``t`` (and SimGrid's ``sim`` where ``own``)."""
    def both(times: dict[str, float]) -> tuple[float, float]:
        rr = times["sparse_ring_ring"]
        return times["dense_ring_ring"] / rr, min(times[a] for a in SPARCML if a in times) / rr

    model, simulated = both(t), both(sim) if own else (float("nan"), float("nan"))
    return {claim: (model[i], simulated[i]) for i, claim in enumerate(SPEEDUP_CLAIMS)}


def in_band_values(results: Results, claim: str, constant: str) -> list[float]:
    """Swept values of ``constant`` at which ``claim``'s modelled speed-up would lie in the book's band."""
    registered = load_registry().get(CHAPTER).claim(claim)
    sel = results.sweep[(results.sweep.claim == claim) & (results.sweep.constant == constant)]
    return [float(v) for v, m in zip(sel.value, sel.model) if in_band(registered.ratio(float(m)))]


def constant_sweep_figure(results: Results) -> plt.Figure:
    """One panel per swept constant: each speed-up claim by the model, its paper value and the run's constant.

    The hollow markers at the run's own constant are SimGrid's values, for the model's gap to the simulator.
    """
    sweep, model = results.sweep, results.params.model()
    registry = load_registry().get(CHAPTER)
    labels = {"nic_gbs": "NIC bandwidth per node (GB/s)", "alpha_us": "start-up per message (us)"}
    constants = list(dict.fromkeys(sweep.constant))
    fig, axes = plt.subplots(1, len(constants), figsize=(5.2 * len(constants), 3.6), squeeze=False)
    for ax, constant in zip(axes[0], constants):
        part = sweep[sweep.constant == constant]
        for claim, g in part.groupby("claim", sort=False):
            (line,) = ax.plot(g.value, g.model, "-o", label=f"{claim} (model)")
            ax.plot(g.value, g.sim, "s", mfc="none", color=line.get_color(), ms=9)
            paper = registry.claim(str(claim)).paper_value
            if paper is not None:
                ax.axhline(paper, color=line.get_color(), ls="--", lw=0.8)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axvline(getattr(model, constant), color="grey", ls=":", label="this run (squares: SimGrid)")
        ax.set(xlabel=labels.get(constant, constant), ylabel="speed-up of sparse ring_ring (x)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
