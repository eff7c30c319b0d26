"""Lloyd K-means in three memory layouts, compiled with numba.

One Lloyd step assigns every point to its nearest centroid (squared Euclidean
distance, ties to the lowest centroid index) and recomputes the centroids as
the means of their points.  The assignment is the kernel whose memory layout
matters (Lee et al., IEEE BigData 2016):

* ``aos`` -- point-major ``[N][D]``: one point against one centroid at a time,
  the dimension loop left to the compiler's auto-vectoriser (``fastmath`` lets
  LLVM reorder the sum, as the Intel compiler's default floating-point model
  does).  This is the *baseline*.
* ``soa`` -- dimension-major ``[D][N]``: the vector runs across points, so no
  horizontal sum is needed.
* ``aosoa`` -- blocked ``[N/W][D][W]``: ``W`` points interleaved dimension by
  dimension, one vector of ``W`` lanes per dimension (padded by construction).

*Padding* (``padded=True``) zero-fills the vectorised axis to a multiple of the
vector width ``W``: the dimension for ``aos`` (the distance is unchanged,
exactly, since every added term is ``(0 - 0)**2``), the point axis for ``soa``.

The centroid update is a *privatised* reduction: the points are cut into a
fixed number of chunks, each chunk accumulates its own ``sums[K][D]`` and
``counts[K]`` (float64), and the private copies are merged either by one
thread (``serial``) or by all threads, each owning a slice of the ``K*D``
entries (``parallel``).  Both merges add the copies in the same order, so
every variant gives bit-identical centroids for a given chunk count.

:func:`lloyd_step_mpi` is the scale-out step (local assignment, then
``Allreduce`` of sums and counts); ``python -m repro.misc.kmeans`` is its
worker, launched with :func:`repro.hpc.launcher.run_mpi`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import llvmlite.binding as llvm
import numba
import numpy as np
from numba import njit, prange
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from repro.hpc.launcher import run_mpi

LAYOUTS = ("aos", "soa", "aosoa")
REDUCTIONS = ("serial", "parallel")
SOA_BLOCK = 256  # points per block in the SoA kernel (its distance scratch stays in L1)


def host_vector_bits() -> int:
    """Width in bits of the widest SIMD register the host CPU reports to LLVM (512, 256 or 128)."""
    feats = llvm.get_host_cpu_features()
    if feats.get("avx512f", False):
        return 512
    if feats.get("avx2", False) or feats.get("avx", False):
        return 256
    return 128


def host_lanes(itemsize: int = 8) -> int:
    """Vector lanes ``W`` for elements of ``itemsize`` bytes on this host (8 float64 lanes on AVX-512)."""
    return host_vector_bits() // (8 * itemsize)


HOST_LANES = host_lanes()  # float64 lanes; the blocked kernel is compiled for exactly this width


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One implementation of the Lloyd step.

    Attributes
    ----------
    layout
        ``aos``, ``soa`` or ``aosoa``.
    padded
        Zero-pad the vectorised axis to a multiple of the vector width
        (always true for ``aosoa``).
    reduction
        ``serial`` or ``parallel`` merge of the private centroid sums.
    """

    layout: str
    padded: bool = False
    reduction: str = "serial"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {self.reduction!r}")
        if self.layout == "aosoa" and not self.padded:
            raise ValueError("the blocked layout is padded by construction; use padded=True")

    @property
    def label(self) -> str:
        """A short name such as ``soa+pad/parallel``."""
        pad = "+pad" if self.padded and self.layout != "aosoa" else ""
        return f"{self.layout}{pad}/{self.reduction}"


BASELINE = Variant(layout="aos", padded=False, reduction="serial")


