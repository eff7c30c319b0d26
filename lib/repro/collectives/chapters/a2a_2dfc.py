"""Driver of the ``a2a-2dfc`` chapter: the striped all-to-all on a two-dimensional fully connected network.

:class:`Params` holds the chapter's parameters; :func:`run` evaluates every
algorithm x per-pair block size on an ``R x C``
:func:`~repro.hpc.platforms.two_dim_fc` (closed form, route-aware alpha-beta
model, and SimGrid for the algorithms in ``sim_algorithms``) and checks every
schedule against MPI's own ``Alltoall`` on a real MPI; :func:`claims` gives the
ledger the three speed-ups at the one judged block size (``judged_kb``): the
simulation is deterministic, so each claim is one value at one named
configuration and the block-size sweep is a figure (:func:`time_vs_size_figure`,
:func:`speedup_figure`).  :func:`speedups` and :func:`lower_bound` compare every
algorithm with the striped one and with the multi-port bandwidth bound.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.collectives.exactness import ExactnessResults, algorithm_exactness
from repro.collectives.figures import SeriesStyle, bars, sim_vs_model
from repro.collectives.sweep import LinkConstants, Point, build_platform, platform_key, run_points
from repro.hpc.platforms import Platform
from repro.params import ChapterParams, require
from repro.registry import load_registry

CHAPTER = "a2a-2dfc"
NEEDED = ("2dfc", "two_phase", "linear")
"""Algorithms every claim compares (the striped one, the topology-aware one, the direct exchange)."""
MPI_LENGTHS = (1, 7, 256)
"""Block lengths (elements) of the exactness run on a real MPI."""
MPI_DTYPES = ("int64", "float32")


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams, LinkConstants):
    """The chapter's parameters (the registry schema's, one field each)."""

    rows: int
    cols: int
    sizes_kb: tuple[float, ...]
    judged_kb: float
    algorithms: tuple[str, ...]
    conventional: tuple[str, ...]
    sim_algorithms: tuple[str, ...]
    link_gbs: float
    link_latency_us: float
    mpi_ranks: int
    mpi_rows: int
    workers: int

    def checks(self) -> None:
        """Refuse impossible combinations before any simulation starts."""
        require(set(NEEDED) <= set(self.algorithms), self, "algorithms",
                "algorithms must contain 2dfc, two_phase and linear (the claims compare them)")
        require(set(self.conventional) <= set(self.algorithms), self, ("conventional", "algorithms"),
                "every entry of conventional must also be in algorithms")
        require(set(NEEDED) <= set(self.sim_algorithms) <= set(self.algorithms), self,
                ("sim_algorithms", "algorithms"),
                "sim_algorithms must contain 2dfc, two_phase and linear and only entries of algorithms")
        require(self.rows > 1 and self.cols > 1, self, ("rows", "cols"),
                "a 2dfc needs at least two rows and two columns")
        require(self.judged_kb in self.sizes_kb, self, ("judged_kb", "sizes_kb"),
                "the judged block size must be one of the simulated sizes")
        require(self.mpi_ranks % self.mpi_rows == 0, self, ("mpi_ranks", "mpi_rows"), "mpi_rows must divide mpi_ranks")
        require(all(int(kb * 1024) >= 1 for kb in self.sizes_kb), self, "sizes_kb",
                "every block must hold at least one byte")

    @property
    def model_only(self) -> tuple[str, ...]:
        """Algorithms evaluated by the alpha-beta models only (not in ``sim_algorithms``)."""
        return tuple(a for a in self.algorithms if a not in self.sim_algorithms)

    def platform(self) -> Platform:
        """The ``rows x cols`` 2dfc of the run."""
        return build_platform(platform_key("two_dim_fc", rows=self.rows, cols=self.cols, bandwidth=self.bandwidth,
                                           latency=self.latency))


@dataclass(frozen=True, kw_only=True)
class Results(ExactnessResults):
    """What one run of the chapter produced.

    Attributes
    ----------
    params:
        The parameters of the run.
    table:
        One row per (algorithm, block size): closed form, route-aware model and SimGrid times
        (:func:`repro.collectives.sweep.run_points`).
    exactness:
        Every MPI case (:func:`repro.collectives.exactness.algorithm_exactness`).
    """

    params: Params
    table: pd.DataFrame
    exactness: pd.DataFrame


def run(params: Params, *, progress: bool = True) -> Results:
    """Simulate every algorithm x block size and check every schedule on a real MPI.

    Parameters
    ----------
    params:
        The chapter's parameters.
    progress:
        Show a progress bar over the simulations.
    """
    pts = points(params.rows, params.cols, params.sizes_kb, params.algorithms, params.bandwidth, params.latency,
                 params.model_only)
    table = run_points(pts, params.workers, desc="simulations" if progress else "points")
    mpi = algorithm_exactness(specs(params.mpi_rows, params.algorithms), params.mpi_ranks, MPI_LENGTHS, MPI_DTYPES)
    return Results(params=params, table=table, exactness=mpi)


GRID_ALGORITHMS = ("2dfc", "two_phase")
"""The algorithms that take the grid's row count."""


