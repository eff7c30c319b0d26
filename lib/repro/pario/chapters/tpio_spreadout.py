"""Chapter ``tpio-spreadout``: all-to-many kernels of two-phase I/O (Kang et al., SC'20).

Three parts, one per kind of evidence:

* :func:`exact_runs` writes an uneven E3SM-like irregular decomposition on
  4 to 16 MPI ranks (oversubscribed, local files) with MPI's own
  ``Write_at_all`` and with our two-phase write under every kernel
  (:mod:`repro.pario.mpi_worker`), the authors' ``MPI_Alltoallw`` baseline
  included (``alltoallw``: the exchange as one ``Alltoallw`` call); files must be
  byte-identical.  Times are indicative only.  One launch per rank count runs every seed.
* :func:`simgrid_runs` simulates the exchange of every kernel with SimGrid on a
  Dragonfly (shared executor on a zoned platform; max-min flow sharing,
  per-message start-up, no MPI queue model).  Its cost grows with the number
  of flows in flight, so a point whose busiest round holds more than
  ``sim_max_flows`` messages is left out (at thousands of ranks: the
  unordered kernel).
* :func:`model_runs` costs the kernels at 1024 to 16384 ranks with the
  endpoint model of :mod:`repro.pario.kernels`, whose per-message
  queue-search cost ``o1`` is swept because the verdict depends on it.
  MPICH's ``Alltoallw`` posts every message at once, so in both models it is
  the unordered kernel.

:class:`Params` holds the chapter's parameters, :func:`run` runs it and :func:`claims` gives the ledger
its evidence (one value per seed of the irregular map).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.hpc.platforms import Platform
from repro.params import ChapterParams, require
from repro.pario.exchange_sim import DragonflyConstants, best_speedup, irregular_pattern, platform_for, simulate_kernel
from repro.pario.figures import speedup_against_queue_cost
from repro.pario.kernels import EndpointModel, KernelSpec, round_loads, round_table
from repro.pario.mpi_worker import launch_irregular
from repro.pario.twophase import exchange_plan
from repro.registry import load_registry
from repro.verdicts import confidence_interval

CHAPTER = "tpio-spreadout"

UNORDERED = KernelSpec(name="unordered")


def _kernel_ok(text: str) -> bool:
    name, _, win = text.partition(":")
    return (name in ("unordered", "pairwise", "alltoallw") and not win) or (name in ("scattered", "balanced")
                                                                             and win.isdigit() and int(win) >= 1)


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each)."""

    exact_ranks: tuple[int, ...]
    exact_file_kib: int
    exact_mean_run: int
    exact_ranks_per_aggregator: int
    exact_kernels: tuple[str, ...]
    repeats: int
    seeds: tuple[int, ...]
    bytes_per_rank: int
    mean_run: int
    windows: tuple[int, ...]
    sim_ranks: tuple[int, ...]
    sim_ranks_per_node: int
    sim_max_flows: int
    model_ranks: tuple[int, ...]
    model_ranks_per_node: int
    bandwidth_gbs: float
    global_bandwidth_gbs: float
    link_latency_ns: float
    switch_latency_ns: float
    alpha_us: float
    sim_alphas_us: tuple[float, ...]
    o0_ns: float
    o1_ns: float
    queue_costs_ns: tuple[float, ...]

    def checks(self) -> None:
        """Refuse impossible combinations before any MPI job or simulation starts."""
        require(all(_kernel_ok(k) for k in self.exact_kernels), self, "exact_kernels",
                "exact_kernels must be unordered, pairwise, alltoallw, scattered:W or balanced:W (W >= 1)")
        require(all(p % self.sim_ranks_per_node == 0 for p in self.sim_ranks), self, ("sim_ranks", "sim_ranks_per_node"),
                "every sim_ranks value must be a multiple of sim_ranks_per_node")
        require(all(p % self.model_ranks_per_node == 0 for p in self.model_ranks), self,
                ("model_ranks", "model_ranks_per_node"), "every model_ranks value must be a multiple of model_ranks_per_node")
        require(min(self.windows) < min(self.sim_ranks), self, ("windows", "sim_ranks"),
                "at least one window must be smaller than the smallest SimGrid rank count")
        require(self.exact_file_kib * 1024 >= max(self.exact_ranks) * self.exact_mean_run, self,
                ("exact_file_kib", "exact_ranks", "exact_mean_run"),
                "the real writes' file must hold at least one mean run per rank")

    def exact_config(self) -> ExactConfig:
        """The real-MPI runs of the chapter."""
        return ExactConfig(ranks=self.exact_ranks, file_bytes=self.exact_file_kib * 1024, mean_run=self.exact_mean_run,
                           ranks_per_aggregator=self.exact_ranks_per_aggregator, kernels=self.exact_kernels,
                           repeats=self.repeats)

    def scale_config(self) -> ScaleConfig:
        """The paper-scale pattern and the models' constants (seconds and bytes/s)."""
        return ScaleConfig(
            bytes_per_rank=self.bytes_per_rank, mean_run=self.mean_run, windows=self.windows, sim_ranks=self.sim_ranks,
            sim_ranks_per_node=self.sim_ranks_per_node, sim_max_flows=self.sim_max_flows, model_ranks=self.model_ranks,
            model_ranks_per_node=self.model_ranks_per_node,
            platform=DragonflyConstants(bandwidth=self.bandwidth_gbs * 1e9, global_bandwidth=self.global_bandwidth_gbs * 1e9,
                                        link_latency=self.link_latency_ns * 1e-9,
                                        switch_latency=self.switch_latency_ns * 1e-9, alpha=self.alpha_us * 1e-6),
            model=EndpointModel(alpha=self.alpha_us * 1e-6, bandwidth=self.bandwidth_gbs * 1e9, o0=self.o0_ns * 1e-9,
                                o1=self.o1_ns * 1e-9),
            queue_costs=tuple(c * 1e-9 for c in self.queue_costs_ns))