def standard_variants() -> tuple[Variant, ...]:
    """The variants every sweep times.

    Each layout and padding with the serial merge, plus the padded layouts with the parallel merge.
    """
    return (
        BASELINE,
        Variant(layout="aos", padded=True, reduction="serial"),
        Variant(layout="soa", padded=False, reduction="serial"),
        Variant(layout="soa", padded=True, reduction="serial"),
        Variant(layout="aosoa", padded=True, reduction="serial"),
        Variant(layout="aos", padded=True, reduction="parallel"),
        Variant(layout="soa", padded=True, reduction="parallel"),
        Variant(layout="aosoa", padded=True, reduction="parallel"),
    )


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """Gaussian blobs and the initial centroids of a K-means run.

    Attributes
    ----------
    points
        ``(N, D)`` float64, C-contiguous.
    init
        ``(K, D)`` float64 initial centroids (``K`` distinct points drawn at random).
    """

    points: np.ndarray
    init: np.ndarray

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(N, D, K)``."""
        return self.points.shape[0], self.points.shape[1], self.init.shape[0]


def make_dataset(n: int, d: int, k: int, seed: int, cluster_std: float = 2.0) -> Dataset:
    """Gaussian blobs from :func:`sklearn.datasets.make_blobs` and ``k`` random points as initial centroids.

    Parameters
    ----------
    n, d, k
        Points, dimensions and clusters (the blobs have ``k`` true centres in ``[-10, 10]^d``).
    seed
        Seeds both the blobs and the choice of initial centroids.
    cluster_std
        Standard deviation of each blob.

    Returns
    -------
    Dataset
    """
    x, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=cluster_std, random_state=seed)
    rng = np.random.default_rng(seed)
    init = x[rng.choice(n, size=k, replace=False)]
    return Dataset(points=np.ascontiguousarray(x, dtype=np.float64), init=np.ascontiguousarray(init, dtype=np.float64))


def padded_length(length: int, lanes: int) -> int:
    """``length`` rounded up to a multiple of ``lanes``."""
    return int(math.ceil(length / lanes) * lanes)


@dataclass(frozen=True, kw_only=True)
class PackedPoints:
    """Points stored in one variant's layout.

    Attributes
    ----------
    variant
        The variant the data is laid out for.
    data
        ``aos``: ``(N, Dp)``; ``soa``: ``(Dp, Np)``; ``aosoa``: ``(ceil(N/W), D, W)``.
    n, d
        The unpadded number of points and dimensions.
    lanes
        The vector width ``W`` used for padding and blocking.
    """

    variant: Variant
    data: np.ndarray
    n: int
    d: int
    lanes: int


def pack(points: np.ndarray, variant: Variant, lanes: int) -> PackedPoints:
    """Copy ``points`` (``(N, D)``) into ``variant``'s layout, zero-padded where it asks for padding."""
    n, d = points.shape
    if variant.layout == "aos":
        dp = padded_length(d, lanes) if variant.padded else d
        data = np.zeros((n, dp))
        data[:, :d] = points
    elif variant.layout == "soa":
        np_ = padded_length(n, lanes) if variant.padded else n
        data = np.zeros((d, np_))
        data[:, :n] = points.T
    else:
        if lanes != HOST_LANES:
            raise ValueError(f"the blocked layout is compiled for {HOST_LANES} lanes, got {lanes}")
        nb = padded_length(n, lanes) // lanes
        flat = np.zeros((nb * lanes, d))
        flat[:n] = points
        data = np.ascontiguousarray(flat.reshape(nb, lanes, d).transpose(0, 2, 1))
    return PackedPoints(variant=variant, data=data, n=n, d=d, lanes=lanes)


def pad_centroids(centroids: np.ndarray, packed: PackedPoints) -> np.ndarray:
    """Centroids zero-padded to the dimension count of ``packed``'s AoS storage (unchanged otherwise)."""
    if packed.variant.layout != "aos" or packed.data.shape[1] == packed.d:
        return np.ascontiguousarray(centroids)
    out = np.zeros((centroids.shape[0], packed.data.shape[1]))
    out[:, : packed.d] = centroids
    return out