def specs(rows: int, algorithms: Sequence[str]) -> list[str]:
    """Specs of the all-to-all algorithms; the two grid algorithms get ``rows``."""
    return [f"{a}:rows={rows}" if a in GRID_ALGORITHMS else a for a in algorithms]


def points(rows: int, cols: int, sizes_kb: Sequence[float], algorithms: Sequence[str],
           bandwidth: float, latency: float, model_only: Sequence[str] = ()) -> list[Point]:
    """Points of the chapter: every algorithm x per-pair block size on an ``R x C`` 2dfc.

    Algorithms in ``model_only`` are evaluated by the two alpha-beta models but not simulated.
    """
    key = platform_key("two_dim_fc", rows=rows, cols=cols, bandwidth=bandwidth, latency=latency)
    return [Point(platform=key, spec=spec, p=rows * cols, nbytes=int(kb * 1024), simulate=spec.split(":")[0] not in model_only,
                  tags=(("grid", f"{rows}x{cols}"),))
            for spec in specs(rows, algorithms) for kb in sizes_kb]


def best_time(df: pd.DataFrame) -> pd.Series:
    """SimGrid's time where the point was simulated, else the route-aware alpha-beta model's."""
    return df.sim_s.where(np.isfinite(df.sim_s), df.model_s)


def lower_bound(rows: int, cols: int, m: float, bandwidth: float) -> float:
    """Multi-port bandwidth lower bound of an all-to-all on an ``R x C`` 2dfc (seconds).

    Minimal routing puts ``m[(R-1) + (C-1) + 2(R-1)(C-1)]`` bytes per node on
    its ``R + C - 2`` outgoing links; for ``R = C = k`` this is ``k m / B``.
    """
    load = m * ((rows - 1) + (cols - 1) + 2 * (rows - 1) * (cols - 1))
    return load / ((rows + cols - 2) * bandwidth)


def claims(results: Results) -> dict[str, list[float]]:
    """The three speed-ups at the judged block size (``judged_kb``), one value each (deterministic).

    ``speedup_vs_existing``: the fastest of the ``conventional`` algorithms
    over the striped 2dfc algorithm; ``speedup_vs_topology_aware``: the
    non-striped two-phase over it; ``speedup_vs_direct``: the direct
    all-at-once exchange (``linear``) over it.  Times are SimGrid's, or the
    route-aware model's for algorithms that were not simulated (:func:`best_time`).
    """
    prm = results.params
    df = results.table
    piv = df.assign(t=best_time(df)).pivot_table(index="nbytes", columns="algorithm", values="t")
    at = piv.loc[int(prm.judged_kb * 1024)]
    ours = at[f"2dfc:rows={prm.rows}"]
    return {
        "speedup_vs_existing": [float(at[list(prm.conventional)].min() / ours)],
        "speedup_vs_topology_aware": [float(at[f"two_phase:rows={prm.rows}"] / ours)],
        "speedup_vs_direct": [float(at["linear"] / ours)],
    }


def short_label(spec: str, rows: int) -> str:
    """Figure label of a spec: the row count dropped (it is the chapter's ``rows``)."""
    return spec.replace(f":rows={rows}", "")


def speedups(results: Results) -> pd.DataFrame:
    """Time of every algorithm over the striped one (:func:`best_time`), per block size.

    The last column, ``striped/bound``, is the striped time over the multi-port bandwidth lower bound;
    columns are named by :func:`short_label`.
    """
    prm, df = results.params, results.table
    piv = df.assign(t=best_time(df)).pivot_table(index="nbytes", columns="algorithm", values="t")
    ours = piv[f"2dfc:rows={prm.rows}"]
    out = piv.drop(columns=[f"2dfc:rows={prm.rows}"]).div(ours, axis=0)
    out["striped/bound"] = ours / [lower_bound(prm.rows, prm.cols, m, prm.bandwidth) for m in piv.index]
    out.index = [f"{m / 1024:g} KiB" for m in piv.index]
    out.index.name = "block per pair"
    return out.rename(columns={c: short_label(c, prm.rows) for c in out.columns})


def speedup_figure(results: Results) -> plt.Figure:
    """Every algorithm's time over the striped one per block size, with the paper's value for the existing algorithm."""
    paper = load_registry().get(CHAPTER).claim("speedup_vs_existing").paper_value
    fig = bars(speedups(results).drop(columns="striped/bound"), ylabel="time / striped time", ref=paper,
               ref_label=f"paper: {paper:g}× (existing algorithm)" if paper is not None else "")
    fig.axes[0].set_yscale("log")
    return fig


def time_vs_size_figure(results: Results) -> plt.Figure:
    """All-to-all time against the per-pair block (SimGrid, route-aware model, closed form)."""
    prm = results.params
    style = SeriesStyle(xlabel="block per pair (KiB)", xscale=1024, label=functools.partial(short_label, rows=prm.rows))
    fig = sim_vs_model(results.table, "nbytes", "algorithm", style=style)
    fig.axes[0].set_title(f"all-to-all on a {prm.rows}×{prm.cols} 2dfc")
    fig.axes[0].axvline(prm.judged_kb, color="grey", ls=":", lw=1)
    return fig
