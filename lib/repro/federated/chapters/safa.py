"""The SAFA chapter: FedAvg, FedProx, FedDyn, SCAFFOLD, FedDC and SAFA on a sparse-and-scarce split (and a denser one).

FedProx's ``mu``, FedDyn's ``alpha`` and SCAFFOLD's learning rate are tuned
over grids of the same size (every value is run for every seed;
:func:`choices` keeps, through :mod:`repro.federated.tuning`, the value with
the best mean accuracy on training samples no client holds, a validation set
no claim reads), so that the baselines get at least the tuning budget SAFA
gets (SAFA runs once, at the paper's settings, with its adaptive period).

:class:`SafaRun` is one seeded run, :func:`run` executes it, :func:`sweep`
runs every method and seed, :func:`claims` gives the ledger's per-seed
values; the figures and the table are the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary
from repro.federated.feddyn import FedDyn, make_feddyn_client_app
from repro.federated.figures import accuracy_band
from repro.federated.regularised import make_regularised_client_app
from repro.federated.runs import FederatedRun, execute, run_tables, summary_record
from repro.federated.safa import SAFA, PeriodRule, feddc
from repro.federated.scaffold import SCAFFOLD, make_scaffold_client_app
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec
from repro.federated.tuning import Choice, best_settings, keep_best, validation_accuracy

METHODS = ("fedavg", "fedprox", "feddyn", "scaffold", "feddc", "safa")
FEDDYN_ALPHA = 0.01
"""FedDyn's default regulariser weight (the spec's CPU plan); the sweep tunes it over a grid."""
TUNED = {"fedprox": "mu", "feddyn": "feddyn_alpha", "scaffold": "sgd.lr"}
"""The baselines whose hyperparameter the sweep tunes, and the :class:`SafaRun` field it sets (SCAFFOLD has no
knob of its own beyond the clients' learning rate)."""
TUNED_SYMBOL = {"fedprox": "μ", "feddyn": "α", "scaffold": "lr"}
"""How the table names each tuned hyperparameter."""
BASELINES = ("fedprox", "feddyn", "scaffold")
"""The generic non-IID remedies SAFA's main claim is judged against (the best of them, tuned)."""


@dataclass(frozen=True, kw_only=True)
class SafaRun(FederatedRun):
    """One run of the comparison; the shared fields are :class:`FederatedRun`'s.

    ``method`` is ``fedavg``, ``fedprox`` (``mu``), ``feddyn`` (``feddyn_alpha``),
    ``scaffold``, ``feddc`` (``period``) or ``safa``; the task's ``alpha`` is the
    split's label concentration, and ``active_clients`` is also SAFA's number of models.

    Attributes
    ----------
    lam, mix, period
        SAFA's importance penalty, the share of its own state a model keeps at a period's end, and the
        period ``u`` (also FedDC's; SAFA's starting value when it adapts).
    period_rule
        SAFA's rule for adapting ``u`` (:class:`repro.federated.safa.PeriodRule`; ``None``: fixed ``u``).
        FedDC always keeps ``u`` fixed, as in the authors' code.
    mu
        FedProx's proximal weight.
    feddyn_alpha
        FedDyn's regulariser weight.
    """

    lam: float = 0.1
    mix: float = 0.95
    period: int = 15
    period_rule: PeriodRule | None = field(default_factory=PeriodRule)
    mu: float = 0.01
    feddyn_alpha: float = FEDDYN_ALPHA

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = TUNED


def strategy(job: SafaRun) -> SeededFedAvg:
    """The server strategy of ``job``'s method."""
    local, k = job.local, job.clients_per_round
    if job.method == "fedavg":
        return SeededFedAvg(k, local, seed=job.seed)
    if job.method == "fedprox":
        return SeededFedProx(k, local, seed=job.seed, mu=job.mu)
    if job.method == "feddyn":
        return FedDyn(k, local, num_clients=job.spec.num_clients, alpha=job.feddyn_alpha, seed=job.seed)
    if job.method == "scaffold":
        return SCAFFOLD(k, local, num_clients=job.spec.num_clients, seed=job.seed)
    if job.method == "feddc":
        return feddc(k, local, seed=job.seed, period=job.period)
    return SAFA(k, local, seed=job.seed, lam=job.lam, mix=job.mix, period=job.period, adaptive=job.period_rule)


def run(job: SafaRun) -> dict:
    """One run's record.

    :func:`repro.federated.runs.summary_record`'s fields, the split's ``alpha``, ``validation_accuracy``
    (:func:`repro.federated.tuning.validation_accuracy` of the final model) and ``periods``, the ``u`` in
    force at each round (SAFA and FedDC; empty for the others).
    """
    run_config = dict(job.run_config)
    makers = {"feddyn": make_feddyn_client_app, "scaffold": make_scaffold_client_app}
    app = makers.get(job.method, make_regularised_client_app)(job.spec, run_config)
    server = strategy(job)
    hist = job.simulate(server, app)
    periods = sorted(server.periods.items()) if isinstance(server, SAFA) else []
    return summary_record(job, RunSummary.of(hist), alpha=job.spec.alpha, periods=periods,
                          validation_accuracy=validation_accuracy(job.spec, hist.final_arrays))


@dataclass(frozen=True, kw_only=True)
class SweepTables:
    """What :func:`sweep` returns.

    Attributes
    ----------
    final
        One row per run: ``method, setting, alpha, seed, accuracy, budget_accuracy, validation_accuracy``.
    curves
        Test accuracy at each evaluated round, every run.
    periods
        The period ``u`` in force at every round of every SAFA and FedDC run (``method, alpha, seed, round,
        period``).
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    periods: pd.DataFrame


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active_clients: int, seeds: list[int], lam: float,
          mix: float, period: int, mus: Sequence[float], feddyn_alphas: Sequence[float],
          scaffold_lrs: Sequence[float], eval_every: int, period_rule: PeriodRule | None = None,
          dense_alpha: float | None = None, engine: str = "inprocess", workers: int = 1,
          device: str = "cpu") -> SweepTables:
    """Every method on ``spec``'s split, then FedAvg and SAFA again at ``dense_alpha`` (if given).

    FedProx runs at every value of ``mus``, FedDyn at every value of ``feddyn_alphas`` and SCAFFOLD at every
    client learning rate of ``scaffold_lrs``; SAFA adapts its period by ``period_rule`` (``None``: fixed).
    """
    def job(method: str, task: TaskSpec, seed: int, **tuned: float | LocalSGD) -> SafaRun:
        fields = {"sgd": sgd, **tuned}
        return SafaRun(method=method, spec=task, tau=tau, rounds=rounds, seed=seed, active_clients=active_clients,
                       eval_every=eval_every, engine=engine, device=device, lam=lam, mix=mix, period=period,
                       period_rule=period_rule, **fields)

    grids = {"fedprox": [{"mu": m} for m in mus], "feddyn": [{"feddyn_alpha": a} for a in feddyn_alphas],
             "scaffold": [{"sgd": replace(sgd, lr=lr)} for lr in scaffold_lrs]}
    jobs = [job(m, spec, s, **t) for m in METHODS for t in grids.get(m, [{}]) for s in seeds]
    if dense_alpha is not None:
        dense = replace(spec, alpha=dense_alpha)
        jobs += [job(m, dense, s) for m in ("fedavg", "safa") for s in seeds]
    done = execute(run, jobs, workers, desc="SAFA comparison")
    final, curves = run_tables(done, ("method", "setting", "alpha", "seed", "accuracy", "budget_accuracy",
                                      "validation_accuracy"), keys=("method", "setting", "alpha", "seed"))
    periods = pd.DataFrame([{"method": r["method"], "alpha": r["alpha"], "seed": r["seed"], "round": rnd,
                             "period": u} for r in done for rnd, u in r["periods"]],
                           columns=["method", "alpha", "seed", "round", "period"])
    return SweepTables(final=final, curves=curves, periods=periods)


TUNING_METRIC = "validation_accuracy"
"""What the grids are tuned on: class-balanced accuracy on the training samples no client holds (the task's
``validation_share``), never the test accuracy the claims compare."""


def choices(final: pd.DataFrame) -> tuple[Choice, ...]:
    """Each tuned baseline's best value on every split of ``final`` (see :func:`repro.federated.tuning.best_settings`)."""
    return best_settings(final, TUNING_METRIC, by=("alpha",))


def strongest_baseline(final: pd.DataFrame, alpha: float) -> str:
    """The tuned baseline of :data:`BASELINES` with the highest mean accuracy at the budget on split ``alpha``.

    SAFA's main claim is judged against it; picking it on the compared accuracy can only favour the baselines.
    """
    means = keep_best(final[np.isclose(final.alpha, alpha)], choices(final)).groupby("method").budget_accuracy.mean()
    return max(BASELINES, key=means.__getitem__)


def claims(final: pd.DataFrame, alpha: float) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims on the sparse-and-scarce split (``alpha``), baselines tuned."""
    sel = keep_best(final[np.isclose(final.alpha, alpha)], choices(final))

    def acc(method: str) -> pd.Series:
        return sel[sel.method == method].set_index("seed").budget_accuracy

    safa, avg, dc, prox = acc("safa"), acc("fedavg"), acc("feddc"), acc("fedprox")
    best = strongest_baseline(final, alpha)
    seeds = sorted(avg.index)
    return {"acc_gain_vs_fedavg": [safa[s] - avg[s] for s in seeds],
            "acc_gain_vs_best_baseline": [safa[s] - acc(best)[s] for s in seeds],
            "acc_gain_vs_feddc": [safa[s] - dc[s] for s in seeds],
            "fedprox_gain_vs_fedavg": [prox[s] - avg[s] for s in seeds]}


# ----- figures and table ------------------------------------------------------------------
LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "feddyn": "FedDyn", "scaffold": "SCAFFOLD",
          "feddc": "FedDC (daisy chain)", "safa": "SAFA"}
_COLOURS = {"fedavg": "tab:gray", "fedprox": "tab:orange", "feddyn": "tab:purple", "scaffold": "tab:brown",
            "feddc": "tab:green", "safa": "tab:blue"}


def accuracy_curves(curves: pd.DataFrame, alphas: list[float]) -> plt.Figure:
    """Test accuracy against rounds per method, one panel per label concentration (mean; band: min to max)."""
    fig, axes = plt.subplots(1, len(alphas), figsize=(5.6 * len(alphas), 3.8), squeeze=False, sharey=True)
    for ax, alpha in zip(axes[0], alphas):
        sel_a = curves[np.isclose(curves.alpha, alpha)]
        for m in LABELS:
            sel = sel_a[sel_a.method == m]
            if sel.empty:
                continue
            accuracy_band(ax, sel, None, _COLOURS[m], LABELS[m])
        ax.set_title(f"label concentration α = {alpha:g}")
        ax.set_xlabel("round")
    axes[0][0].set_ylabel("test accuracy (%)")
    axes[0][0].legend(loc="lower right", fontsize=8)  # the first panel shows every method
    fig.tight_layout()
    return fig


def period_curves(periods: pd.DataFrame, alphas: list[float]) -> plt.Figure:
    """SAFA's period ``u`` at every round, one step line per seed, one panel per label concentration.

    FedDC's fixed ``u`` is dotted; later seeds are drawn lighter and thinner over earlier ones, so that seeds with the
    same ``u`` stay visible.  The pulls fall on rounds that are multiples of the ``u`` in force.
    """
    fig, axes = plt.subplots(1, len(alphas), figsize=(5.6 * len(alphas), 3.2), squeeze=False, sharey=True)
    styles = ("-", "--", "-.", ":")
    for ax, alpha in zip(axes[0], alphas):
        sel = periods[np.isclose(periods.alpha, alpha)]
        for i, (seed, g) in enumerate(sel[sel.method == "safa"].groupby("seed")):
            ax.step(g["round"], g.period, where="post", color=plt.cm.Blues(max(0.9 - 0.25 * i, 0.3)),
                    ls=styles[i % len(styles)], lw=max(3.2 - 0.9 * i, 0.8),
                    label=f"SAFA, seed {seed}")  # lighter and thinner on top: equal seeds stay visible
        dc = sel[sel.method == "feddc"]
        if not dc.empty:
            g = dc[dc.seed == dc.seed.min()]
            ax.step(g["round"], g.period, where="post", color=_COLOURS["feddc"], ls=":", label="FedDC (fixed)")
        ax.set_title(f"label concentration α = {alpha:g}")
        ax.set_xlabel("round")
        ax.legend(loc="upper right", fontsize=8)
    axes[0][0].set_ylabel("period u (rounds)")
    fig.tight_layout()
    return fig


def summary_table(final: pd.DataFrame) -> pd.DataFrame:
    """Accuracy at the budget and final accuracy per split, method and tuned setting, mean ± sd over seeds."""
    order = {m: i for i, m in enumerate(LABELS)}
    g = final.fillna({"setting": -1.0}).groupby(["alpha", "method", "setting"]).agg(
        b=("budget_accuracy", "mean"), b_sd=("budget_accuracy", "std"), f=("accuracy", "mean"),
        f_sd=("accuracy", "std"), seeds=("seed", "count")).reset_index().fillna({"b_sd": 0.0, "f_sd": 0.0})
    g = g.sort_values(["alpha", "method"], key=lambda c: c.map(order) if c.name == "method" else c)
    return pd.DataFrame({
        "α": [f"{a:g}" for a in g.alpha],
        "method": [LABELS[m] + (f" ({TUNED_SYMBOL[m]} = {v:g})" if m in TUNED else "")
                   for m, v in zip(g.method, g.setting)],
        "accuracy at the budget (%)": [f"{m:.1f} ± {s:.1f}" for m, s in zip(g.b, g.b_sd)],
        "final accuracy (%)": [f"{m:.1f} ± {s:.1f}" for m, s in zip(g.f, g.f_sd)],
        "seeds": g.seeds.to_numpy(),
    })


