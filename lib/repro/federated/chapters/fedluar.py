"""The FedLUAR chapter: FedAvg, FedLUAR at several recycling depths, its ablations and top-k at equal uplink.

:class:`FedLuarRun` is one seeded run, :func:`run` executes it,
:func:`sweep` runs the comparison, :func:`claims` gives the ledger's
per-seed values; the figures and the table are the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.fedluar import FedLUAR, TopKSparsified, uplink_ratio
from repro.federated.figures import accuracy_band
from repro.federated.runs import FederatedRun, execute, run_tables
from repro.federated.task import TaskSpec, build_model
from repro.models import count_parameters

METHODS = ("fedavg", "fedluar", "drop", "uniform", "topk")


@dataclass(frozen=True, kw_only=True)
class FedLuarRun(FederatedRun):
    """One run of the comparison; the shared fields are :class:`FederatedRun`'s.

    ``method`` is ``fedavg``, ``fedluar`` (recycle, score selection), ``drop``
    (score selection, updates dropped), ``uniform`` (recycle, uniform selection)
    or ``topk`` (top-k sparsified updates with error feedback, keeping fraction ``keep``).

    Attributes
    ----------
    delta
        Layers recycled (or dropped) per round.
    keep
        Fraction of each update kept by ``topk``.
    """

    delta: int = 0
    keep: float = 1.0

    methods: ClassVar[tuple[str, ...]] = METHODS


def run(job: FedLuarRun) -> dict:
    """One run's record.

    Returns
    -------
    dict
        ``method, delta, seed, accuracy, uplink`` (fraction of FedAvg's upload),
        ``curve`` (round, accuracy, uplink so far in units of one FedAvg round's upload) and, for the
        recycling runs, ``recycled`` (round -> layers).
    """
    local, k = job.local, job.clients_per_round
    if job.method == "topk":
        strat: FedLUAR | TopKSparsified = TopKSparsified(k, local, seed=job.seed, keep=job.keep)
    else:
        d = 0 if job.method == "fedavg" else job.delta
        strat = FedLUAR(k, local, seed=job.seed, delta=d, mode="drop" if job.method == "drop" else "recycle",
                        selection="uniform" if job.method == "uniform" else "score")
    spec = job.spec
    full = sum(count_parameters(build_model(spec, seed=0)).values())
    hist = job.simulate(strat, make_client_app(spec, job.run_config))
    cum = np.cumsum(strat.uplink) / (k * full)
    curve = [(r, a, float(cum[r - 1]) if r else 0.0) for r, a in zip(hist.rounds, hist.accuracy)]
    return {"method": job.method, "delta": 0 if job.method == "fedavg" else job.delta, "seed": job.seed,
            "accuracy": hist.final_accuracy, "uplink": uplink_ratio(strat, full, job.rounds), "curve": curve,
            "recycled": getattr(strat, "recycled", None)}


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active_clients: int, seeds: list[int],
          deltas: list[int], delta: int, eval_every: int, engine: str = "inprocess", workers: int = 1,
          device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[int, int], dict[int, list[str]]]]:
    """FedAvg, FedLUAR at every ``deltas``, and at ``delta`` the drop and uniform ablations and top-k.

    The top-k runs come last: each keeps the fraction of the update that the
    FedLUAR run with the same seed at ``delta`` actually uploaded, so the two
    are compared at equal uplink.

    Returns
    -------
    final : DataFrame
        One row per run: ``method, delta, seed, accuracy, uplink``.
    curves : DataFrame
        Accuracy and uplink so far (in FedAvg rounds' worth of uploads) at each evaluation.
    recycled : dict
        ``(delta, seed) -> round -> layers`` of the FedLUAR runs.
    """
    if any(d < 1 for d in deltas):
        raise ValueError(f"parameter 'deltas': must all be >= 1, got {deltas}")
    if delta not in deltas:
        raise ValueError(f"parameter 'delta' ({delta}) must be one of deltas {deltas}")

    def job(method: str, seed: int, d: int, keep: float = 1.0) -> FedLuarRun:
        return FedLuarRun(
            method=method,
            spec=spec,
            sgd=sgd,
            tau=tau,
            rounds=rounds,
            seed=seed,
            active_clients=active_clients,
            eval_every=eval_every,
            engine=engine,
            device=device,
            delta=d,
            keep=keep,
        )

    first = [job("fedavg", s, 0) for s in seeds]
    first += [job("fedluar", s, d) for d in deltas for s in seeds]
    first += [job(m, s, delta) for m in ("drop", "uniform") for s in seeds]
    done = execute(run, first, workers, desc="FedAvg, FedLUAR and ablations")
    keep = {r["seed"]: r["uplink"] for r in done if r["method"] == "fedluar" and r["delta"] == delta}
    done += execute(run, [job("topk", s, delta, keep[s]) for s in seeds], workers, desc="top-k at FedLUAR's uplink")
    final, curves = run_tables(
        done,
        ("method", "delta", "seed", "accuracy", "uplink"),
        keys=("method", "delta", "seed"),
        curve_columns=("round", "accuracy", "uplink"),
    )
    recycled = {(r["delta"], r["seed"]): r["recycled"] for r in done if r["method"] == "fedluar"}
    return final, curves, recycled


def claims(final: pd.DataFrame, delta: int, margin: float = 1.0) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims at ``delta``.

    ``uplink_cost_pct`` joins the uplink with accuracy: a seed whose FedLUAR accuracy is more than
    ``margin`` points below FedAvg's counts as 100% (no saving at an acceptable accuracy).
    """

    def pick(method: str) -> pd.DataFrame:
        d = 0 if method == "fedavg" else delta
        return final[(final.method == method) & (final.delta == d)].set_index("seed")

    avg, luar, drop, topk = pick("fedavg"), pick("fedluar"), pick("drop"), pick("topk")
    seeds = sorted(avg.index)
    acc_drop = {s: avg.accuracy[s] - luar.accuracy[s] for s in seeds}
    return {
        "uplink_cost_pct": [100.0 * luar.uplink[s] if acc_drop[s] <= margin else 100.0 for s in seeds],
        "acc_drop_vs_fedavg": [acc_drop[s] for s in seeds],
        "acc_gain_vs_drop": [luar.accuracy[s] - drop.accuracy[s] for s in seeds],
        "acc_gain_vs_topk": [luar.accuracy[s] - topk.accuracy[s] for s in seeds],
    }


# ----- figures and table ------------------------------------------------------------------
LABELS = {
    "fedavg": "FedAvg",
    "fedluar": "FedLUAR (recycle)",
    "drop": "drop (same selection, update skipped)",
    "uniform": "recycle, uniform selection",
    "topk": "top-k sparsified updates (error feedback)",
}
_COLOURS = {"fedavg": "tab:gray", "fedluar": "tab:blue", "drop": "tab:red", "uniform": "tab:purple", "topk": "tab:orange"}


def mean_sd(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Accuracy mean and sd, uplink mean and seed count per group of ``by``."""
    return (
        df.groupby(by, sort=True)
        .agg(acc=("accuracy", "mean"), acc_sd=("accuracy", "std"), up=("uplink", "mean"), seeds=("seed", "count"))
        .reset_index()
    )


def accuracy_vs_uplink(final: pd.DataFrame, delta: int) -> plt.Figure:
    """Final accuracy against uplink cost (% of FedAvg), mean ± sd over seeds.

    FedLUAR is drawn as a line over its ``delta`` values; FedAvg and, at
    ``delta``, the ablations and top-k are single points.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    g = mean_sd(final, ["method", "delta"]).fillna({"acc_sd": 0.0})
    luar = g[g.method == "fedluar"].sort_values("up")
    ax.errorbar(
        100 * luar.up, luar.acc, yerr=luar.acc_sd, marker="o", color=_COLOURS["fedluar"], label=LABELS["fedluar"], capsize=3
    )
    for _, r in luar.iterrows():
        ax.annotate(f"δ={int(r.delta)}", (100 * r.up, r.acc), textcoords="offset points", xytext=(4, 6), fontsize=8)
    for m, marker in (("fedavg", "s"), ("drop", "v"), ("uniform", "D"), ("topk", "^")):
        sel = g[(g.method == m) & ((g.delta == delta) | (m == "fedavg"))]
        ax.errorbar(
            100 * sel.up,
            sel.acc,
            yerr=sel.acc_sd,
            marker=marker,
            ls="none",
            color=_COLOURS[m],
            label=LABELS[m] + ("" if m == "fedavg" else f", δ={delta}"),
            capsize=3,
            ms=7,
        )
    ax.set_xlabel("uplink communication (% of FedAvg's)")
    ax.set_ylabel("final test accuracy (%)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def accuracy_curves(curves: pd.DataFrame, delta: int) -> plt.Figure:
    """Test accuracy against uplink spent so far (in FedAvg rounds), mean over seeds, at ``delta``."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for m in ("fedavg", "fedluar", "drop", "uniform", "topk"):
        sel = curves[(curves.method == m) & ((curves.delta == delta) | (m == "fedavg"))]
        accuracy_band(ax, sel, "uplink", _COLOURS[m], LABELS[m])
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


def summary_table(final: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy and uplink cost per method and delta, mean ± sd over seeds."""
    g = mean_sd(final, ["method", "delta"]).fillna({"acc_sd": 0.0})
    order = {m: i for i, m in enumerate(LABELS)}
    g = g.sort_values(["method", "delta"], key=lambda c: c.map(order) if c.name == "method" else c)
    return pd.DataFrame(
        {
            "method": [LABELS[m] for m in g.method],
            "δ": ["–" if m == "fedavg" else str(int(d)) for m, d in zip(g.method, g.delta)],
            "final accuracy (%)": [f"{a:.1f} ± {s:.1f}" for a, s in zip(g.acc, g.acc_sd)],
            "uplink (% of FedAvg)": [f"{100 * u:.0f}" for u in g.up],
            "seeds": g.seeds.to_numpy(),
        }
    )
