"""Driver of the ``sparse-allreduce`` chapter: topology-aware allreduce of mixed dense and sparse gradients.

Each (algorithm, density, seed) point is first *dry-run* on real random sparse
vectors with all ranks in one process (:func:`repro.collectives.sparse.dry_run`),
which records the bytes of every message, step by step, as the formats switch;
the recorded messages are then replayed with SimGrid on a GPU-cluster platform
(:meth:`ClusterModel.platform`).  The replay may scale the payloads to a larger vector
(``model_dim / dim``): fill-in depends on the density, not on the length, so
the byte counts scale with the vector.  :func:`sparse_exactness` runs every
algorithm on a real MPI, :func:`claims` gives the values the ledger records.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.collectives import sparse
from repro.collectives.mpi_worker import launch_worker
from repro.collectives.npb_skeletons import trace_schedule
from repro.hpc.dragonfly import with_endpoint_overhead
from repro.hpc.ir import Schedule
from repro.hpc.platforms import Platform, gpu_cluster
from repro.hpc.simgrid import simulate


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
        pf = gpu_cluster(self.nodes, self.k, nvlink_bandwidth=self.nvlink_gbs * gb,
                         nvlink_latency=self.nvlink_us * 1e-6, pcie_bandwidth=self.pcie_gbs * gb, pcie_latency=0.0,
                         nic_bandwidth=self.nic_gbs * gb / nics, nic_latency=self.nic_us * 1e-6,
                         nics_per_node=nics, switch_latency=self.switch_us * 1e-6, switch_hops=1)
        return with_endpoint_overhead(pf, self.alpha_us * 1e-6)


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


def claims(df: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims."""
    seeds = sorted(df.seed.unique())
    low, high = df.density.min(), df.density.max()
    sparcml = [a for a in ("sparse_rdb", "sparse_split_ag") if a in set(df.algorithm)]
    return {
        "rr_speedup_vs_dense_low_density": [_t(df, "dense_ring_ring", low, s) / _t(df, "sparse_ring_ring", low, s)
                                             for s in seeds],
        "rr_overhead_at_density_1": [_t(df, "sparse_ring_ring", high, s) / _t(df, "dense_ring_ring", high, s)
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


def plot_time_vs_density(df: pd.DataFrame) -> plt.Figure:
    """Headline figure: allreduce time against density, per algorithm (mean and min-max over seeds)."""
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
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
