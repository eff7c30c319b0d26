"""Chapter ``kmeans-phi``: memory layout, padding and parallel reduction for K-means (Lee et al., 2016).

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

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numba
import numpy as np
import pandas as pd
from tqdm import tqdm

from repro.misc import kmeans as km

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


def mpi_checks(n: int, d: int, k: int, seeds: list[int], ranks: list[int], steps: int, lanes: int) -> list[MPIRecord]:
    """Run ``steps`` distributed Lloyd steps for each rank count and compare with the single-process steps."""
    out = []
    for seed in seeds:
        data = km.make_dataset(n, d, k, seed)
        packed = km.pack(data.points, km.BASELINE, lanes)
        centroids = data.init
        for _ in range(steps):
            centroids = km.lloyd_step(data.points, packed, centroids).centroids
        for p in ranks:
            rep = km.run_lloyd_mpi(p, n, d, k, seed, km.BASELINE, steps=steps, lanes=lanes)
            diff = float(np.abs(np.asarray(rep.centroids) - centroids).max())
            out.append(
                MPIRecord(
                    seed=seed, ranks=p, centroid_diff=diff, step_seconds=rep.step_seconds, allreduce_seconds=rep.allreduce_seconds
                )
            )
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


def host_speedup(mpi: list[MPIRecord], seed: int) -> float:
    """Measured strong-scaling speed-up of the real MPI step: time on the fewest ranks over time on the most."""
    runs = sorted((r for r in mpi if r.seed == seed), key=lambda r: r.ranks)
    return runs[0].step_seconds / runs[-1].step_seconds


def claims(
    result: SweepResult, cfg: SweepConfig, seeds: list[int], model: ModelConstants, mpi: list[MPIRecord], scale: ScaleOutModel
) -> dict[str, list[float]]:
    """Per-seed values of every claim of the chapter (see its registry file)."""
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
        "aligned_gain_knl": [float(mod[(mod.seed == s) & mod.aligned].improvement.mean()) for s in seeds],
        "unaligned_gain_knl": [float(mod[(mod.seed == s) & ~mod.aligned].improvement.mean()) for s in seeds],
        "optimised_gain_host": _per_seed_mean(opt, seeds),
        "padding_gain_host": _per_seed_mean(pad, seeds),
        "parallel_reduction_gain_host": [float(red_gain.xs(s, level="seed").mean()) for s in seeds],
        "variants_agree": [
            float(
                max(c.variant_centroid_diff for c in checks if c.seed == s)
                + max(c.label_mismatches for c in checks if c.seed == s)
            )
            for s in seeds
        ],
        "sklearn_agree": [
            float(
                max(c.sklearn_centroid_diff for c in checks if c.seed == s)
                + max(c.sklearn_label_mismatches for c in checks if c.seed == s)
            )
            for s in seeds
        ],
        "mpi_agree": [float(max(r.centroid_diff for r in mpi if r.seed == s)) for s in seeds],
        "mpi_speedup_host": [host_speedup(mpi, s) for s in seeds],
        "aligned_gain_at_scale": [scale_out_gain(result, cfg, model, scale, s) for s in seeds],
    }


def speedup_figure(result: SweepResult) -> plt.Figure:
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


def model_figure(grid: pd.DataFrame, paper_aligned: float, paper_unaligned: float) -> plt.Figure:
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


def scaling_figure(mpi: list[MPIRecord], grid: pd.DataFrame, paper_gain: float) -> plt.Figure:
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