@dataclass(frozen=True, kw_only=True)
class ExactConfig:
    """The real-MPI runs.

    Attributes
    ----------
    ranks:
        MPI rank counts.
    file_bytes:
        File size.
    mean_run:
        Mean run length of the irregular map (bytes).
    ranks_per_aggregator:
        ``A = ceil(p / ranks_per_aggregator)`` aggregators (also MPI's ``cb_nodes``).
    kernels:
        Kernels in text form (``"balanced:2"``).
    repeats:
        Timed repetitions per write (median kept).
    """

    ranks: tuple[int, ...]
    file_bytes: int
    mean_run: int
    ranks_per_aggregator: int
    kernels: tuple[str, ...]
    repeats: int

    def aggregators(self, p: int) -> int:
        """Aggregator count at ``p`` ranks."""
        return max(1, -(-p // self.ranks_per_aggregator))


@dataclass(frozen=True, kw_only=True)
class ExactRecord:
    """One kernel's two-phase write in one real-MPI run.

    Times are the slowest rank's, in seconds, on an oversubscribed shared host.
    """

    p: int
    seed: int
    kernel: str
    window: int | None
    identical_to_mpi: bool
    equals_pattern: bool
    read_back_ok: bool
    rounds: int
    messages: int
    max_posted: int
    exchange_s: float
    total_s: float
    mpi_write_s: float


def exact_runs(cfg: ExactConfig, seeds: list[int], timeout: float = 900.0) -> list[ExactRecord]:
    """Write the irregular decomposition with MPI and with every kernel, for every rank count and seed."""
    def job(p: int) -> dict:
        return {"aggregators": cfg.aggregators(p), "kernels": list(cfg.kernels), "repeats": cfg.repeats}

    out = []
    for run in launch_irregular(cfg.ranks, seeds, cfg.file_bytes, cfg.mean_run, job, timeout):
        plan = exchange_plan(run.spec.build(run.p), cfg.aggregators(run.p))
        for text, row in zip(cfg.kernels, run.report["writes"]):
            sends, recvs = round_table(text, plan.counts, plan.aggregators).outstanding()
            posted = int(max(sends.max(initial=0), recvs.max(initial=0)))
            out.append(
                ExactRecord(
                    p=run.p,
                    seed=run.seed,
                    kernel=row["kernel"],
                    window=row["window"],
                    identical_to_mpi=bool(row["identical_to_mpi"]),
                    equals_pattern=bool(row["equals_pattern"]),
                    read_back_ok=bool(row["read_back_ok"]),
                    rounds=row["rounds"],
                    messages=row["messages"],
                    max_posted=posted,
                    exchange_s=row["exchange_s"],
                    total_s=row["total_s"],
                    mpi_write_s=run.report["mpi"]["write_s"],
                )
            )
    return out


def exact_frame(records: list[ExactRecord]) -> pd.DataFrame:
    """The exact runs as a table, with MPI's write time over ours (``> 1``: ours is faster here)."""
    df = pd.DataFrame([r.__dict__ for r in records])
    df["mpi_over_ours"] = df.mpi_write_s / df.total_s
    return df


@dataclass(frozen=True, kw_only=True)
class ScaleConfig:
    """The paper-scale pattern and the models' constants.

    Attributes
    ----------
    bytes_per_rank, mean_run:
        Mean bytes each rank writes and mean run length (bytes) of the E3SM-like map.
    windows:
        Windows ``W`` of the throttled kernels.
    sim_ranks, sim_ranks_per_node:
        SimGrid rank counts and hosts per Dragonfly router (one aggregator per router).
    sim_max_flows:
        SimGrid points whose busiest round has more messages are not simulated.
    model_ranks, model_ranks_per_node:
        Endpoint-model rank counts and ranks per node (one aggregator per node).
    platform:
        SimGrid Dragonfly constants.
    model:
        Endpoint-model constants; ``model.o1`` is the stated queue-search cost.
    queue_costs:
        Values of ``o1`` (s) swept.
    """

    bytes_per_rank: int
    mean_run: int
    windows: tuple[int, ...]
    sim_ranks: tuple[int, ...]
    sim_ranks_per_node: int
    sim_max_flows: int
    model_ranks: tuple[int, ...]
    model_ranks_per_node: int
    platform: DragonflyConstants
    model: EndpointModel
    queue_costs: tuple[float, ...]

    def kernels(self, p: int) -> list[KernelSpec]:
        """Unordered, then scattered(W) and balanced(W) for every window ``W < p``.

        A window of ``p`` or more puts every message in one round: it is the
        unordered kernel again, so it is left out.
        """
        return [UNORDERED] + [KernelSpec(name=n, window=w) for n in ("scattered", "balanced") for w in self.windows if w < p]


@dataclass(frozen=True, kw_only=True)
class SimRecord:
    """One SimGrid point with the endpoint model's time (``o1 = 0``) on the same pattern."""

    p: int
    seed: int
    kernel: str
    sim_s: float
    model_s: float
    rounds: int
    messages: int
    wall_s: float


def simgrid_runs(cfg: ScaleConfig, seeds: list[int]) -> list[SimRecord]:
    """Simulate every kernel at every SimGrid rank count and seed (within the ``sim_max_flows`` budget)."""
    flat = EndpointModel(alpha=cfg.model.alpha, bandwidth=cfg.platform.bandwidth, o0=cfg.model.o0, o1=0.0)
    out = []
    points = [(p, s, k) for p in cfg.sim_ranks for s in seeds for k in cfg.kernels(p)]
    platforms: dict[int, Platform] = {}
    patterns = {}
    for p, seed, kernel in tqdm(points, desc="SimGrid runs"):
        if (p, seed) not in patterns:
            patterns[p, seed] = irregular_pattern(p, cfg.sim_ranks_per_node, cfg.bytes_per_rank, cfg.mean_run, seed)
        pat = patterns[p, seed]
        table = round_table(kernel, pat.counts, pat.aggregators)
        if table.busiest_round > cfg.sim_max_flows:
            continue
        if p not in platforms:
            platforms[p] = platform_for(p, cfg.sim_ranks_per_node, cfg.platform)
        sim = simulate_kernel(pat, kernel, platforms[p])
        model = round_loads(table, pat.counts).time(flat)
        out.append(
            SimRecord(
                p=p,
                seed=seed,
                kernel=kernel.label,
                sim_s=sim.time,
                model_s=model,
                rounds=sim.rounds,
                messages=sim.messages,
                wall_s=sim.wall_s,
            )
        )
    return out


def flow_model_ranks(sims: list[SimRecord], seeds: list[int]) -> int:
    """Largest simulated rank count at which the unordered and a balanced kernel ran for every seed."""

    def ran(p: int, prefix: str) -> bool:
        return {r.seed for r in sims if r.p == p and r.kernel.startswith(prefix)} >= set(seeds)

    both = [p for p in {r.p for r in sims} if ran(p, UNORDERED.label) and ran(p, "balanced")]
    if not both:
        raise ValueError("no SimGrid rank count has both the unordered and a balanced kernel: raise sim_max_flows")
    return max(both)


def model_runs(cfg: ScaleConfig, seeds: list[int]) -> pd.DataFrame:
    """Endpoint-model exchange time of every kernel, rank count, seed and queue cost ``o1``.

    Returns
    -------
    pandas.DataFrame
        Columns ``p, seed, kernel, o1, time_s``.
    """
    rows = []
    costs = sorted(set(cfg.queue_costs) | {cfg.model.o1})
    for p in tqdm(cfg.model_ranks, desc="endpoint model (rank counts)"):
        for seed in seeds:
            pat = irregular_pattern(p, cfg.model_ranks_per_node, cfg.bytes_per_rank, cfg.mean_run, seed)
            for kernel in cfg.kernels(p):
                loads = round_loads(round_table(kernel, pat.counts, pat.aggregators), pat.counts)
                for o1 in costs:
                    m = EndpointModel(alpha=cfg.model.alpha, bandwidth=cfg.model.bandwidth, o0=cfg.model.o0, o1=o1)
                    rows.append({"p": p, "seed": seed, "kernel": kernel.label, "o1": o1, "time_s": loads.time(m)})
    return pd.DataFrame(rows)


def best_spreadout_speedup(times: pd.DataFrame) -> pd.DataFrame:
    """Unordered time over the best balanced(W) time, per ``p``, seed (and ``o1`` or ``alpha`` if present).

    ``times`` has columns ``p, seed, kernel`` and ``time_s``; the result has
    the grouping columns, ``best`` (the winning window's label) and ``speedup``.
    """
    return best_speedup(
        times,
        keys=("p", "seed", "o1", "alpha"),
        label="kernel",
        baseline=UNORDERED.label,
        is_candidate=lambda kernels: kernels.str.startswith("balanced"),
        column="time_s",
    )


def alpha_sweep(cfg: ScaleConfig, sims: list[SimRecord], seeds: list[int], alphas: list[float]) -> pd.DataFrame:
    """SimGrid's unordered and best balanced(W) kernels at the flow-model rank count, for every start-up ``alpha``.

    The window of each seed is the one that won at the stated ``alpha``; the
    stated point is taken from ``sims``, every other ``alpha`` is simulated.

    Returns
    -------
    pandas.DataFrame
        Columns ``p, seed, kernel, alpha, time_s``.
    """
    p = flow_model_ranks(sims, seeds)
    stated = pd.DataFrame([{"p": r.p, "seed": r.seed, "kernel": r.kernel, "time_s": r.sim_s} for r in sims if r.p == p])
    best = best_spreadout_speedup(stated).set_index("seed").best
    rows = [
        dict(row, alpha=cfg.platform.alpha)
        for row in stated.to_dict("records")
        if row["kernel"] in (UNORDERED.label, best[row["seed"]])
    ]
    others = sorted(set(alphas) - {cfg.platform.alpha})
    points = [(a, s, k) for a in others for s in seeds for k in (UNORDERED.label, best[s])]
    specs = {k.label: k for k in cfg.kernels(p)}
    platforms = {a: platform_for(p, cfg.sim_ranks_per_node, replace(cfg.platform, alpha=a)) for a in others}
    patterns = {s: irregular_pattern(p, cfg.sim_ranks_per_node, cfg.bytes_per_rank, cfg.mean_run, s) for s in seeds}
    for alpha, seed, kernel in tqdm(points, desc=f"SimGrid start-up sweep at P = {p}"):
        sim = simulate_kernel(patterns[seed], specs[kernel], platforms[alpha])
        rows.append({"p": p, "seed": seed, "kernel": kernel, "time_s": sim.time, "alpha": alpha})
    return pd.DataFrame(rows)


def alphas_holding(sweep: pd.DataFrame, null: float) -> list[float]:
    """Swept ``alpha`` values at which the SimGrid speedup's 95% interval over seeds lies above ``null``.

    With one seed the value itself is compared (the book's convention, :mod:`repro.verdicts`).
    """
    out = []
    for alpha, grp in best_spreadout_speedup(sweep).groupby("alpha"):
        vals = grp.speedup.tolist()
        low = confidence_interval(vals)[0] if len(vals) >= 2 else vals[0]
        if low > null:
            out.append(float(alpha))
    return out


def alpha_figure(results: Results) -> plt.Figure:
    """SimGrid's unordered over best balanced(W) time against the per-message start-up ``alpha``."""
    sweep, stated = results.alpha, results.params.alpha_us * 1e-6
    null = load_registry().get(CHAPTER).claim("flow_model_speedup").null_value
    stats = best_spreadout_speedup(sweep).groupby("alpha").speedup.agg(["mean", "std"]).reset_index()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.errorbar(
        stats.alpha * 1e6, stats["mean"], yerr=stats["std"].fillna(0), marker="o", label=f"SimGrid, P = {int(sweep.p.iloc[0])}"
    )
    ax.axhline(null, color="k", lw=1, label="null (5% gain)")
    ax.axvline(stated * 1e6, color="tab:gray", ls=":", label="stated alpha")
    ax.set(xscale="symlog", xlabel="per-message start-up alpha, us (symlog)", ylabel="unordered time / best balanced(W) time")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def flip_cost(sweep: pd.DataFrame, p: int) -> float | None:
    """Smallest swept ``o1`` at which the mean spread-out speedup at ``p`` exceeds 1 (``None``: never)."""
    sp = best_spreadout_speedup(sweep[sweep.p == p]).groupby("o1").speedup.mean()
    above = sp[sp > 1.0]
    return float(above.index.min()) if len(above) else None


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    params:
        The parameters of the run.
    exact:
        Every kernel's write on real MPI.
    sims:
        The SimGrid points (within the ``sim_max_flows`` budget).
    sweep:
        :func:`model_runs`: the endpoint model for every kernel, rank count, seed and ``o1``.
    alpha:
        :func:`alpha_sweep`: SimGrid's start-up sweep at the flow-model rank count.
    """

    params: Params
    exact: list[ExactRecord]
    sims: list[SimRecord]
    sweep: pd.DataFrame
    alpha: pd.DataFrame


def run(params: Params) -> Results:
    """The real MPI writes, the SimGrid runs, the endpoint model and SimGrid's start-up sweep."""
    seeds = list(params.seeds)
    scale = params.scale_config()
    exact = exact_runs(params.exact_config(), seeds)
    sims = simgrid_runs(scale, seeds)
    sweep = model_runs(scale, seeds)
    alpha = alpha_sweep(scale, sims, seeds, [a * 1e-6 for a in params.sim_alphas_us])
    return Results(params=params, exact=exact, sims=sims, sweep=sweep, alpha=alpha)


def claims(results: Results) -> dict[str, list[float]]:
    """Per-seed values of every claim of the chapter (see its registry file)."""
    cfg, seeds, sweep, sims, exact = (results.params.scale_config(), list(results.params.seeds), results.sweep,
                                      results.sims, results.exact)
    p_model, p_sim = max(cfg.model_ranks), flow_model_ranks(sims, seeds)
    at_cost = best_spreadout_speedup(sweep[(sweep.p == p_model) & (sweep.o1 == cfg.model.o1)])
    sim_df = pd.DataFrame([{"p": r.p, "seed": r.seed, "kernel": r.kernel, "time_s": r.sim_s} for r in sims])
    sim_speed = best_spreadout_speedup(sim_df[sim_df.p == p_sim])
    windowed = [r for r in exact if r.window is not None]
    return {
        "spreadout_speedup": [float(at_cost[at_cost.seed == s].speedup.iloc[0]) for s in seeds],
        "flow_model_speedup": [float(sim_speed[sim_speed.seed == s].speedup.iloc[0]) for s in seeds],
        "files_identical": [
            float(sum(not (r.identical_to_mpi and r.equals_pattern and r.read_back_ok) for r in exact if r.seed == s))
            for s in seeds
        ],
        "window_bound": [float(max((r.max_posted - (r.window or 0) for r in windowed if r.seed == s), default=0))
                         for s in seeds],
    }


KERNEL_STYLE = {"unordered": dict(color="k", marker="o")}


def _style(label: str) -> dict:
    if label in KERNEL_STYLE:
        return KERNEL_STYLE[label]
    return dict(marker="s" if label.startswith("balanced") else "^", ls="-" if label.startswith("balanced") else ":")


def scaling_figure(results: Results) -> plt.Figure:
    """Exchange time against ranks per kernel: endpoint model at the stated ``o1`` (left), SimGrid vs model at ``o1 = 0``."""
    sweep, sims, o1 = results.sweep, results.sims, results.params.o1_ns * 1e-9
    fig, (ax_m, ax_s) = plt.subplots(1, 2, figsize=(11, 4))
    mean = sweep[sweep.o1 == o1].groupby(["kernel", "p"]).time_s.mean().reset_index()
    for kernel, grp in mean.groupby("kernel", sort=False):
        ax_m.plot(grp.p, grp.time_s * 1e3, label=kernel, **_style(kernel))
    ax_m.set(
        xscale="log",
        yscale="log",
        xlabel="ranks P",
        ylabel="exchange time, ms (model)",
        title=f"endpoint model, queue cost o1 = {o1 * 1e9:g} ns",
    )
    ax_m.legend(fontsize=7)
    sim = pd.DataFrame([r.__dict__ for r in sims]).groupby(["kernel", "p"])[["sim_s", "model_s"]].mean().reset_index()
    for kernel, grp in sim.groupby("kernel", sort=False):
        st = _style(kernel)
        (line,) = ax_s.plot(grp.p, grp.sim_s * 1e3, label=f"{kernel} (SimGrid)", **st)
        ax_s.plot(grp.p, grp.model_s * 1e3, color=line.get_color(), marker=st["marker"], ls="none", mfc="none", ms=10)
    ax_s.set(
        xscale="log",
        yscale="log",
        xlabel="ranks P",
        ylabel="exchange time, ms",
        title="SimGrid Dragonfly (lines) and model with o1 = 0 (hollow)",
    )
    ax_s.legend(fontsize=6)
    fig.tight_layout()
    return fig


def queue_sweep_figure(results: Results) -> plt.Figure:
    """Spread-out speedup over unordered against the queue-search cost ``o1``, one line per ``P``."""
    paper_value = load_registry().get(CHAPTER).claim("spreadout_speedup").paper_value
    sp = best_spreadout_speedup(results.sweep)
    stats = sp.groupby(["p", "o1"]).speedup.agg(["mean", "std"]).reset_index()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    speedup_against_queue_cost(ax, stats, "p", lambda p: f"P = {p}")
    if paper_value is not None:
        ax.axhline(paper_value, color="tab:red", ls="--", label="paper (end-to-end, up to)")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="queue-search cost o1 per message and posted receive, ns",
        ylabel="unordered time / best balanced(W) time",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def exact_figure(results: Results) -> plt.Figure:
    """Real-MPI runs: exchange time per kernel and MPI's write time over ours (indicative, oversubscribed)."""
    df = exact_frame(results.exact)
    fig, (ax_e, ax_r) = plt.subplots(1, 2, figsize=(11, 3.6))
    stats = df.groupby(["p", "kernel"], sort=False)[["exchange_s", "mpi_over_ours"]].mean().reset_index()
    kernels = list(dict.fromkeys(stats.kernel))
    ps = sorted(stats.p.unique())
    width = 0.8 / len(kernels)
    for i, k in enumerate(kernels):
        sub = stats[stats.kernel == k].set_index("p")
        x = np.arange(len(ps)) + i * width
        ax_e.bar(x, [sub.exchange_s.get(p, np.nan) * 1e3 for p in ps], width, label=k)
        ax_r.bar(x, [sub.mpi_over_ours.get(p, np.nan) for p in ps], width, label=k)
    for ax in (ax_e, ax_r):
        ax.set_xticks(np.arange(len(ps)) + 0.4 - width / 2)
        ax.set_xticklabels([f"{p} ranks" for p in ps])
    ax_e.set_ylabel("exchange phase, ms (slowest rank)")
    ax_r.axhline(1.0, color="k", lw=0.8)
    ax_r.set_ylabel("MPI Write_at_all time / our two-phase time")
    ax_e.legend(fontsize=7)
    fig.suptitle("real MPI on 2 shared cores (oversubscribed): indicative only", fontsize=9)
    fig.tight_layout()
    return fig
