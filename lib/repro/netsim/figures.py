"""Figure helpers shared by the chapters of the netsim family."""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.netsim.oppcomm import OppCommConfig, city_layout


def learning_curves(curves: Mapping[str, Sequence[Sequence[float]]], ylabel: str, title: str,
                    xlabel: str = "training episode") -> plt.Figure:
    """Mean over seeds (line) and min-max band of per-episode training curves, one line per label.

    Parameters
    ----------
    curves
        Label to a list of per-seed curves (equal lengths).
    ylabel, title, xlabel
        Axis labels and title.
    """
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for label, runs in curves.items():
        arr = np.asarray(runs, dtype=float)
        x = np.arange(1, arr.shape[1] + 1)
        ax.plot(x, arr.mean(axis=0), marker="o", ms=3, label=label)
        ax.fill_between(x, arr.min(axis=0), arr.max(axis=0), alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def metric_panels(table: pd.DataFrame, x: str, metrics: Sequence[tuple[str, str]], hue: str = "policy",
                  title: str = "") -> plt.Figure:
    """One panel per metric: mean over seeds against ``x``, one line per ``hue`` value, error bars = sd.

    Parameters
    ----------
    table
        A long ``pandas.DataFrame`` with columns ``x``, ``hue``, ``seed`` and the metric columns.
    x
        Column on the horizontal axis.
    metrics
        ``(column, axis label)`` pairs, one panel each.
    hue
        Column that separates the lines.
    title
        Figure title.
    """
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.4), squeeze=False)
    for ax, (col, label) in zip(axes[0], metrics):
        stats = table.groupby([hue, x])[col].agg(["mean", "std"]).reset_index()
        for name, part in stats.groupby(hue, sort=False):
            ax.errorbar(part[x], part["mean"], yerr=part["std"].fillna(0.0), marker="o", ms=4, capsize=3, label=name)
        ax.set_xlabel(x)
        ax.set_ylabel(label)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def city_figure(config: OppCommConfig, mob_seed: int, title: str) -> plt.Figure:
    """The bus tracks and RSUs of one city of ``OppComm-v0`` (the layout its environment uses for ``mob_seed``).

    Parameters
    ----------
    config
        The scenario (its city and RSU placement).
    mob_seed
        The mobility seed.
    title
        Figure title.
    """
    layout = city_layout(config, mob_seed)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot(layout.positions[:, :, 0], layout.positions[:, :, 1], lw=0.4, alpha=0.5)
    ax.scatter(layout.rsu_xy[:, 0], layout.rsu_xy[:, 1], marker="^", c="k", s=25, label="RSU", zorder=3)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.legend(loc="upper right")
    ax.set_title(title)
    return fig
