"""Figures and tables shared by the collectives chapters that run :mod:`repro.collectives.sweep` sweeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


@dataclass(frozen=True, kw_only=True)
class SeriesStyle:
    """How :func:`sim_vs_model` draws its axes and names its lines and panels.

    Attributes
    ----------
    xlabel, xscale:
        Axis label and divisor applied to ``x``.
    xlog, ylog:
        Logarithmic axes.
    label, title:
        Turn a series value into a legend label, a facet value into a panel title.
    ncols:
        Panels per row.
    """

    xlabel: str
    xscale: float = 1.0
    xlog: bool = True
    ylog: bool = True
    label: Callable[[str], str] = str
    title: Callable[[object], str] = str
    ncols: int = 3


def sim_vs_model(df: pd.DataFrame, x: str, series: str, facet: str | None = None, *,
                 style: SeriesStyle) -> plt.Figure:
    """Time against ``x``: SimGrid (markers), route-aware alpha-beta (lines), closed form (dotted).

    Parameters
    ----------
    df:
        Rows of :func:`repro.collectives.sweep.run_points` (columns
        ``sim_s``, ``model_s``, ``closed_form_s``).
    x, series, facet:
        Column on the x axis, column that makes one line per value, column
        that makes one panel per value (or ``None``).
    style:
        Axis labels, scales and names (:class:`SeriesStyle`).
    """
    xscale, label, title, ncols = style.xscale, style.label, style.title, style.ncols
    facets = [None] if facet is None else list(dict.fromkeys(df[facet]))
    nc = min(ncols, len(facets))
    nr = -(-len(facets) // nc)
    fig, axes = plt.subplots(nr, nc, figsize=(max(5.0 * nc, 8.0), 3.8 * nr + 0.6), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = list(dict.fromkeys(df[series]))
    for ax, fv in zip(axes.flat, facets):
        sub = df if fv is None else df[df[facet] == fv]
        for i, name in enumerate(names):
            s = sub[sub[series] == name].sort_values(x)
            if s.empty:
                continue
            c = colours[i % len(colours)]
            z = 10 + len(names) - i  # earlier series on top (the proposed algorithm comes first)
            xs = s[x].to_numpy() / xscale
            ax.plot(xs, s.model_s * 1e3, color=c, lw=2.2 if i == 0 else 1.4, label=label(name), zorder=z)
            if np.isfinite(s.closed_form_s).any():
                ax.plot(xs, s.closed_form_s * 1e3, color=c, lw=1.0, ls=":", zorder=z)
            sim = s[np.isfinite(s.sim_s)]
            ax.plot(sim[x].to_numpy() / xscale, sim.sim_s * 1e3, "o", color=c, ms=6 if i == 0 else 5, mfc="none",
                    zorder=z)
        if style.xlog:
            ax.set_xscale("log", base=2)
        if style.ylog:
            ax.set_yscale("log")
        ax.set_xlabel(style.xlabel)
        ax.set_ylabel("time (ms)")
        if fv is not None:
            ax.set_title(title(fv))
    for ax in list(axes.flat)[len(facets):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    handles += [plt.Line2D([], [], color="gray", marker="o", ls="none", mfc="none"),
                plt.Line2D([], [], color="gray", ls=":")]
    labels += ["SimGrid (markers)", "closed form (dotted)"]
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), frameon=False,
               bbox_to_anchor=(0.5, -0.02 - 0.04 * (len(labels) > 4)))
    fig.tight_layout(rect=(0, 0.1 if len(labels) > 4 else 0.06, 1, 1))
    return fig


def bars(values: pd.DataFrame, *, ylabel: str, title: str = "", ref: float | None = None,
         ref_label: str = "") -> plt.Figure:
    """Grouped bars: one group per row of ``values`` (index), one bar per column."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    n = len(values.columns)
    width = 0.8 / max(n, 1)
    xs = np.arange(len(values.index))
    for i, col in enumerate(values.columns):
        ax.bar(xs + (i - (n - 1) / 2) * width, values[col].to_numpy(), width, label=str(col))
    ax.set_xticks(xs, [str(v) for v in values.index])
    if ref is not None:
        ax.axhline(ref, color="black", ls="--", lw=1, label=ref_label)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def comparison_table(df: pd.DataFrame, index: Sequence[str], unit: float = 1e-3) -> pd.DataFrame:
    """SimGrid, route-aware alpha-beta and closed-form times side by side (in ``unit`` seconds).

    Rows without a SimGrid run are left out; ``model/sim`` is the ratio of the
    route-aware model to the simulation.
    """
    sim = df[np.isfinite(df.sim_s)].copy()
    out = sim[list(index)].copy()
    scale = 1.0 / unit
    out["SimGrid"] = sim.sim_s * scale
    out["alpha-beta (routes)"] = sim.model_s * scale
    out["closed form"] = sim.closed_form_s * scale
    out["model/sim"] = sim.model_s / sim.sim_s
    out["sim wall (s)"] = sim.sim_wall_s
    return out.reset_index(drop=True)
