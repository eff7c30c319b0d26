"""Driver of the ``a2a-2dfc`` chapter: the striped all-to-all on a two-dimensional fully connected network.

:func:`points` builds the sweep (every algorithm x per-pair block size on an
``R x C`` :func:`~repro.hpc.platforms.two_dim_fc`), :func:`claims`
turns the table into the speed-ups the ledger records, :func:`speedups` and
:func:`lower_bound` compare every algorithm with the striped one and with the
multi-port bandwidth bound, and :func:`time_vs_size_figure` draws the sweep.
"""

from __future__ import annotations

import functools
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.collectives.figures import sim_vs_model
from repro.collectives.sweep import Point, platform_key

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


def claims(df: pd.DataFrame, rows: int, conventional: Sequence[str]) -> dict[str, list[float]]:
    """Per-block-size values of the chapter's claims (speed-ups from SimGrid times).

    ``speedup_vs_existing``: the fastest of the ``conventional`` algorithms
    over the striped 2dfc algorithm; ``speedup_vs_topology_aware``: the
    non-striped two-phase over it; ``speedup_vs_direct``: the direct
    all-at-once exchange (``linear``) over it.  Times are SimGrid's, or the
    route-aware model's for algorithms that were not simulated (:func:`best_time`).
    """
    piv = df.assign(t=best_time(df)).pivot_table(index="nbytes", columns="algorithm", values="t")
    ours = piv[f"2dfc:rows={rows}"]
    return {
        "speedup_vs_existing": (piv[list(conventional)].min(axis=1) / ours).tolist(),
        "speedup_vs_topology_aware": (piv[f"two_phase:rows={rows}"] / ours).tolist(),
        "speedup_vs_direct": (piv["linear"] / ours).tolist(),
    }


def short_label(spec: str, rows: int) -> str:
    """Figure label of a spec: the row count dropped (it is the chapter's ``rows``)."""
    return spec.replace(f":rows={rows}", "")


def speedups(df: pd.DataFrame, rows: int, bandwidth: float) -> pd.DataFrame:
    """Time of every algorithm over the striped one (:func:`best_time`), per block size.

    The last column, ``striped/bound``, is the striped time over the multi-port bandwidth lower bound;
    columns are named by :func:`short_label`.
    """
    cols = int(df.p.iloc[0]) // rows
    piv = df.assign(t=best_time(df)).pivot_table(index="nbytes", columns="algorithm", values="t")
    ours = piv[f"2dfc:rows={rows}"]
    out = piv.drop(columns=[f"2dfc:rows={rows}"]).div(ours, axis=0)
    out["striped/bound"] = ours / [lower_bound(rows, cols, m, bandwidth) for m in piv.index]
    out.index = [f"{m / 1024:g} KiB" for m in piv.index]
    out.index.name = "block per pair"
    return out.rename(columns={c: short_label(c, rows) for c in out.columns})


def time_vs_size_figure(df: pd.DataFrame, rows: int, cols: int) -> plt.Figure:
    """All-to-all time against the per-pair block (SimGrid, route-aware model, closed form)."""
    fig = sim_vs_model(df, "nbytes", "algorithm", xlabel="block per pair (KiB)", xscale=1024,
                       label=functools.partial(short_label, rows=rows))
    fig.axes[0].set_title(f"all-to-all on a {rows}×{cols} 2dfc")
    return fig
