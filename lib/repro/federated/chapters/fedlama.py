"""The FedLAMA chapter: FedAvg(tau'), FedAvg(phi tau') and FedLAMA(tau', phi) for the same total local steps.

:class:`Params` holds the chapter's parameters; :func:`run` runs one
:class:`FedLamaRun` per method, multiplier and seed through :func:`run_one`
into a :class:`FedLamaRecord` and returns the :class:`Results`;
:func:`claims` gives the ledger's evidence.  The figures and the table are
the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import History, central_evaluator, eval_schedule, initial_arrays
from repro.federated.fedlama import FedLAMA
from repro.federated.figures import within_margin_figure
from repro.federated.runs import FederatedRun, RunRecord, Simulation, curves_frame, execute, records_frame
from repro.federated.strategies import SeededFedAvg, StepDecay
from repro.federated.task import TaskSpec, available_train, majority_accuracy
from repro.params import ChapterParams, require
from repro.registry import load_registry
from repro.results import Evidence

METHODS = ("fedavg", "fedavg_long", "fedlama")
CHAPTER = "fedlama"


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``fedlama.yaml``)."""

    dataset: str
    n_train: int
    num_clients: int
    active_clients: int
    alpha: float
    model: str
    hidden: tuple[int, ...]
    tau: int
    phis: tuple[int, ...]
    rounds: int
    batch_size: int
    lr: float
    momentum: float
    seeds: tuple[int, ...]
    engine: str
    device: str
    workers: int
    eval_every: int
    warmup: int
    lr_decay_at: tuple[float, ...]
    lr_decay: float
    weight_decay: float

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(all(self.rounds % phi == 0 for phi in self.phis), self, ("rounds", "phis"),
                "rounds must be a multiple of every phi (FedAvg(phi tau') runs rounds / phi rounds)")
        require(self.active_clients <= self.num_clients, self, ("active_clients", "num_clients"),
                "active_clients must not exceed num_clients")
        require(available_train(self.dataset, self.n_train) >= 2 * self.num_clients, self,
                ("dataset", "n_train", "num_clients"), "the split needs at least 2 training samples per client")
        require(min(self.phis) >= 2, self, "phis", "the multipliers must be at least 2 (phi = 1 is FedAvg(tau') itself)")
        require(self.warmup < self.rounds, self, ("warmup", "rounds"),
                "FedLAMA's warm-up must end before the last round, or its intervals never adapt")
        require(all(0 < f < 1 and abs(f * self.rounds - round(f * self.rounds)) < 1e-9 for f in self.lr_decay_at), self,
                ("lr_decay_at", "rounds"), "every decay point must be a share of the rounds in (0, 1) that falls on a round")

    def spec(self) -> TaskSpec:
        """The task: the dataset split over the clients by a Dirichlet label skew."""
        return TaskSpec(dataset=self.dataset, num_clients=self.num_clients, scheme="dirichlet", alpha=self.alpha,
                        hidden=self.hidden, model=self.model, n_train=self.n_train, data_seed=0)

    def sgd(self) -> LocalSGD:
        """The clients' local SGD."""
        return LocalSGD(batch_size=self.batch_size, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    def lr_schedule(self) -> StepDecay | None:
        """The step decay at the shares ``lr_decay_at`` of the rounds (``None`` without decay points)."""
        if not self.lr_decay_at:
            return None
        return StepDecay(milestones=tuple(sorted(round(f * self.rounds) for f in self.lr_decay_at)), factor=self.lr_decay)


@dataclass(frozen=True, kw_only=True)
class FedLamaRun(FederatedRun):
    """One run of the comparison; the shared fields are :class:`FederatedRun`'s (``rounds`` of ``tau`` steps).

    ``method`` is ``fedavg`` (interval ``tau``), ``fedavg_long`` (interval ``phi*tau``,
    ``rounds/phi`` rounds) or ``fedlama`` (base interval ``tau``, multiplier ``phi``).

    Attributes
    ----------
    phi
        Interval multiplier (1 for ``fedavg``).
    warmup
        FedLAMA's rounds before its intervals first adapt.
    lr_decay
        The learning-rate schedule in rounds of ``tau`` steps (``None``: constant); FedAvg(phi tau') drops its rate
        in its first round that starts at or after a milestone's step (the same step when ``phi`` divides it).
    """

    phi: int = 1
    warmup: int = 6
    lr_decay: StepDecay | None = None

    methods: ClassVar[tuple[str, ...]] = METHODS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rounds % self.phi:
            raise ValueError(f"parameter 'rounds' ({self.rounds}) must be a multiple of phi ({self.phi})")

    def long_decay(self) -> StepDecay | None:
        """The schedule in rounds of ``phi * tau`` steps (FedAvg(phi tau')'s rounds)."""
        if self.lr_decay is None:
            return None
        return StepDecay(milestones=tuple(-(-m // self.phi) for m in self.lr_decay.milestones), factor=self.lr_decay.factor)


@dataclass(frozen=True, kw_only=True)
class FedLamaRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields (``curve``: round, accuracy, scalars communicated) and these.

    Attributes
    ----------
    phi
        The multiplier (1 for FedAvg(tau')).
    comm
        Scalars communicated, up and down.
    timeline
        FedLAMA only: round -> layer -> interval.
    """

    phi: int = 1
    comm: int = 0
    timeline: dict[int, dict[str, int]] = field(default_factory=dict)


def run_strategy(job: FedLamaRun) -> tuple[History, SeededFedAvg]:
    """Run ``job``; return the history (progress in rounds of ``tau`` steps) and the strategy."""
    spec, k = job.spec, job.clients_per_round
    if job.method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(k, job.sgd.config(job.tau), seed=job.seed, lr_decay=job.lr_decay)
        simulation = job.simulation()
    elif job.method == "fedavg_long":  # rounds / phi rounds of phi * tau steps, evaluated on the same grid
        strat = SeededFedAvg(k, job.sgd.config(job.tau * job.phi), seed=job.seed, resample_every=1,
                             lr_decay=job.long_decay())
        n = job.rounds // job.phi
        simulation = Simulation(num_clients=spec.num_clients, initial=initial_arrays(spec, job.seed),
                                evaluate=central_evaluator(spec), num_rounds=n,
                                eval_rounds=tuple(eval_schedule(n, max(1, job.eval_every // job.phi))))
    else:
        strat = FedLAMA(k, job.sgd.config(job.tau), seed=job.seed, phi=job.phi, warmup=job.warmup,
                        lr_decay=job.lr_decay)
        simulation = job.simulation(multiple_of=job.phi)
    hist = job.play(strat, make_client_app(spec, job.run_config), simulation)
    if job.method == "fedavg_long":  # report progress in rounds of tau steps, like the others
        hist.rounds = [r * job.phi for r in hist.rounds]
    return hist, strat


def run_one(job: FedLamaRun) -> FedLamaRecord:
    """Run ``job``: final accuracy, communication, the curve and FedLAMA's interval timeline."""
    hist, strat = run_strategy(job)
    assert strat.comm is not None
    return FedLamaRecord(method=job.method, seed=job.seed, accuracy=hist.final_accuracy, phi=job.phi,
                         comm=int(strat.comm.total),
                         curve=tuple((float(r), float(a), float(c)) for r, a, c in zip(hist.rounds, hist.accuracy, hist.comm)),
                         timeline=dict(strat.timeline) if isinstance(strat, FedLAMA) else {})


def jobs(params: Params) -> list[FedLamaRun]:
    """FedAvg(tau), and FedAvg(phi tau) and FedLAMA(tau, phi) for every phi, every seed."""
    spec, sgd = params.spec(), params.sgd()
    progress = params.workers == 1 and params.engine == "inprocess"
    pairs = [("fedavg", 1)] + [(m, phi) for phi in params.phis for m in ("fedavg_long", "fedlama")]
    return [FedLamaRun(method=m, phi=phi, seed=s, spec=spec, sgd=sgd, tau=params.tau, rounds=params.rounds,
                       active_clients=params.active_clients, eval_every=params.eval_every, engine=params.engine,
                       warmup=params.warmup, device=params.device, lr_decay=params.lr_schedule(),
                       progress=f"{m} phi={phi} seed={s}" if progress else None)
            for s in params.seeds for m, phi in pairs]


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the comparison produced.

    Attributes
    ----------
    final
        One row per (method, phi, seed): final accuracy and total communication.
    curves
        Accuracy against communication and rounds, for every run.
    timelines
        ``(phi, seed) -> round -> layer -> interval`` of the FedLAMA runs.
    phis
        The multipliers run.
    trivial
        Test accuracy of always predicting the majority class (percent).
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    timelines: dict[tuple[int, int], dict[int, dict[str, int]]]
    phis: tuple[int, ...]
    trivial: float

    @property
    def largest_phi(self) -> int:
        """The largest multiplier, where the accuracy claims are read."""
        return max(self.phis)


def run(params: Params) -> Results:
    """FedAvg(tau), FedAvg(phi tau) and FedLAMA(tau, phi) for every phi and seed (``workers`` at a time)."""
    done = execute(run_one, jobs(params), params.workers, desc="FedLAMA comparison")
    return Results(final=records_frame(done, ("method", "phi", "seed", "accuracy", "comm")),
                   curves=curves_frame(done, ("method", "phi", "seed"), ("round", "accuracy", "comm")),
                   timelines={(r.phi, r.seed): r.timeline for r in done if r.method == "fedlama"},
                   phis=params.phis, trivial=majority_accuracy(params.spec()))


def accuracy_margin() -> float:
    """The margin of "without significantly harming accuracy": the null value of ``acc_drop_vs_fedavg_tau``."""
    return load_registry().get(CHAPTER).claim("acc_drop_vs_fedavg_tau").null_value


def _pick(final: pd.DataFrame, method: str, phi: int) -> pd.DataFrame:
    sel = final[final.method == method]
    return (sel if method == "fedavg" else sel[sel.phi == phi]).set_index("seed")


def saving_within_margin(results: Results, margin: float) -> list[float]:
    """Per seed, FedLAMA's largest communication saving over the multipliers at which it stays within ``margin``.

    The saving (percent of FedAvg(tau')'s communication) of a multiplier counts only when FedLAMA's accuracy
    there is at most ``margin`` points below FedAvg(tau')'s, else it is 0; the seed's value is the largest
    over the multipliers run, as the paper's "up to" is the largest over its configurations.
    """
    base = _pick(results.final, "fedavg", 1)
    out = []
    for s in sorted(base.index):
        saved = [0.0]
        for phi in results.phis:
            lama = _pick(results.final, "fedlama", phi)
            if base.accuracy[s] - lama.accuracy[s] <= margin:
                saved.append(100.0 * (1 - lama.comm[s] / base.comm[s]))
        out.append(max(saved))
    return out


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence: the accuracy claims at the largest phi, the saving the largest over the phis."""
    phi, final = results.largest_phi, results.final
    base, long, lama = (_pick(final, m, phi) for m in METHODS)
    seeds = sorted(base.index)

    def arms(**frames: pd.DataFrame) -> dict[str, list[float]]:
        return {k: [float(f.accuracy[s]) for s in seeds] for k, f in frames.items()}

    every = {"fedavg": base, **{f"fedlama_phi{p}": _pick(final, "fedlama", p) for p in results.phis}}
    return {
        "acc_gain_vs_fedavg_phitau": Evidence(values=[lama.accuracy[s] - long.accuracy[s] for s in seeds],
                                              arms=arms(fedlama=lama, fedavg_long=long), trivial=results.trivial),
        "comm_saved_within_margin": Evidence(values=saving_within_margin(results, accuracy_margin()),
                                             arms=arms(**every), trivial=results.trivial),
        "comm_reduction_vs_fedavg_tau": [100.0 * (1 - lama.comm[s] / base.comm[s]) for s in seeds],
        "acc_drop_vs_fedavg_tau": Evidence(values=[base.accuracy[s] - lama.accuracy[s] for s in seeds],
                                           arms=arms(fedavg=base, fedlama=lama), trivial=results.trivial),
    }


def margin_figure(results: Results) -> Figure:
    """``comm_saved_within_margin`` against the accuracy margin it is computed with (``acc_drop``'s sweep)."""
    margins = load_registry().get(CHAPTER).claim("acc_drop_vs_fedavg_tau").null_sweep
    sweep = pd.DataFrame([{"margin": m, "value": v} for m in margins for v in saving_within_margin(results, m)])
    return within_margin_figure(sweep, chosen=accuracy_margin(), ylabel="communication saved (%)",
                                xlabel="accuracy margin of 'without significantly harming accuracy' (points)")


# ----- figures and table ------------------------------------------------------------------
LABELS = {"fedavg": "FedAvg(τ′)", "fedavg_long": "FedAvg(φτ′)", "fedlama": "FedLAMA(τ′, φ)"}


def method_label(method: str, phi: int) -> str:
    """Label of a method at multiplier ``phi``, e.g. ``FedAvg(4τ′)`` (plain text, for legends and tables)."""
    return LABELS[method].replace("φ", str(phi))


def accuracy_vs_communication(results: Results) -> Figure:
    """Test accuracy against scalars communicated, mean over seeds (band: min to max), one panel per phi."""
    curves, phis = results.curves, results.phis
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


def interval_timeline(results: Results, sizes: dict[str, int] | None = None) -> Figure:
    """Heat map of each layer's aggregation interval over rounds (the first seed's FedLAMA run at the largest phi)."""
    timeline = results.timelines[(results.largest_phi, int(results.final.seed.min()))]
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


def summary_table(results: Results) -> pd.DataFrame:
    """Final accuracy and communication relative to FedAvg(tau'), mean ± sd over seeds, per method and phi."""
    final = results.final
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