@njit(cache=True, inline="always")
def _chunk_bounds(chunk: int, chunks: int, n: int, align: int) -> tuple[int, int]:
    per = (n + chunks - 1) // chunks
    per = ((per + align - 1) // align) * align
    lo = min(chunk * per, n)
    return lo, min(lo + per, n)


@njit(parallel=True, fastmath=True, cache=True)
def _assign_aos(x, c, labels, chunks):  # pragma: no cover - compiled
    n = labels.shape[0]
    k, d = c.shape
    for t in prange(chunks):
        lo, hi = _chunk_bounds(t, chunks, n, 1)
        for i in range(lo, hi):
            best = np.inf
            arg = 0
            for kk in range(k):
                s = 0.0
                for j in range(d):
                    diff = x[i, j] - c[kk, j]
                    s += diff * diff
                if s < best:
                    best = s
                    arg = kk
            labels[i] = arg


@njit(parallel=True, fastmath=True, cache=True)
def _assign_soa(xt, c, labels, chunks, align):  # pragma: no cover - compiled
    n = labels.shape[0]
    k, d = c.shape
    for t in prange(chunks):
        lo, hi = _chunk_bounds(t, chunks, n, align)
        dist = np.empty(SOA_BLOCK)
        best = np.empty(SOA_BLOCK)
        arg = np.empty(SOA_BLOCK, dtype=np.int64)
        for b0 in range(lo, hi, SOA_BLOCK):
            m = min(SOA_BLOCK, hi - b0)
            if align > 1:  # padded rows: run the vector loop over whole W-groups, no remainder
                m = ((m + align - 1) // align) * align
            best[:m] = np.inf
            for kk in range(k):
                dist[:m] = 0.0
                for j in range(d):
                    cj = c[kk, j]
                    for b in range(m):
                        diff = xt[j, b0 + b] - cj
                        dist[b] += diff * diff
                for b in range(m):  # branch-free select, so the compare vectorises too
                    better = dist[b] < best[b]
                    best[b] = min(dist[b], best[b])
                    arg[b] = kk if better else arg[b]
            for b in range(min(m, hi - b0)):
                labels[b0 + b] = arg[b]


@njit(parallel=True, fastmath=True, cache=True)
def _assign_aosoa(xb, c, labels, chunks):  # pragma: no cover - compiled
    n = labels.shape[0]
    nb, d, _ = xb.shape
    k = c.shape[0]
    for t in prange(chunks):
        lo, hi = _chunk_bounds(t, chunks, nb, 1)
        acc = np.empty(HOST_LANES)
        best = np.empty(HOST_LANES)
        arg = np.empty(HOST_LANES, dtype=np.int64)
        for blk in range(lo, hi):
            best[:] = np.inf
            for kk in range(k):
                acc[:] = 0.0
                for j in range(d):
                    cj = c[kk, j]
                    for lane in range(HOST_LANES):  # a compile-time trip count: one vector per dimension
                        diff = xb[blk, j, lane] - cj
                        acc[lane] += diff * diff
                for lane in range(HOST_LANES):
                    better = acc[lane] < best[lane]
                    best[lane] = min(acc[lane], best[lane])
                    arg[lane] = kk if better else arg[lane]
            for lane in range(HOST_LANES):
                i = blk * HOST_LANES + lane
                if i < n:
                    labels[i] = arg[lane]


@njit(parallel=True, cache=True)
def _private_sums(x, labels, k, chunks):  # pragma: no cover - compiled
    n, d = x.shape
    sums = np.zeros((chunks, k, d))
    counts = np.zeros((chunks, k))
    for t in prange(chunks):
        lo, hi = _chunk_bounds(t, chunks, n, 1)
        for i in range(lo, hi):
            c = labels[i]
            counts[t, c] += 1.0
            for j in range(d):
                sums[t, c, j] += x[i, j]
    return sums.reshape(chunks, k * d), counts


@njit(cache=True)
def _merge_serial(private):  # pragma: no cover - compiled
    chunks, m = private.shape
    out = np.zeros(m)
    for t in range(chunks):
        for e in range(m):
            out[e] += private[t, e]
    return out


@njit(parallel=True, cache=True)
def _merge_parallel(private, slices):  # pragma: no cover - compiled
    chunks, m = private.shape
    out = np.zeros(m)
    for s in prange(slices):
        lo, hi = _chunk_bounds(s, slices, m, 1)
        for t in range(chunks):
            for e in range(lo, hi):
                out[e] += private[t, e]
    return out


def assign(packed: PackedPoints, centroids: np.ndarray, chunks: int | None = None) -> np.ndarray:
    """Index of the nearest centroid for every point (ties go to the lowest index).

    Parameters
    ----------
    packed
        Points in a variant's layout (:func:`pack`).
    centroids
        ``(K, D)`` float64.
    chunks
        Work chunks (defaults to numba's thread count); the result does not depend on it.

    Returns
    -------
    numpy.ndarray
        ``(N,)`` int64 labels.
    """
    chunks = chunks or numba.get_num_threads()
    labels = np.empty(packed.n, dtype=np.int64)
    c = pad_centroids(np.asarray(centroids, dtype=np.float64), packed)
    layout = packed.variant.layout
    if layout == "aos":
        _assign_aos(packed.data, c, labels, chunks)
    elif layout == "soa":
        _assign_soa(packed.data, c, labels, chunks, packed.lanes if packed.variant.padded else 1)
    else:
        _assign_aosoa(packed.data, c, labels, chunks)
    return labels


@dataclass(frozen=True, kw_only=True)
class PartialSums:
    """Per-cluster coordinate sums and point counts (float64), before division."""

    sums: np.ndarray
    counts: np.ndarray


def reduce_centroids(points: np.ndarray, labels: np.ndarray, k: int, reduction: str,
                     chunks: int | None = None) -> PartialSums:
    """Sums and counts per cluster via private per-chunk copies and a serial or parallel merge."""
    chunks = chunks or numba.get_num_threads()
    private, counts = _private_sums(points, labels, k, chunks)
    if reduction == "serial":
        merged = _merge_serial(private)
    elif reduction == "parallel":
        merged = _merge_parallel(private, numba.get_num_threads())
    else:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return PartialSums(sums=merged.reshape(k, points.shape[1]), counts=counts.sum(axis=0))


def centroids_from(partial: PartialSums, previous: np.ndarray) -> np.ndarray:
    """Means of the clusters; an empty cluster keeps its previous centroid."""
    out = np.array(previous, dtype=np.float64, copy=True)
    full = partial.counts > 0
    out[full] = partial.sums[full] / partial.counts[full, None]
    return out


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """One Lloyd step: labels against the old centroids and the new centroids."""

    labels: np.ndarray
    centroids: np.ndarray


def lloyd_step(points: np.ndarray, packed: PackedPoints, centroids: np.ndarray,
               chunks: int | None = None) -> StepResult:
    """One Lloyd iteration with ``packed.variant``'s layout and reduction.

    ``points`` is the unpadded ``(N, D)`` array the reduction reads (the same
    for every variant, so the reduction's cost does not depend on the layout).
    """
    labels = assign(packed, centroids, chunks)
    partial = reduce_centroids(points, labels, centroids.shape[0], packed.variant.reduction, chunks)
    return StepResult(labels=labels, centroids=centroids_from(partial, centroids))


def sklearn_step(data: Dataset) -> StepResult:
    """One Lloyd iteration of :class:`sklearn.cluster.KMeans` from the same initial centroids.

    ``labels`` are scikit-learn's ``labels_``, which it computes against the
    *updated* centroids.
    """
    km = KMeans(n_clusters=data.init.shape[0], init=data.init, n_init=1, max_iter=1, algorithm="lloyd",
                tol=0.0, random_state=0)
    km.fit(data.points)
    return StepResult(labels=km.labels_.astype(np.int64), centroids=km.cluster_centers_)


def best_time(fn: Callable[[], object], repeats: int = 3, min_seconds: float | None = None, max_runs: int = 200) -> float:
    """Smallest wall time of ``fn`` over at least ``repeats`` runs and ``min_seconds`` (default ``0.05 * repeats``).

    On a shared machine a parallel region waits for its slowest thread, so a
    single timing can be tens of times the undisturbed one; the minimum over
    many short runs is the robust estimate of the kernel's own cost.
    """
    min_seconds = 0.05 * repeats if min_seconds is None else min_seconds
    best, total, runs = math.inf, 0.0, 0
    while runs < max_runs and (runs < repeats or total < min_seconds):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, total, runs = min(best, dt), total + dt, runs + 1
    return best


def time_step(points: np.ndarray, packed: PackedPoints, centroids: np.ndarray, repeats: int = 3) -> float:
    """Best wall time in seconds of one :func:`lloyd_step` (compiled and warmed beforehand; see :func:`best_time`)."""
    lloyd_step(points, packed, centroids)
    return best_time(lambda: lloyd_step(points, packed, centroids), repeats)


def time_sklearn_step(data: Dataset, repeats: int = 3) -> float:
    """Best wall time of scikit-learn's one-iteration Lloyd fit on the same data (see :func:`best_time`)."""
    return best_time(lambda: sklearn_step(data), repeats)


def vector_ops(variant: Variant, d: int, lanes: int, reduce_cost: float) -> float:
    """Vector instructions per point-centroid distance in the instruction-count model.

    The model counts one instruction per ``lanes``-wide subtract-multiply-add:

    * ``aos`` unpadded: ``floor(d / W)`` vector steps, ``d mod W`` scalar
      remainder steps and a horizontal sum of cost ``reduce_cost``;
    * ``aos`` padded: ``ceil(d / W)`` vector steps and the horizontal sum;
    * ``soa`` and ``aosoa``: ``d / W`` (one vector serves ``W`` points, no horizontal sum).

    Parameters
    ----------
    variant
        The kernel variant (its reduction does not enter the model).
    d
        Dimensions.
    lanes
        Vector width ``W`` in elements.
    reduce_cost
        Cost of one horizontal sum in vector instructions (``log2 W`` shuffles-and-adds is typical).

    Returns
    -------
    float
    """
    if variant.layout == "aos":
        if variant.padded:
            return math.ceil(d / lanes) + reduce_cost
        return d // lanes + d % lanes + reduce_cost
    return d / lanes


def modelled_improvement(host_seconds: float, host_baseline_seconds: float, variant: Variant, d: int,
                         host_lanes_: int, target_lanes: int, reduce_cost: float) -> float:
    """Percent time saved by ``variant`` over :data:`BASELINE` on a machine with ``target_lanes`` lanes.

    Each measured host time is scaled by the ratio of the variant's modelled
    instruction counts on the target and on the host (:func:`vector_ops`), so
    what the host measurement shows about each kernel's efficiency is kept and
    only the vector width changes.  The horizontal-sum cost is scaled with
    ``log2`` of the width: ``reduce_cost * log2(W) / log2(16)``.
    """
    def ops(v: Variant, w: int) -> float:
        return vector_ops(v, d, w, reduce_cost * math.log2(w) / 4.0)

    t_v = host_seconds * ops(variant, target_lanes) / ops(variant, host_lanes_)
    t_b = host_baseline_seconds * ops(BASELINE, target_lanes) / ops(BASELINE, host_lanes_)
    return 100.0 * (1.0 - t_v / t_b)


# ---------------------------------------------------------------------------------------------
# Scale-out: one Lloyd step per rank on its slice of the points, Allreduce of sums and counts.


def allreduce_model_seconds(ranks: int, payload_bytes: float, latency: float, bandwidth: float) -> float:
    """Modelled time of one ``Allreduce`` by recursive doubling: ``ceil(log2 P) (alpha + bytes / beta)``.

    Parameters
    ----------
    ranks
        ``P``; one rank costs nothing.
    payload_bytes
        Bytes reduced.
    latency
        ``alpha``, seconds per message round.
    bandwidth
        ``beta``, bytes per second of one link.

    Returns
    -------
    float
    """
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    rounds = math.ceil(math.log2(ranks)) if ranks > 1 else 0
    return rounds * (latency + payload_bytes / bandwidth)


def strong_scaling_seconds(seconds_per_point: float, n: int, ranks: int, k: int, d: int, latency: float,
                           bandwidth: float) -> float:
    """Modelled time of one distributed Lloyd step (:func:`lloyd_step_mpi`) on ``ranks`` ranks.

    ``n / P`` points per rank at ``seconds_per_point`` each, then the two
    float64 ``Allreduce`` calls of the step (``K*D`` sums, ``K`` counts),
    each by :func:`allreduce_model_seconds`.
    """
    compute = seconds_per_point * n / ranks
    return (compute + allreduce_model_seconds(ranks, 8.0 * k * d, latency, bandwidth)
            + allreduce_model_seconds(ranks, 8.0 * k, latency, bandwidth))


def rank_slice(n: int, rank: int, size: int) -> slice:
    """The contiguous block of ``n`` points owned by ``rank`` of ``size``."""
    per, extra = divmod(n, size)
    lo = rank * per + min(rank, extra)
    return slice(lo, lo + per + (1 if rank < extra else 0))


def lloyd_step_mpi(comm: Any, local_points: np.ndarray, packed: PackedPoints, centroids: np.ndarray,
                   variant: Variant) -> np.ndarray:
    """One distributed Lloyd step: local assignment and sums, then ``Allreduce`` of sums and counts.

    Parameters
    ----------
    comm
        An ``mpi4py.MPI.Comm``.
    local_points
        This rank's ``(n_local, D)`` points.
    packed
        The same points in ``variant``'s layout (:func:`pack`, done once, outside the step, as the
        single-process timing does).
    centroids
        ``(K, D)`` centroids, the same on every rank.
    variant
        The kernel variant used locally (its merge of the private sums).

    Returns
    -------
    numpy.ndarray
        The new centroids, identical on every rank.
    """
    from mpi4py import MPI

    labels = assign(packed, centroids)
    partial = reduce_centroids(local_points, labels, centroids.shape[0], variant.reduction)
    sums = np.ascontiguousarray(partial.sums)
    counts = np.ascontiguousarray(partial.counts)
    comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    return centroids_from(PartialSums(sums=sums, counts=counts), centroids)


@dataclass(frozen=True, kw_only=True)
class MPIReport:
    """What rank 0 of the MPI worker reports.

    Attributes
    ----------
    ranks
        Communicator size.
    centroids
        Centroids after ``steps`` distributed Lloyd steps.
    step_seconds
        Best-of-``repeats`` wall time of one step (max over ranks), the layout conversion excluded.
    allreduce_seconds
        Best-of-``repeats`` wall time of the two ``Allreduce`` calls alone (max over ranks).
    """

    ranks: int
    centroids: list[list[float]]
    step_seconds: float
    allreduce_seconds: float


@dataclass(frozen=True, kw_only=True)
class MPIRun:
    """One launch of the distributed Lloyd worker.

    Attributes
    ----------
    ranks
        MPI processes (one numba thread each).
    n, d, k, seed
        The seeded dataset (:func:`make_dataset`), regenerated on every rank.
    variant
        The kernel variant used locally.
    steps
        Distributed steps before the centroids are reported.
    repeats
        Timed steps (the best is kept).
    lanes
        Vector width of the layout (default :func:`host_lanes`).
    timeout
        Seconds before the launch is abandoned.
    """

    ranks: int
    n: int
    d: int
    k: int
    seed: int
    variant: Variant = BASELINE
    steps: int = 1
    repeats: int = 3
    lanes: int | None = None
    timeout: float = 120.0


def run_lloyd_mpi(run: MPIRun) -> MPIReport:
    """Launch ``run.ranks`` MPI processes (one numba thread each) running :func:`lloyd_step_mpi`.

    Every rank regenerates the seeded dataset and keeps its :func:`rank_slice`.

    Returns
    -------
    MPIReport
        Rank 0's report.
    """
    v = run.variant
    args = ["-m", "repro.misc.kmeans", "--n", run.n, "--d", run.d, "--k", run.k, "--seed", run.seed, "--steps",
            run.steps, "--repeats", run.repeats, "--layout", v.layout, "--padded", int(v.padded),
            "--reduction", v.reduction, "--lanes", run.lanes or host_lanes()]
    env = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = run_mpi([str(a) for a in args], run.ranks, run.timeout, env=env)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    raw = json.loads(line)
    return MPIReport(**raw)


def _mpi_main(argv: list[str] | None = None) -> None:
    from mpi4py import MPI

    ap = argparse.ArgumentParser(description="Distributed Lloyd steps (run under mpiexec).")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layout", default="aos")
    ap.add_argument("--padded", type=int, default=0)
    ap.add_argument("--reduction", default="serial")
    ap.add_argument("--lanes", type=int, default=host_lanes())
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    data = make_dataset(args.n, args.d, args.k, args.seed)
    local = np.ascontiguousarray(data.points[rank_slice(args.n, comm.Get_rank(), comm.Get_size())])
    variant = Variant(layout=args.layout, padded=bool(args.padded), reduction=args.reduction)
    packed = pack(local, variant, args.lanes)  # once: the timed step is the kernel, as in the single-process sweep
    centroids = data.init
    for _ in range(args.steps):
        centroids = lloyd_step_mpi(comm, local, packed, centroids, variant)
    step_best, ar_best = math.inf, math.inf
    probe = np.zeros(args.k * args.d + args.k)
    for _ in range(args.repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        lloyd_step_mpi(comm, local, packed, data.init, variant)
        step_best = min(step_best, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, probe[: args.k * args.d], op=MPI.SUM)
        comm.Allreduce(MPI.IN_PLACE, probe[args.k * args.d:], op=MPI.SUM)
        ar_best = min(ar_best, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    if comm.Get_rank() == 0:
        report = MPIReport(ranks=comm.Get_size(), centroids=centroids.tolist(), step_seconds=step_best, allreduce_seconds=ar_best)
        print(json.dumps(asdict(report)))


if __name__ == "__main__":
    _mpi_main()
