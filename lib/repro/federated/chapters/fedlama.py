"""The FedLAMA chapter: FedAvg(tau'), FedAvg(phi tau') and FedLAMA(tau', phi) for the same total local steps.

:class:`FedLamaRun` is one seeded run, :func:`run` executes it,
:func:`sweep` runs every method, multiplier and seed, :func:`claims`
turns the records into the ledger's per-seed values; the figures and the
table are the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import History, central_evaluator, eval_schedule, initial_arrays, run_federated
from repro.federated.fedlama import FedLAMA
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.parallel import parallel_map

METHODS = ("fedavg", "fedavg_long", "fedlama")


@dataclass(frozen=True, kw_only=True)
class FedLamaRun:
    """One run of the comparison; field names are the chapter's parameters.

    Attributes
    ----------
    method
        ``fedavg`` (interval ``tau``), ``fedavg_long`` (interval ``phi*tau``,
        ``rounds/phi`` rounds) or ``fedlama`` (base interval ``tau``, multiplier ``phi``).
    phi, seed
        Interval multiplier and run seed (model init, sampling, mini-batches).
    spec, sgd
        Task and local training.
    tau, rounds, active_clients, eval_every
        Base interval (local steps), rounds of ``tau`` steps, clients per period, evaluation period.
    engine
        ``inprocess``, ``ray`` or ``deployment`` (see :func:`repro.federated.engine.run_federated`).
    device
        Where the clients train: ``cpu``, ``cuda`` or ``auto``.
    warmup
        FedLAMA's rounds before its intervals first adapt.
    progress
        Label of a per-round progress bar (``None``: none).
    """

    method: str
    phi: int
    seed: int
    spec: TaskSpec
    sgd: LocalSGD
    tau: int
    rounds: int
    active_clients: int
    eval_every: int
    engine: str = "inprocess"
    warmup: int = 6
    progress: str | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"parameter 'method': must be one of {METHODS}, got {self.method!r}")
        if self.rounds % self.phi:
            raise ValueError(f"parameter 'rounds' ({self.rounds}) must be a multiple of phi ({self.phi})")


def run_strategy(job: FedLamaRun) -> tuple[History, SeededFedAvg]:
    """Run ``job``; return the history (progress in rounds of ``tau`` steps) and the strategy."""
    if job.method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(job.active_clients, job.sgd.config(job.tau), seed=job.seed)
        n, sched = job.rounds, eval_schedule(job.rounds, job.eval_every)
    elif job.method == "fedavg_long":
        strat = SeededFedAvg(job.active_clients, job.sgd.config(job.tau * job.phi), seed=job.seed, resample_every=1)
        n = job.rounds // job.phi
        sched = eval_schedule(n, max(1, job.eval_every // job.phi))
    else:
        strat = FedLAMA(job.active_clients, job.sgd.config(job.tau), seed=job.seed, phi=job.phi, warmup=job.warmup)
        n, sched = job.rounds, eval_schedule(job.rounds, job.eval_every, multiple_of=job.phi)
    hist = run_federated(strat, make_client_app(job.spec, {"seed": job.seed, "device": job.device}), job.spec.num_clients,
                         initial_arrays(job.spec, job.seed), n, central_evaluator(job.spec), sched,
                         engine=job.engine, progress=job.progress)
    if job.method == "fedavg_long":  # report progress in rounds of tau steps, like the others
        hist.rounds = [r * job.phi for r in hist.rounds]
    return hist, strat


def run(job: FedLamaRun) -> dict:
    """One run's record: ``method, phi, seed, accuracy, comm``, the curve and FedLAMA's interval timeline."""
    hist, strat = run_strategy(job)
    assert strat.comm is not None
    return {"method": job.method, "phi": job.phi, "seed": job.seed, "accuracy": hist.final_accuracy,
            "comm": strat.comm.total, "curve": list(zip(hist.rounds, hist.accuracy, hist.comm)),
            "timeline": strat.timeline if isinstance(strat, FedLAMA) else None}


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, phis: list[int], rounds: int, active_clients: int,
          seeds: list[int], eval_every: int, engine: str = "inprocess", workers: int = 1, warmup: int = 6,
          device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[int, int], dict[int, dict[str, int]]]]:
    """FedAvg(tau), FedAvg(phi tau) and FedLAMA(tau, phi) for every phi and seed.

    Parameters
    ----------
    workers
        Independent runs to execute at once in separate processes; the
        results do not depend on it.  Ignored (1) with the Ray engine, which
        parallelises clients itself.
    device
        Where the clients train (``cpu``, ``cuda`` or ``auto``).

    Returns
    -------
    final : DataFrame
        One row per (method, phi, seed): final accuracy and total communication.
    curves : DataFrame
        Accuracy against communication and rounds, for every run.
    timelines : dict
        ``(phi, seed) -> round -> layer -> interval`` of the FedLAMA runs.
    """
    w = workers if engine == "inprocess" else 1
    runs = [("fedavg", 1)] + [(m, phi) for phi in phis for m in ("fedavg_long", "fedlama")]
    jobs = [
        FedLamaRun(
            method=m,
            phi=phi,
            seed=seed,
            spec=spec,
            sgd=sgd,
            tau=tau,
            rounds=rounds,
            active_clients=active_clients,
            eval_every=eval_every,
            engine=engine,
            warmup=warmup,
            progress=None if w > 1 else f"{m} phi={phi} seed={seed}",
            device=device,
        )
        for seed in seeds
        for m, phi in runs
    ]
    done = parallel_map(run, jobs, w)
    rows = [{k: d[k] for k in ("method", "phi", "seed", "accuracy", "comm")} for d in done]
    curves = [
        {"method": d["method"], "phi": d["phi"], "seed": d["seed"], "round": r, "accuracy": a, "comm": c}
        for d in done
        for r, a, c in d["curve"]
    ]
    timelines = {(d["phi"], d["seed"]): d["timeline"] for d in done if d["timeline"] is not None}
    return pd.DataFrame(rows), pd.DataFrame(curves), timelines


def claims(final: pd.DataFrame, phi: int, margin: float = 1.0) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims at multiplier ``phi``.

    ``comm_saved_within_margin`` joins communication with accuracy: a seed's saving counts only when
    FedLAMA's accuracy is at most ``margin`` points below FedAvg(tau'), and is 0 otherwise.
    """
    base = final[final.method == "fedavg"].set_index("seed")
    lama = final[(final.method == "fedlama") & (final.phi == phi)].set_index("seed")
    long = final[(final.method == "fedavg_long") & (final.phi == phi)].set_index("seed")
    seeds = sorted(base.index)
    saved = {s: 100.0 * (1 - lama.comm[s] / base.comm[s]) for s in seeds}
    drop = {s: base.accuracy[s] - lama.accuracy[s] for s in seeds}
    return {
        "acc_gain_vs_fedavg_phitau": [lama.accuracy[s] - long.accuracy[s] for s in seeds],
        "comm_saved_within_margin": [saved[s] if drop[s] <= margin else 0.0 for s in seeds],
        "comm_reduction_vs_fedavg_tau": [saved[s] for s in seeds],
        "acc_drop_vs_fedavg_tau": [drop[s] for s in seeds],
    }


