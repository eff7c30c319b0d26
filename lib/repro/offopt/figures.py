"""Figures that two or more offline-optimisation chapters draw.

Scores per task (all three chapters), and the regularised-against-vanilla
gains and surrogate diagnostics that BOSS and IGNITE both show.  Figures only
one chapter draws live in that chapter's driver.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.offopt.pipeline import SINGLE_OPTIMIZERS

_PALETTE = ["tab:gray", "tab:blue", "tab:cyan", "tab:orange", "tab:red", "tab:green", "tab:purple", "tab:brown", "tab:pink"]


def method_colours(methods: Sequence[str]) -> dict[str, str]:
    """A stable colour per method label (grid order)."""
    return {m: _PALETTE[i % len(_PALETTE)] for i, m in enumerate(methods)}


def scores_by_task(rows: pd.DataFrame, metric: str = "p100", title: str | None = None) -> Figure:
    """Normalised score per task and method: bars = mean over seeds, dots = seeds.

    A dashed line marks the best design in the offline data (the score to beat).

    Parameters
    ----------
    rows
        :attr:`repro.offopt.grid.GridResult.rows`.
    metric
        ``"p100"``, ``"p80"`` or ``"p50"``.
    title
        Figure title.
    """
    tasks = list(dict.fromkeys(rows.task))
    methods = list(dict.fromkeys(rows.method))
    colours = method_colours(methods)
    fig, axes = plt.subplots(1, len(tasks), figsize=(max(3.2 * len(tasks), 5.0), 3.8), squeeze=False)
    width = 0.8
    for ax, task in zip(axes[0], tasks):
        sub = rows[rows.task == task]
        for i, m in enumerate(methods):
            vals = sub[sub.method == m][metric].to_numpy()
            ax.bar(i, vals.mean(), width=width, color=colours[m], alpha=0.55, label=m)
            jitter = np.linspace(-0.2, 0.2, len(vals)) if len(vals) > 1 else np.zeros(1)
            ax.scatter(i + jitter, vals, color=colours[m], edgecolor="black", linewidth=0.5, s=18, zorder=3)
        ref = ax.axhline(float(sub.best_offline.iloc[0]), color="black", linestyle="--", linewidth=1)
        lo = min(float(sub[metric].min()), float(sub.best_offline.iloc[0]))
        hi = max(float(sub[metric].max()), float(sub.best_offline.iloc[0]))
        pad = 0.15 * max(hi - lo, 1e-3)
        ax.set_ylim(lo - pad, min(1.0 + pad, hi + pad))
        ax.set_xticks(range(len(methods)), methods, rotation=40, ha="right")
        ax.set_title(task)
        ax.grid(axis="x", visible=False)
    axes[0][0].set_ylabel(f"normalised score ({metric[1:]}th percentile)")
    axes[0][0].legend([ref], ["best offline design"], loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def diagnostic_pairs(rows: pd.DataFrame, regularizer: str, column: str, label: str) -> Figure:
    """Vanilla against regularised surrogate, one point per (task, seed), for a logged diagnostic.

    Points below the diagonal mean the regulariser lowered the diagnostic.

    Parameters
    ----------
    rows
        Grid rows with the diagnostic column (e.g. ``"sharpness_unseen"``).
    regularizer
        ``"boss"``, ``"ignite"`` or ``"ignite2"``.
    column
        The diagnostic; its ``_offline`` sibling is drawn too when present.
    label
        Axis label of the diagnostic.
    """
    base = column.rsplit("_", 1)[0]
    cols = [c for c in (f"{base}_offline", f"{base}_unseen") if c in rows.columns] or [column]
    sur = rows[rows.regularizer.isin(["none", regularizer]) & rows.optimizer.isin(SINGLE_OPTIMIZERS)]
    per = sur.groupby(["task", "seed", "regularizer"], sort=True)[cols].first().unstack("regularizer")
    tasks = list(dict.fromkeys(rows.task))
    markers = ["o", "s", "^", "D", "v", "P"]
    fig, axes = plt.subplots(1, len(cols), figsize=(4.6 * len(cols), 4.0), squeeze=False)
    for ax, c in zip(axes[0], cols):
        v, r = per[(c, "none")], per[(c, regularizer)]
        for j, task in enumerate(tasks):
            sel = v.index.get_level_values("task") == task
            ax.scatter(v[sel], r[sel], marker=markers[j % len(markers)], s=30, label=task)
        lo = float(min(v.min(), r.min()))
        hi = float(max(v.max(), r.max()))
        ax.plot([lo, hi], [lo, hi], color="black", linestyle="--", linewidth=1)
        if lo > 0 and hi / lo > 30:
            ax.set_xscale("log")
            ax.set_yscale("log")
        where = c.rsplit("_", 1)[1]
        ax.set_title(f"{label}, {where} designs")
        ax.set_xlabel("vanilla surrogate")
        ax.set_ylabel(f"+{regularizer} surrogate")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def paired_gain_bars(gains: pd.DataFrame, regularizer: str) -> Figure:
    """Gain of the regularised optimiser over its vanilla base, per task and base (mean, seeds as dots), in points.

    Parameters
    ----------
    gains
        :func:`repro.offopt.grid.paired_gains`.
    regularizer
        For the labels.
    """
    tasks = list(dict.fromkeys(gains.task))
    bases = list(dict.fromkeys(gains.base))
    colours = method_colours(["_"] + bases)
    fig, ax = plt.subplots(figsize=(max(2.2 * len(tasks), 5.0), 3.4))
    w = 0.8 / len(bases)
    for j, b in enumerate(bases):
        for i, t in enumerate(tasks):
            g = 100.0 * gains[(gains.task == t) & (gains.base == b)].gain.to_numpy()
            x = i + (j - (len(bases) - 1) / 2) * w
            ax.bar(x, g.mean(), width=w * 0.9, color=colours[b], alpha=0.55, label=b if i == 0 else None)
            ax.scatter(np.full(len(g), x), g, color=colours[b], edgecolor="black", linewidth=0.5, s=14, zorder=3)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel(f"+{regularizer} minus vanilla (points)")
    ax.legend(title="base optimiser", fontsize=8)
    ax.grid(axis="x", visible=False)
    fig.tight_layout()
    return fig
