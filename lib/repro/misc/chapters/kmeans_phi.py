"""Chapter ``kmeans-phi``: memory layout, padding and parallel reduction for K-means (Lee et al., 2016).

:func:`run` takes the chapter's :class:`Params` and returns its :class:`Results`;
:func:`claims` reads the claims from them.

For every seed (the blobs and the initial centroids) and every dataset shape
``(N, D, K)``, :func:`sweep` times one Lloyd step of each kernel variant of
:mod:`repro.misc.kmeans` and of scikit-learn, and checks that every variant
gives the same assignments and centroids, equal to scikit-learn's after one
step.  :func:`mpi_checks` runs the Allreduce step on 1 and 2 MPI ranks.  The
Xeon Phi numbers are extrapolated with the instruction-count model of
:func:`repro.misc.kmeans.modelled_improvement` (a 16-lane VPU); the model's
constants are swept by :func:`model_sweep`.  The scale-out claim runs the
real ``mpi4py`` step on 1 and 2 ranks (:func:`host_speedup`) and extrapolates
the optimised kernel's gain to a cluster of Xeon Phi nodes with a
strong-scaling model (:func:`scale_out_gain`), whose Allreduce latency is
swept by :func:`scale_out_sweep`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numba
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from tqdm import tqdm

from repro.misc import kmeans as km
from repro.params import ChapterParams, require
from repro.results import Evidence

OPTIMISED = km.Variant(layout="aosoa", padded=True, reduction="parallel")
PADDED_AOS = km.Variant(layout="aos", padded=True, reduction="serial")
BLOCKED_SERIAL = km.Variant(layout="aosoa", padded=True, reduction="serial")


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """The datasets and timing settings of a sweep.

    Attributes
    ----------
    n
        Points per dataset.
    ks
        Cluster counts.
    dims_aligned, dims_unaligned
        Dimensions that are / are not a multiple of the host vector width.
    repeats
        Timed repetitions per step (the best is kept).
    lanes
        Host vector width ``W`` (float64 lanes) used for padding and blocking.
    threads
        numba threads while timing (on a shared machine one thread gives stable
        timings: a parallel region waits for its slowest thread).
    """

    n: int
    ks: tuple[int, ...]
    dims_aligned: tuple[int, ...]
    dims_unaligned: tuple[int, ...]
    repeats: int
    lanes: int
    threads: int

    def shapes(self) -> list[tuple[int, int, bool]]:
        """``(d, k, aligned)`` for every dataset of the sweep."""
        return [(d, k, aligned) for k in self.ks
                for dims, aligned in ((self.dims_aligned, True), (self.dims_unaligned, False)) for d in dims]


@dataclass(frozen=True, kw_only=True)
class TimingRecord:
    """The best wall time of one Lloyd step of one implementation on one dataset."""

    seed: int
    d: int
    k: int
    aligned: bool
    implementation: str
    seconds: float


@dataclass(frozen=True, kw_only=True)
class CheckRecord:
    """Agreement of the variants with each other and with scikit-learn on one dataset.

    Attributes
    ----------
    label_mismatches
        Points whose label differs from the baseline's, summed over variants.
    variant_centroid_diff
        Largest absolute centroid difference from the baseline over variants.
    sklearn_centroid_diff
        Largest absolute difference from scikit-learn's centroids after one step.
    sklearn_label_mismatches
        Points whose label (against the new centroids) differs from scikit-learn's ``labels_``.
    """

    seed: int
    d: int
    k: int
    label_mismatches: int
    variant_centroid_diff: float
    sklearn_centroid_diff: float
    sklearn_label_mismatches: int


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """All timings and checks of a sweep."""

    timings: tuple[TimingRecord, ...]
    checks: tuple[CheckRecord, ...]

    def frame(self) -> pd.DataFrame:
        """The timings as a table."""
        return pd.DataFrame([t.__dict__ for t in self.timings])


def _one_dataset(cfg: SweepConfig, seed: int, d: int, k: int, aligned: bool
                 ) -> tuple[list[TimingRecord], CheckRecord]:
    data = km.make_dataset(cfg.n, d, k, seed)
    timings, steps = [], {}
    for variant in km.standard_variants():
        packed = km.pack(data.points, variant, cfg.lanes)
        steps[variant] = km.lloyd_step(data.points, packed, data.init)
        sec = km.time_step(data.points, packed, data.init, cfg.repeats)
        timings.append(TimingRecord(seed=seed, d=d, k=k, aligned=aligned, implementation=variant.label, seconds=sec))
    timings.append(
        TimingRecord(
            seed=seed, d=d, k=k, aligned=aligned, implementation="sklearn", seconds=km.time_sklearn_step(data, cfg.repeats)
        )
    )
    base = steps[km.BASELINE]
    mism = sum(int(np.count_nonzero(s.labels != base.labels)) for s in steps.values())
    vdiff = max(float(np.abs(s.centroids - base.centroids).max()) for s in steps.values())
    ref = km.sklearn_step(data)
    relabel = km.assign(km.pack(data.points, km.BASELINE, cfg.lanes), base.centroids)
    check = CheckRecord(
        seed=seed,
        d=d,
        k=k,
        label_mismatches=mism,
        variant_centroid_diff=vdiff,
        sklearn_centroid_diff=float(np.abs(ref.centroids - base.centroids).max()),
        sklearn_label_mismatches=int(np.count_nonzero(relabel != ref.labels)),
    )
    return timings, check


def sweep(cfg: SweepConfig, seeds: list[int]) -> SweepResult:
    """Time and check every variant on every dataset of ``cfg`` for every seed.

    One process runs them all: timings must not compete for the cores.
    """
    timings, checks = [], []
    jobs = [(seed, *shape) for seed in seeds for shape in cfg.shapes()]
    previous = numba.get_num_threads()
    numba.set_num_threads(cfg.threads)
    try:
        for seed, d, k, aligned in tqdm(jobs, desc="datasets"):
            t, c = _one_dataset(cfg, seed, d, k, aligned)
            timings += t
            checks.append(c)
    finally:
        numba.set_num_threads(previous)
    return SweepResult(timings=tuple(timings), checks=tuple(checks))


def improvements(result: SweepResult) -> pd.DataFrame:
    """Percent time saved over the baseline, per seed, dataset and implementation."""
    df = result.frame()
    base = df[df.implementation == km.BASELINE.label].set_index(["seed", "d", "k"]).seconds
    df = df[df.implementation != km.BASELINE.label].copy()
    df["improvement"] = 100.0 * (1.0 - df.seconds.values / base.loc[list(zip(df.seed, df.d, df.k))].values)
    return df


def _per_seed_mean(df: pd.DataFrame, seeds: list[int]) -> list[float]:
    return [float(df[df.seed == s].improvement.mean()) for s in seeds]


@dataclass(frozen=True, kw_only=True)
class ModelConstants:
    """Constants of the Xeon Phi extrapolation.

    Attributes
    ----------
    target_lanes
        Vector lanes of the target (16 float32 lanes of KNL's 512-bit VPU).
    reduce_cost
        Cost of a horizontal sum on the target, in vector instructions (log2 16 = 4).
    """

    target_lanes: int
    reduce_cost: float


def modelled(result: SweepResult, cfg: SweepConfig, model: ModelConstants, variant: km.Variant = OPTIMISED) -> pd.DataFrame:
    """Modelled percent improvement of ``variant`` on the target, per seed and dataset."""
    df = result.frame().set_index(["seed", "d", "k", "implementation"]).seconds
    rows = []
    for (seed, d, k, impl), sec in df.items():
        if impl != variant.label:
            continue
        base = df.loc[(seed, d, k, km.BASELINE.label)]
        rows.append(
            {
                "seed": seed,
                "d": d,
                "k": k,
                "aligned": d % cfg.lanes == 0,
                "improvement": km.modelled_improvement(sec, base, variant, d, cfg.lanes, model.target_lanes, model.reduce_cost),
            }
        )
    return pd.DataFrame(rows)


def model_sweep(result: SweepResult, cfg: SweepConfig, lanes: list[int], reduce_costs: list[float]) -> pd.DataFrame:
    """Mean modelled improvement (aligned and unaligned) over a grid of model constants."""
    rows = []
    for w in lanes:
        for h in reduce_costs:
            m = modelled(result, cfg, ModelConstants(target_lanes=w, reduce_cost=h))
            for aligned, grp in m.groupby("aligned"):
                rows.append(
                    {"target_lanes": w, "reduce_cost": h, "aligned": bool(aligned), "improvement": float(grp.improvement.mean())}
                )
    return pd.DataFrame(rows)


@dataclass(frozen=True, kw_only=True)
class MPIRecord:
    """One distributed run compared with the single-process step."""

    seed: int
    ranks: int
    centroid_diff: float
    step_seconds: float
    allreduce_seconds: float


def mpi_checks(run: km.MPIRun, seeds: list[int], ranks: list[int]) -> list[MPIRecord]:
    """Run ``run.steps`` distributed Lloyd steps for each rank count and compare with the single-process steps.

    Parameters
    ----------
    run
        The launch's dataset and settings (its ``ranks`` and ``seed`` are replaced for each launch).
    seeds
        Seeds of the datasets.
    ranks
        Rank counts.
    """
    out = []
    lanes = run.lanes or km.host_lanes()
    for seed in seeds:
        data = km.make_dataset(run.n, run.d, run.k, seed)
        packed = km.pack(data.points, km.BASELINE, lanes)
        centroids = data.init
        for _ in range(run.steps):
            centroids = km.lloyd_step(data.points, packed, centroids).centroids
        for p in ranks:
            rep = km.run_lloyd_mpi(dataclasses.replace(run, ranks=p, seed=seed, variant=km.BASELINE, lanes=lanes))
            diff = float(np.abs(np.asarray(rep.centroids) - centroids).max())
            out.append(MPIRecord(seed=seed, ranks=p, centroid_diff=diff, step_seconds=rep.step_seconds,
                                 allreduce_seconds=rep.allreduce_seconds))
    return out


@dataclass(frozen=True, kw_only=True)
class ScaleOutModel:
    """Constants of the extrapolation to a cluster of Xeon Phi nodes (assumed, none measured here).

    Attributes
    ----------
    n
        Points of the distributed problem.
    node_cores
        Cores per node: a node's time per point is the host's single-thread time
        over ``node_cores`` (perfect scaling inside a node, assumed).
    latency
        Allreduce latency ``alpha`` per message round, seconds.
    bandwidth
        Link bandwidth ``beta``, bytes per second.
    ranks
        Nodes (one rank each) at which the headline claim is judged.
    """

    n: int
    node_cores: int
    latency: float
    bandwidth: float
    ranks: int


def scale_out_gain(result: SweepResult, cfg: SweepConfig, model: ModelConstants, scale: ScaleOutModel, seed: int) -> float:
    """Modelled percent time saved by the optimised kernel over the baseline per distributed step at scale.

    On the highest-dimensional aligned dataset (largest ``K``), the target's
    single-node time ratio comes from :func:`repro.misc.kmeans.modelled_improvement`;
    the baseline's time per point is the host's measured single-thread time over
    ``node_cores``; both kernels then pay the same modelled Allreduce
    (:func:`repro.misc.kmeans.strong_scaling_seconds`), which dilutes the gain as
    ranks grow.
    """
    d, k = max(cfg.dims_aligned), max(cfg.ks)
    times = result.frame().set_index(["seed", "d", "k", "implementation"]).seconds
    base = float(times.loc[(seed, d, k, km.BASELINE.label)])
    opt = float(times.loc[(seed, d, k, OPTIMISED.label)])
    ratio = 1.0 - km.modelled_improvement(opt, base, OPTIMISED, d, cfg.lanes, model.target_lanes, model.reduce_cost) / 100.0
    per_point = base / cfg.n / scale.node_cores
    t_base, t_opt = (
        km.strong_scaling_seconds(per_point * r, scale.n, scale.ranks, k, d, scale.latency, scale.bandwidth) for r in (1.0, ratio)
    )
    return 100.0 * (1.0 - t_opt / t_base)


def scale_out_sweep(
    result: SweepResult,
    cfg: SweepConfig,
    model: ModelConstants,
    scale: ScaleOutModel,
    ranks: list[int],
    latencies: list[float],
    seeds: list[int],
) -> pd.DataFrame:
    """:func:`scale_out_gain` per seed over a grid of rank counts and Allreduce latencies."""
    rows = [
        {
            "seed": s,
            "ranks": p,
            "latency": a,
            "gain": scale_out_gain(
                result,
                cfg,
                model,
                ScaleOutModel(n=scale.n, node_cores=scale.node_cores, latency=a, bandwidth=scale.bandwidth, ranks=p),
                s,
            ),
        }
        for s in seeds
        for p in ranks
        for a in latencies
    ]
    return pd.DataFrame(rows)


SUPERLINEAR_SLACK = 0.1
"""How far above the ideal speed-up a measurement may lie before it is refused: best-of-``repeats`` wall
times on a shared machine jitter by a few percent, while a speed-up well above the ranks' ratio means
the two runs did unequal work (or the one-rank run was disturbed)."""


class SuperlinearSpeedup(ValueError):
    """A measured strong-scaling speed-up above the ranks' ratio: a measurement or baseline defect."""


def host_speedup(mpi: list[MPIRecord], seed: int) -> float:
    """Measured strong-scaling speed-up of the real MPI step: time on the fewest ranks over time on the most.

    Raises
    ------
    SuperlinearSpeedup
        When the speed-up exceeds the ratio of the rank counts by more than :data:`SUPERLINEAR_SLACK`
        (3.68x on 2 ranks, say): equal work on more ranks cannot run faster than ideal, so the value is
        refused instead of recorded.
    """
    runs = sorted((r for r in mpi if r.seed == seed), key=lambda r: r.ranks)
    speedup = runs[0].step_seconds / runs[-1].step_seconds
    ideal = runs[-1].ranks / runs[0].ranks
    if speedup > ideal * (1.0 + SUPERLINEAR_SLACK):
        raise SuperlinearSpeedup(
            f"seed {seed}: the MPI step ran {speedup:.2f}x faster on {runs[-1].ranks} ranks than on {runs[0].ranks}, "
            f"above the ideal {ideal:g}x; equal work cannot scale better than ideal, so the timings are suspect "
            f"({runs[0].step_seconds:.4g} s against {runs[-1].step_seconds:.4g} s); rerun on an idle machine")
    return speedup


def per_seed_max(df: pd.DataFrame, seeds: list[int]) -> list[float]:
    """Each seed's largest ``improvement`` in ``df`` (the paper's "up to" numbers are maxima)."""
    return [float(df[df.seed == s].improvement.max()) for s in seeds]


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``chapters/kmeans-phi.yaml``)."""

    n: int
    ks: tuple[int, ...]
    dims_aligned: tuple[int, ...]
    dims_unaligned: tuple[int, ...]
    threads: int
    repeats: int
    seeds: tuple[int, ...]
    mpi_ranks: tuple[int, ...]
    mpi_n: int
    mpi_d: int
    mpi_k: int
    mpi_steps: int
    target_lanes: int
    reduce_cost: float
    sweep_lanes: tuple[int, ...]
    sweep_reduce_costs: tuple[float, ...]
    scale_n: int
    node_cores: int
    scale_latency: float
    scale_bandwidth: float
    scale_ranks: int
    sweep_scale_ranks: tuple[int, ...]
    sweep_latencies: tuple[float, ...]

    def checks(self) -> None:
        """Refuse impossible datasets, rank counts and a mislabelled dimension before any kernel starts."""
        lanes = km.host_lanes()
        require(self.mpi_k <= self.mpi_n, self, ("mpi_k", "mpi_n"),
                "the MPI dataset needs at least as many points as clusters (the initial centroids are points)")
        require(max(self.ks) <= self.n, self, ("ks", "n"), "every cluster count must be at most the number of points")
        require(len(set(self.mpi_ranks)) >= 2, self, "mpi_ranks", "the speed-up claim needs at least two MPI rank counts")
        require(max(self.mpi_ranks) <= self.mpi_n, self, ("mpi_ranks", "mpi_n"), "every rank needs at least one point")
        require(all(d % lanes == 0 for d in self.dims_aligned), self, "dims_aligned",
                f"aligned dimensions must be multiples of this host's vector width ({lanes} float64 lanes)")
        require(all(d % lanes != 0 for d in self.dims_unaligned), self, "dims_unaligned",
                f"unaligned dimensions must not be multiples of this host's vector width ({lanes} float64 lanes)")
        require(self.target_lanes in self.sweep_lanes and self.reduce_cost in self.sweep_reduce_costs, self,
                ("target_lanes", "sweep_lanes", "reduce_cost", "sweep_reduce_costs"),
                "the model sweep must include the judged constants")
        require(self.scale_ranks in self.sweep_scale_ranks and self.scale_latency in self.sweep_latencies, self,
                ("scale_ranks", "sweep_scale_ranks", "scale_latency", "sweep_latencies"),
                "the scale-out sweep must include the judged configuration")

    def sweep_config(self) -> SweepConfig:
        """The datasets and timing settings, with this host's vector width."""
        return SweepConfig(n=self.n, ks=self.ks, dims_aligned=self.dims_aligned, dims_unaligned=self.dims_unaligned,
                           repeats=self.repeats, lanes=km.host_lanes(), threads=self.threads)

    def model(self) -> ModelConstants:
        """The judged constants of the Xeon Phi extrapolation."""
        return ModelConstants(target_lanes=self.target_lanes, reduce_cost=self.reduce_cost)

    def scale(self) -> ScaleOutModel:
        """The judged configuration of the scale-out model."""
        return ScaleOutModel(n=self.scale_n, node_cores=self.node_cores, latency=self.scale_latency,
                             bandwidth=self.scale_bandwidth, ranks=self.scale_ranks)

    def mpi_run(self) -> km.MPIRun:
        """The MPI launches' dataset and settings (the rank count and seed are set per launch)."""
        return km.MPIRun(ranks=1, n=self.mpi_n, d=self.mpi_d, k=self.mpi_k, seed=0, steps=self.mpi_steps,
                         repeats=self.repeats)


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    sweep
        Every kernel's timings and checks.
    config
        The sweep's datasets and host vector width.
    mpi
        The MPI launches against the single-process steps.
    model, scale
        The judged constants of the two extrapolations.
    model_grid
        The modelled improvement over the constants of the model sweep.
    scale_grid
        The modelled gain at scale over the node counts and latencies of the scale-out sweep.
    seeds
        The seeds.
    """

    sweep: SweepResult
    config: SweepConfig
    mpi: tuple[MPIRecord, ...]
    model: ModelConstants
    scale: ScaleOutModel
    model_grid: pd.DataFrame
    scale_grid: pd.DataFrame
    seeds: tuple[int, ...]


def run(params: Params) -> Results:
    """Time and check every kernel, run the MPI step, and sweep both extrapolations' constants."""
    cfg = params.sweep_config()
    seeds = list(params.seeds)
    result = sweep(cfg, seeds)
    mpi = mpi_checks(params.mpi_run(), seeds, list(params.mpi_ranks))
    model, scale = params.model(), params.scale()
    return Results(sweep=result, config=cfg, mpi=tuple(mpi), model=model, scale=scale,
                   model_grid=model_sweep(result, cfg, list(params.sweep_lanes), list(params.sweep_reduce_costs)),
                   scale_grid=scale_out_sweep(result, cfg, model, scale, list(params.sweep_scale_ranks),
                                              list(params.sweep_latencies), seeds),
                   seeds=params.seeds)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """Per-seed values of every claim of the chapter (see its registry file).

    The paper's Xeon Phi numbers are maxima ("up to"), so the modelled single-node gains are each seed's
    largest over the aligned (or unaligned) datasets.
    """
    result, cfg, model, scale, mpi = results.sweep, results.config, results.model, results.scale, list(results.mpi)
    seeds = list(results.seeds)
    imp = improvements(result)
    mod = modelled(result, cfg, model)
    opt = imp[imp.implementation == OPTIMISED.label]
    pad = imp[(imp.implementation == PADDED_AOS.label) & ~imp.aligned]
    red = result.frame()
    blocked = red[red.implementation == BLOCKED_SERIAL.label].set_index(["seed", "d", "k"]).seconds
    par = red[red.implementation == OPTIMISED.label].set_index(["seed", "d", "k"]).seconds
    red_gain = 100.0 * (1.0 - par / blocked.loc[par.index])
    checks = result.checks
    return {
        "aligned_gain_knl": per_seed_max(mod[mod.aligned], seeds),
        "unaligned_gain_knl": per_seed_max(mod[~mod.aligned], seeds),
        "optimised_gain_host": _per_seed_mean(opt, seeds),
        "padding_gain_host": _per_seed_mean(pad, seeds),
        "parallel_reduction_gain_host": [float(red_gain.xs(s, level="seed").mean()) for s in seeds],
        "variants_agree": [
            float(max(c.variant_centroid_diff for c in checks if c.seed == s)
                  + max(c.label_mismatches for c in checks if c.seed == s))
            for s in seeds
        ],
        "sklearn_agree": [
            float(max(c.sklearn_centroid_diff for c in checks if c.seed == s)
                  + max(c.sklearn_label_mismatches for c in checks if c.seed == s))
            for s in seeds
        ],
        "mpi_agree": [float(max(r.centroid_diff for r in mpi if r.seed == s)) for s in seeds],
        "mpi_speedup_host": [host_speedup(mpi, s) for s in seeds],
        "aligned_gain_at_scale": [scale_out_gain(result, cfg, model, scale, s) for s in seeds],
    }


