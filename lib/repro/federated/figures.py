"""Figure and table helpers used by two or more federated chapters.

Each chapter's own figures live in its driver (:mod:`repro.federated.chapters`).
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from repro.federated.tuning import Choice, chosen, keep_best


def label_histogram_figure(histogram: np.ndarray, title: str, boundaries: Sequence[int] = (),
                           height: float = 2.6) -> Figure:
    """Heat map of a clients x classes label histogram (clients along x).

    Parameters
    ----------
    histogram
        ``(clients, classes)`` sample counts (:func:`repro.partition.label_histogram`).
    title
        The axes title.
    boundaries
        Client indices before which a vertical line is drawn (e.g. between planted clusters).
    height
        Figure height in inches.
    """
    fig, ax = plt.subplots(figsize=(8, height))
    im = ax.imshow(np.asarray(histogram).T, aspect="auto", cmap="Greens", interpolation="nearest")
    for b in boundaries:
        ax.axvline(b - 0.5, color="k", lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.grid(False)
    fig.colorbar(im, ax=ax, label="samples", pad=0.01)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def accuracy_band(ax: Axes, sel: pd.DataFrame, x: str | None, colour: str, label: str) -> None:
    """Plot the mean accuracy of ``sel`` per round, with its min-max band.

    The x axis is the mean of column ``x`` per round, or the round itself when ``x`` is ``None``.
    """
    agg = {"acc": ("accuracy", "mean"), "lo": ("accuracy", "min"), "hi": ("accuracy", "max")}
    if x is not None:
        agg["x"] = (x, "mean")
    g = sel.groupby("round").agg(**agg)
    xs = g.index if x is None else g.x
    ax.plot(xs, g.acc, marker="o", ms=3, color=colour, label=label)
    ax.fill_between(xs, g.lo, g.hi, color=colour, alpha=0.12)


def accuracy_curves(curves: pd.DataFrame, column: str, order: Sequence[str], labels: dict[str, str],
                    colours: dict[str, str], ylabel: str) -> Figure:
    """Accuracy against rounds of every entry of ``order`` (mean over seeds, band min to max, :func:`accuracy_band`).

    Parameters
    ----------
    curves
        ``round, accuracy`` rows, told apart by ``column`` (a method, an aggregator).
    column, order
        The column naming the curves and its values in legend order.
    labels, colours
        Legend label and colour of each value.
    ylabel
        What the accuracy is (test accuracy, mean client accuracy ...).
    """
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for m in order:
        accuracy_band(ax, curves[curves[column] == m], None, colours[m], labels[m])
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


METHOD_LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "feddrl": "FedDRL",
                 "cluster-agg": "cluster-equal aggregation", "kd": "KD regulariser", "cadis": "CADIS",
                 "oracle-agg": "oracle clusters"}
"""Legend labels of the cluster-skew chapters' methods."""


def method_curves(curves: pd.DataFrame, title: str) -> Figure:
    """Test accuracy against rounds per method: mean over seeds, min-max band."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    styles = ("-", "--", "-.", ":")
    for i, (method, g) in enumerate(curves.groupby("method", sort=False)):
        s = g.groupby("round").accuracy
        ax.plot(s.mean().index, s.mean().values, ls=styles[i % len(styles)], label=METHOD_LABELS.get(method, method))
        ax.fill_between(s.mean().index, s.min().values, s.max().values, alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def method_table(final: pd.DataFrame) -> pd.DataFrame:
    """Per method: accuracy at the budget and final (mean ± sd), the spread of per-client accuracy, and ARI if any."""
    rows = []
    for method, g in final.groupby("method", sort=False):
        row = {"method": METHOD_LABELS.get(method, method),
               "accuracy at budget (%)": f"{g.budget_accuracy.mean():.1f} ± {g.budget_accuracy.std(ddof=0):.1f}",
               "final accuracy (%)": f"{g.accuracy.mean():.1f} ± {g.accuracy.std(ddof=0):.1f}",
               "per-client accuracy sd": f"{g.client_acc_std.mean():.1f}"}
        if "ari" in final and final.ari.notna().any():
            row["ARI vs planted"] = f"{g.ari.mean():.2f}" if g.ari.notna().any() else "–"
        rows.append(row)
    return pd.DataFrame(rows)


def seed_sd(values: pd.Series) -> float:
    """Sample standard deviation over seeds (0 for a single seed)."""
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def mean_sd(values: pd.Series) -> str:
    """``"mean ± sd"`` over seeds, one decimal (:func:`seed_sd`)."""
    return f"{values.mean():.1f} ± {seed_sd(values):.1f}"


def tuned_accuracy_curves(curves: pd.DataFrame, best: Sequence[Choice], methods: Sequence[str], labels: dict[str, str],
                          colours: dict[str, str], xlabel: str = "round",
                          figsize: tuple[float, float] = (7.4, 4.0)) -> Figure:
    """Test accuracy against rounds per method at its chosen setting (mean over seeds, band min to max).

    Parameters
    ----------
    curves
        ``method, setting, seed, round, accuracy`` of every run of a sweep.
    best
        The choices of :func:`repro.federated.tuning.best_settings`; every method is tuned.
    methods, labels, colours
        The methods in legend order, their labels and colours.
    xlabel, figsize
        The x-axis label and the figure size; the caller places the legend.
    """
    fig, ax = plt.subplots(figsize=figsize)
    sel, value = keep_best(curves, best), chosen(best)
    for m in methods:
        accuracy_band(ax, sel[sel.method == m], None, colours[m], f"{labels[m]} (lr {value[m]:g})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy (%)")
    fig.tight_layout()
    return fig


def tuning_table(final: pd.DataFrame, best: Sequence[Choice], labels: dict[str, str],
                 metric: str = "validation_accuracy") -> pd.DataFrame:
    """Per tuned method: mean ``metric`` and test accuracy over seeds at every grid value, and the values chosen.

    The value chosen on ``metric`` is the one the claims use; the value the
    test accuracy at the budget would have chosen is shown beside it, so a
    reader sees where tuning on the test set would have differed, and a last
    column says when the choice is the grid's lowest or highest value.
    """
    order = list(labels)
    rows = []
    for c in sorted(best, key=lambda c: order.index(c.method) if c.method in order else len(order)):
        g = final[final.method == c.method].groupby("setting")[[metric, "budget_accuracy"]].mean()
        rows.append({"method": labels.get(c.method, c.method),
                     "validation accuracy per value (%)": ", ".join(f"{v:g}: {a:.1f}" for v, a in g[metric].items()),
                     "test accuracy per value (%)": ", ".join(f"{v:g}: {a:.1f}" for v, a in g.budget_accuracy.items()),
                     "chosen on validation": f"{c.value:g}", "best on test": f"{g.budget_accuracy.idxmax():g}",
                     "end of the grid": c.grid_end})
    return pd.DataFrame(rows)


def within_margin_figure(sweep: pd.DataFrame, chosen: float, ylabel: str, xlabel: str) -> Figure:
    """A claim whose per-seed value depends on an accuracy margin, against that margin (mean and each seed).

    A "saving at nearly the same accuracy" counts a seed's saving only when its accuracy loss stays within a
    margin the paper does not quantify; this figure shows how the claim's value moves with that margin.

    Parameters
    ----------
    sweep
        ``margin, value`` rows: the claim's per-seed values at every margin.
    chosen
        The margin the claim is recorded at (a dotted line).
    ylabel, xlabel
        What the value and the margin are.
    """
    fig, ax = plt.subplots(figsize=(6.0, 3.2))
    g = sweep.groupby("margin").value
    ax.plot(g.mean().index, g.mean().values, marker="o", color="black", label="mean over seeds")
    ax.scatter(sweep.margin, sweep.value, color="0.5", s=12, label="each seed")
    ax.axvline(chosen, color="#1565c0", ls=":", lw=1, label=f"the claim's margin {chosen:g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