# ----- figures and table ------------------------------------------------------------------
LABELS = {"fedavg": "FedAvg(τ′)", "fedavg_long": "FedAvg(φτ′)", "fedlama": "FedLAMA(τ′, φ)"}


def method_label(method: str, phi: int) -> str:
    """Label of a method at multiplier ``phi``, e.g. ``FedAvg(4τ′)`` (plain text, for legends and tables)."""
    return LABELS[method].replace("φ", str(phi))


def accuracy_vs_communication(curves: pd.DataFrame, phis: list[int]) -> Figure:
    """Test accuracy against scalars communicated, mean over seeds (band: min to max), one panel per phi."""
    fig, axes = plt.subplots(1, len(phis), figsize=(5.2 * len(phis), 3.8), squeeze=False, sharey=True)
    for ax, phi in zip(axes[0], phis):
        for method, colour in (("fedavg", "tab:gray"), ("fedavg_long", "tab:orange"), ("fedlama", "tab:blue")):
            sel = curves[(curves.method == method) & ((curves.phi == phi) | (method == "fedavg"))]
            g = sel.groupby("round").agg(
                acc=("accuracy", "mean"), lo=("accuracy", "min"), hi=("accuracy", "max"), comm=("comm", "mean")
            )
            x = g.comm.to_numpy() / 1e6
            ax.plot(x, g.acc, marker="o", ms=3, color=colour, label=method_label(method, phi))
            ax.fill_between(x, g.lo, g.hi, color=colour, alpha=0.15)
        ax.set_title(f"$\\phi$ = {phi}")
        ax.set_xlabel("parameters communicated (millions, up + down)")
    axes[0][0].set_ylabel("test accuracy (%)")
    axes[0][-1].legend(loc="lower right")
    fig.tight_layout()
    return fig


def interval_timeline(timeline: dict[int, dict[str, int]], sizes: dict[str, int] | None = None) -> Figure:
    """Heat map of each layer's aggregation interval over rounds (one FedLAMA run)."""
    rounds = sorted(timeline)
    layers = list(timeline[rounds[0]])
    grid = np.array([[timeline[r][k] for r in rounds] for k in layers])
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(layers) + 1.2))
    im = ax.imshow(
        grid,
        aspect="auto",
        cmap="Blues",
        interpolation="nearest",
        extent=(rounds[0] - 0.5, rounds[-1] + 0.5, len(layers) - 0.5, -0.5),
    )
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
        acc=("accuracy", "mean"), acc_sd=("accuracy", "std"), rel=("rel_comm", "mean"), seeds=("seed", "count")
    )
    return pd.DataFrame(
        {
            "method": [method_label(m, p) for m, p in g.index],
            "final accuracy (%)": [f"{a:.1f} ± {0 if np.isnan(s) else s:.1f}" for a, s in zip(g.acc, g.acc_sd)],
            "communication vs FedAvg(τ')": [f"{r:.2f}×" for r in g.rel],
            "seeds": g.seeds.to_numpy(),
        }
    )