def scale_reading(results: Results, paper_gain: float, band_low: float) -> str:
    """Where the modelled gain at scale falls below ``band_low`` times the paper's number, in words.

    Parameters
    ----------
    results
        The chapter's results.
    paper_gain
        The paper's large-scale number (the registry's).
    band_low
        The lower end of the book's reproduction band.
    """
    grid = results.scale_grid
    by_point = grid.groupby(["latency", "ranks"]).gain.mean()
    fewest = int(grid.ranks.min())
    no_comm = float(grid[grid.ranks == fewest].gain.mean())
    floor = band_low * paper_gain
    if no_comm < floor:
        return (f"on {fewest} node(s) the model already gives {no_comm:.1f}%, below the band's floor of {floor:.1f}%, "
                "so no latency brings this claim into the band: the Allreduce only pulls the gain towards 0 as nodes "
                "are added")
    parts = []
    for a in sorted(set(grid.latency)):
        below = [p for (a2, p), g in by_point.items() if a2 == a and g < floor]
        parts.append(f"alpha = {a:g} s: from {min(below)} nodes" if below else
                     f"alpha = {a:g} s: not within {int(grid.ranks.max())} nodes")
    return f"the modelled gain falls below the band's floor of {floor:.1f}% (" + "; ".join(parts) + ")"


