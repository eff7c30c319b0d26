"""Figures and tables of the newer federated chapters (FedLUAR, ...)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

FEDLUAR_LABELS = {
    "fedavg": "FedAvg",
    "fedluar": "FedLUAR (recycle)",
    "drop": "drop (same selection, update skipped)",
    "uniform": "recycle, uniform selection",
    "topk": "top-k sparsified updates",
}
_COLOURS = {"fedavg": "tab:gray", "fedluar": "tab:blue", "drop": "tab:red", "uniform": "tab:purple",
            "topk": "tab:orange"}


def _band(ax: plt.Axes, sel: pd.DataFrame, x: str | None, colour: str, label: str) -> None:
    """Plot the mean accuracy of ``sel`` per round against ``x`` (a column's mean; ``None``: the round), min-max band."""
    agg = {"acc": ("accuracy", "mean"), "lo": ("accuracy", "min"), "hi": ("accuracy", "max")}
    if x is not None:
        agg["x"] = (x, "mean")
    g = sel.groupby("round").agg(**agg)
    xs = g.index if x is None else g.x
    ax.plot(xs, g.acc, marker="o", ms=3, color=colour, label=label)
    ax.fill_between(xs, g.lo, g.hi, color=colour, alpha=0.12)


def _mean_sd(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return df.groupby(by, sort=True).agg(acc=("accuracy", "mean"), acc_sd=("accuracy", "std"),
                                         up=("uplink", "mean"), seeds=("seed", "count")).reset_index()


def accuracy_vs_uplink(final: pd.DataFrame, delta: int) -> plt.Figure:
    """Final accuracy against uplink cost (% of FedAvg), mean ± sd over seeds.

    FedLUAR is drawn as a line over its ``delta`` values; FedAvg and, at
    ``delta``, the ablations and top-k are single points.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    g = _mean_sd(final, ["method", "delta"]).fillna({"acc_sd": 0.0})
    luar = g[g.method == "fedluar"].sort_values("up")
    ax.errorbar(100 * luar.up, luar.acc, yerr=luar.acc_sd, marker="o", color=_COLOURS["fedluar"],
                label=FEDLUAR_LABELS["fedluar"], capsize=3)
    for _, r in luar.iterrows():
        ax.annotate(f"δ={int(r.delta)}", (100 * r.up, r.acc), textcoords="offset points", xytext=(4, 6), fontsize=8)
    for m, marker in (("fedavg", "s"), ("drop", "v"), ("uniform", "D"), ("topk", "^")):
        sel = g[(g.method == m) & ((g.delta == delta) | (m == "fedavg"))]
        ax.errorbar(100 * sel.up, sel.acc, yerr=sel.acc_sd, marker=marker, ls="none", color=_COLOURS[m],
                    label=FEDLUAR_LABELS[m] + ("" if m == "fedavg" else f", δ={delta}"), capsize=3, ms=7)
    ax.set_xlabel("uplink communication (% of FedAvg's)")
    ax.set_ylabel("final test accuracy (%)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def fedluar_curves(curves: pd.DataFrame, delta: int) -> plt.Figure:
    """Test accuracy against uplink spent so far (in FedAvg rounds), mean over seeds, at ``delta``."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for m in ("fedavg", "fedluar", "drop", "uniform", "topk"):
        sel = curves[(curves.method == m) & ((curves.delta == delta) | (m == "fedavg"))]
        _band(ax, sel, "uplink", _COLOURS[m], FEDLUAR_LABELS[m])
    ax.set_xlabel("uplink so far (rounds of FedAvg's upload)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def recycle_frequency(recycled: dict[int, list[str]], sizes: dict[str, int]) -> plt.Figure:
    """Share of rounds in which each kernel layer was recycled (one run)."""
    rounds = sorted(recycled)
    kernels = [k for k in sizes if any(k in recycled[r] for r in rounds) or k.endswith("weight")]
    share = [np.mean([k in recycled[r] for r in rounds]) for k in kernels]
    fig, ax = plt.subplots(figsize=(6.4, 0.4 * len(kernels) + 1.2))
    ax.barh([f"{k} ({sizes[k]:,})" for k in kernels], share, color=_COLOURS["fedluar"])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of rounds recycled")
    fig.tight_layout()
    return fig


def fedluar_table(final: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy and uplink cost per method and delta, mean ± sd over seeds."""
    g = _mean_sd(final, ["method", "delta"]).fillna({"acc_sd": 0.0})
    order = {m: i for i, m in enumerate(FEDLUAR_LABELS)}
    g = g.sort_values(["method", "delta"], key=lambda c: c.map(order) if c.name == "method" else c)
    return pd.DataFrame({
        "method": [FEDLUAR_LABELS[m] for m in g.method],
        "δ": ["–" if m == "fedavg" else str(int(d)) for m, d in zip(g.method, g.delta)],
        "final accuracy (%)": [f"{a:.1f} ± {s:.1f}" for a, s in zip(g.acc, g.acc_sd)],
        "uplink (% of FedAvg)": [f"{100 * u:.0f}" for u in g.up],
        "seeds": g.seeds.to_numpy(),
    })


POLICY_LABELS = {"uniform": "uniform", "power-of-choice": "Power-of-Choice (loss)", "grad-norm": "gradient norm",
                 "multi-metric": "multi-metric"}
_POLICY_COLOURS = {"uniform": "tab:gray", "power-of-choice": "tab:orange", "grad-norm": "tab:green",
                   "multi-metric": "tab:blue"}


def policy_label(policy: str, beta: float) -> str:
    """Legend label of an activation policy (``beta`` shown for multi-metric)."""
    return POLICY_LABELS[policy] + (f" (β={beta:g})" if policy == "multi-metric" else "")


def activation_curves(curves: pd.DataFrame, beta: float) -> plt.Figure:
    """Test accuracy against rounds per activation policy (mean over seeds; band: min to max), multi-metric at ``beta``."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for p in POLICY_LABELS:
        sel = curves[(curves.policy == p) & (np.isclose(curves.beta, beta) | (p != "multi-metric"))]
        _band(ax, sel, None, _POLICY_COLOURS[p], policy_label(p, beta))
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def activation_table(final: pd.DataFrame) -> pd.DataFrame:
    """Accuracy at the budget and final accuracy per policy (and beta), mean ± sd over seeds."""
    g = final.groupby(["policy", "beta"], sort=False).agg(
        b=("budget_accuracy", "mean"), b_sd=("budget_accuracy", "std"), f=("accuracy", "mean"),
        f_sd=("accuracy", "std"), seeds=("seed", "count")).reset_index().fillna({"b_sd": 0.0, "f_sd": 0.0})
    return pd.DataFrame({
        "activation": [policy_label(p, b) for p, b in zip(g.policy, g.beta)],
        "accuracy at the budget (%)": [f"{m:.1f} ± {s:.1f}" for m, s in zip(g.b, g.b_sd)],
        "final accuracy (%)": [f"{m:.1f} ± {s:.1f}" for m, s in zip(g.f, g.f_sd)],
        "seeds": g.seeds.to_numpy(),
    })


SAFA_LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "feddyn": "FedDyn", "feddc": "FedDC (daisy chain)",
               "safa": "SAFA"}
_SAFA_COLOURS = {"fedavg": "tab:gray", "fedprox": "tab:orange", "feddyn": "tab:purple", "feddc": "tab:green",
                 "safa": "tab:blue"}


def safa_curves(curves: pd.DataFrame, alphas: list[float]) -> plt.Figure:
    """Test accuracy against rounds per method, one panel per label concentration (mean; band: min to max)."""
    fig, axes = plt.subplots(1, len(alphas), figsize=(5.6 * len(alphas), 3.8), squeeze=False, sharey=True)
    for ax, alpha in zip(axes[0], alphas):
        sel_a = curves[np.isclose(curves.alpha, alpha)]
        for m in SAFA_LABELS:
            sel = sel_a[sel_a.method == m]
            if sel.empty:
                continue
            _band(ax, sel, None, _SAFA_COLOURS[m], SAFA_LABELS[m])
        ax.set_title(f"label concentration α = {alpha:g}")
        ax.set_xlabel("round")
    axes[0][0].set_ylabel("test accuracy (%)")
    axes[0][0].legend(loc="lower right", fontsize=8)  # the first panel shows every method
    fig.tight_layout()
    return fig


def safa_table(final: pd.DataFrame) -> pd.DataFrame:
    """Accuracy at the budget and final accuracy per split and method, mean ± sd over seeds."""
    order = {m: i for i, m in enumerate(SAFA_LABELS)}
    g = final.groupby(["alpha", "method"]).agg(
        b=("budget_accuracy", "mean"), b_sd=("budget_accuracy", "std"), f=("accuracy", "mean"),
        f_sd=("accuracy", "std"), seeds=("seed", "count")).reset_index().fillna({"b_sd": 0.0, "f_sd": 0.0})
    g = g.sort_values(["alpha", "method"], key=lambda c: c.map(order) if c.name == "method" else c)
    return pd.DataFrame({
        "α": [f"{a:g}" for a in g.alpha],
        "method": [SAFA_LABELS[m] for m in g.method],
        "accuracy at the budget (%)": [f"{m:.1f} ± {s:.1f}" for m, s in zip(g.b, g.b_sd)],
        "final accuracy (%)": [f"{m:.1f} ± {s:.1f}" for m, s in zip(g.f, g.f_sd)],
        "seeds": g.seeds.to_numpy(),
    })


DEFENCE_LABELS = {"none": "no defence", "norm-clipping": "norm clipping", "multi-krum": "Multi-Krum", "rfa": "RFA",
                  "flame-lite": "FLAME-lite", "fedgrad": "FedGrad"}


def defence_bars(results: pd.DataFrame) -> plt.Figure:
    """Main-task and backdoor accuracy per defence under attack (bars: mean; ticks: each seed)."""
    att = results[results.attacked]
    order = [d for d in DEFENCE_LABELS if d in set(att.defence)]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    x = np.arange(len(order))
    for off, col, colour, label in ((-0.2, "accuracy", "tab:blue", "main-task accuracy"),
                                    (0.2, "backdoor", "tab:red", "backdoor accuracy")):
        means = [att[att.defence == d][col].mean() for d in order]
        ax.bar(x + off, means, width=0.4, color=colour, alpha=0.8, label=label)
        for i, d in enumerate(order):
            ax.plot([x[i] + off] * int((att.defence == d).sum()), att[att.defence == d][col], "k_", ms=10)
    ax.set_xticks(x, [DEFENCE_LABELS[d] for d in order])
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)
    ax.legend(loc="upper center", ncols=2, fontsize=8)
    fig.tight_layout()
    return fig


def defence_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per defence: accuracy and backdoor accuracy under attack, detection rates with and without attackers."""
    rows = []
    for d in [d for d in DEFENCE_LABELS if d in set(results.defence)]:
        a = results[(results.defence == d) & results.attacked]
        c = results[(results.defence == d) & ~results.attacked]
        rows.append({
            "defence": DEFENCE_LABELS[d],
            "main-task accuracy (%)": f"{a.accuracy.mean():.1f} ± {a.accuracy.std():.1f}",
            "backdoor accuracy (%)": f"{a.backdoor.mean():.1f} ± {a.backdoor.std():.1f}",
            "attackers flagged (TPR, %)": f"{100 * a.tpr.mean():.0f}",
            "honest flagged, attacked (FPR, %)": f"{100 * a.fpr.mean():.0f}",
            "honest flagged, no attack (FPR, %)": f"{100 * c.fpr.mean():.0f}",
            "clean accuracy (%)": f"{c.accuracy.mean():.1f}",
        })
    return pd.DataFrame(rows)
