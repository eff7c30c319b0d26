"""Figures of the federated chapters."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

_LABELS = {"fedavg": "FedAvg(τ′)", "fedavg_long": "FedAvg(φτ′)", "fedlama": "FedLAMA(τ′, φ)"}


def method_label(method: str, phi: int) -> str:
    """Label of a method at multiplier ``phi``, e.g. ``FedAvg(4τ′)`` (plain text, for legends and tables)."""
    return _LABELS[method].replace("φ", str(phi))


def accuracy_vs_communication(curves: pd.DataFrame, phis: list[int]) -> plt.Figure:
    """Test accuracy against scalars communicated, mean over seeds (band: min to max), one panel per phi."""
    fig, axes = plt.subplots(1, len(phis), figsize=(5.2 * len(phis), 3.8), squeeze=False, sharey=True)
    for ax, phi in zip(axes[0], phis):
        for method, colour in (("fedavg", "tab:gray"), ("fedavg_long", "tab:orange"), ("fedlama", "tab:blue")):
            sel = curves[(curves.method == method) & ((curves.phi == phi) | (method == "fedavg"))]
            g = sel.groupby("round").agg(acc=("accuracy", "mean"), lo=("accuracy", "min"), hi=("accuracy", "max"),
                                         comm=("comm", "mean"))
            x = g.comm.to_numpy() / 1e6
            ax.plot(x, g.acc, marker="o", ms=3, color=colour, label=method_label(method, phi))
            ax.fill_between(x, g.lo, g.hi, color=colour, alpha=0.15)
        ax.set_title(f"$\\phi$ = {phi}")
        ax.set_xlabel("parameters communicated (millions, up + down)")
    axes[0][0].set_ylabel("test accuracy (%)")
    axes[0][-1].legend(loc="lower right")
    fig.tight_layout()
    return fig


def interval_timeline(timeline: dict[int, dict[str, int]], sizes: dict[str, int] | None = None) -> plt.Figure:
    """Heat map of each layer's aggregation interval over rounds (one FedLAMA run)."""
    rounds = sorted(timeline)
    layers = list(timeline[rounds[0]])
    grid = np.array([[timeline[r][k] for r in rounds] for k in layers])
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(layers) + 1.2))
    im = ax.imshow(grid, aspect="auto", cmap="Blues", interpolation="nearest",
                   extent=(rounds[0] - 0.5, rounds[-1] + 0.5, len(layers) - 0.5, -0.5))
    names = [f"{k} ({sizes[k]:,})" if sizes else k for k in layers]
    ax.set_yticks(range(len(layers)), names)
    ax.set_xlabel("round (of $\\tau'$ local steps)")
    ax.grid(False)
    fig.colorbar(im, ax=ax, label="interval (rounds)")
    fig.tight_layout()
    return fig


def summary_table(final: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy and communication relative to FedAvg(tau'), mean ± sd over seeds, per method and phi."""
    base = final[final.method == "fedavg"].set_index("seed").comm
    df = final.assign(rel_comm=final.apply(lambda r: r.comm / base[r.seed], axis=1))
    g = df.groupby(["method", "phi"], sort=False).agg(
        acc=("accuracy", "mean"), acc_sd=("accuracy", "std"), rel=("rel_comm", "mean"), seeds=("seed", "count"))
    out = pd.DataFrame({
        "method": [method_label(m, p) for m, p in g.index],
        "final accuracy (%)": [f"{a:.1f} ± {0 if np.isnan(s) else s:.1f}" for a, s in zip(g.acc, g.acc_sd)],
        "communication vs FedAvg(τ')": [f"{r:.2f}×" for r in g.rel],
        "seeds": g.seeds.to_numpy(),
    })
    return out