def speedup_figure(result: SweepResult) -> Figure:
    """Bar chart: speed-up over the AoS baseline (its time over the variant's) per dataset, aligned | unaligned."""
    imp = improvements(result)
    imp["speedup"] = 100.0 / (100.0 - imp.improvement)
    table = imp.groupby(["aligned", "d", "k", "implementation"]).speedup.agg(["mean", "std"]).reset_index()
    impls = [v.label for v in km.standard_variants() if v != km.BASELINE] + ["sklearn"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, aligned in zip(axes, (True, False)):
        sub = table[table.aligned == aligned]
        shapes = sorted({(d, k) for d, k in zip(sub.d, sub.k)}, key=lambda t: (t[1], t[0]))
        x = np.arange(len(shapes))
        width = 0.8 / len(impls)
        for i, impl in enumerate(impls):
            rows = sub[sub.implementation == impl].set_index(["d", "k"])
            vals = [rows.loc[s, "mean"] if s in rows.index else np.nan for s in shapes]
            ax.bar(x + i * width, vals, width, label=impl)
        ax.set_xticks(x + 0.4 - width / 2)
        ax.set_xticklabels([f"D={d}\nK={k}" for d, k in shapes])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_title("aligned D" if aligned else "unaligned D")
    axes[0].set_ylabel("speed-up over AoS auto-vectorised (x)")
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def model_figure(grid: pd.DataFrame, paper_aligned: float, paper_unaligned: float) -> Figure:
    """Modelled improvement on the target against its vector width, one line per horizontal-sum cost."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
    for ax, aligned, paper in zip(axes, (True, False), (paper_aligned, paper_unaligned)):
        sub = grid[grid.aligned == aligned]
        for h, grp in sub.groupby("reduce_cost"):
            ax.plot(grp.target_lanes, grp.improvement, marker="o", label=f"horizontal sum = {h:g} ops")
        ax.axhline(paper, color="tab:red", ls="--", label="paper (Xeon Phi)")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("target vector lanes W")
        ax.set_title("aligned D" if aligned else "unaligned D")
    axes[0].set_ylabel("modelled time saved, %")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def scaling_figure(mpi: list[MPIRecord], grid: pd.DataFrame, paper_gain: float) -> Figure:
    """Left: measured speed-up of the MPI step against ranks on this host.  Right: modelled gain at scale.

    The right panel shows the optimised kernel's modelled time saved over the
    baseline against the number of nodes, one line per Allreduce latency
    (mean over seeds), with the paper's large-scale number dashed.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    runs = pd.DataFrame([r.__dict__ for r in mpi])
    one = runs[runs.ranks == runs.ranks.min()].set_index("seed").step_seconds
    runs["speedup"] = one.loc[runs.seed].to_numpy() / runs.step_seconds.to_numpy()
    stats = runs.groupby("ranks").speedup.agg(["mean", "std"]).reset_index()
    left.errorbar(
        stats.ranks, stats["mean"], yerr=stats["std"].fillna(0.0), marker="o", capsize=3, label="measured (mpi4py, this host)"
    )
    left.plot(stats.ranks, stats.ranks / stats.ranks.min(), "k:", label="ideal")
    left.set_xlabel("MPI ranks")
    left.set_ylabel("speed-up of one Lloyd step")
    left.set_xticks(stats.ranks)
    left.legend(fontsize=7)
    mean = grid.groupby(["latency", "ranks"]).gain.mean().reset_index()
    for a, grp in mean.groupby("latency"):
        right.plot(grp.ranks, grp.gain, marker=".", label=f"alpha = {a:g} s")
    right.axhline(paper_gain, color="tab:red", ls="--", label="paper (large scale)")
    right.axhline(0, color="k", lw=0.8)
    right.set_xscale("log", base=2)
    right.set_xlabel("nodes (one rank each)")
    right.set_ylabel("modelled time saved, %")
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig
