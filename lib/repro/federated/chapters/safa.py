"""The SAFA chapter: FedAvg, FedProx, FedDyn, SCAFFOLD, FedDC and SAFA on a sparse-and-scarce split (and a denser one).

:class:`Params` holds the chapter's parameters.  :func:`run` first tunes
FedProx's ``mu``, FedDyn's ``alpha`` and SCAFFOLD's learning rate over grids
of the same size on a tuning seed (:func:`tune`: the value with the best
accuracy on training samples no client holds, a validation set no claim
reads; :mod:`repro.federated.tuning`), so that the baselines get at least the
tuning budget SAFA gets (SAFA runs once, at the paper's settings, with its
adaptive period).  Then every method runs at its chosen setting for every
seed on the sparse-and-scarce split, and FedAvg and SAFA again on the denser
one (one :class:`SafaRun` each, through :func:`run_one` into a
:class:`SafaRecord`); :func:`claims` gives the ledger's evidence.  The figures
and the table are the chapter's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary
from repro.federated.feddyn import FedDyn, make_feddyn_client_app
from repro.federated.figures import accuracy_band
from repro.federated.regularised import make_regularised_client_app
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.safa import SAFA, PeriodRule, feddc
from repro.federated.scaffold import SCAFFOLD, make_scaffold_client_app
from repro.federated.seed_tuning import tuning_summary as tuning_summary_table
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, majority_accuracy
from repro.federated.tuning import Choice, best_settings, chosen, validation_accuracy
from repro.params import ChapterParams, require
from repro.results import Evidence

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
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``safa.yaml``)."""

    dataset: str
    num_clients: int
    active_clients: int
    alpha: float
    dense_alpha: float
    usage: float
    hidden: tuple[int, ...]
    tau: int
    rounds: int
    batch_size: int
    lr: float
    lam: float
    mix: float
    period: int
    adaptive: bool
    retain: int
    validation_share: float
    mus: tuple[float, ...]
    feddyn_alphas: tuple[float, ...]
    scaffold_lrs: tuple[float, ...]
    tuning_seed: int
    seeds: tuple[int, ...]
    eval_every: int
    engine: str
    device: str
    workers: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(self.active_clients <= self.num_clients, self, ("active_clients", "num_clients"),
                "active_clients must not exceed num_clients")
        require(all(self.lr * m * self.tau >= 0.1 for m in self.mus), self, ("mus", "lr", "tau"),
                "every mu in mus must have lr * mu * tau >= 0.1: a smaller proximal weight pulls the local model back "
                "by under about 5% of a round's drift, which leaves FedProx practically FedAvg (and the FedProx "
                "claim true by construction)")
        require(len(self.mus) == len(self.feddyn_alphas) == len(self.scaffold_lrs), self,
                ("mus", "feddyn_alphas", "scaffold_lrs"),
                "every tuned baseline gets a grid of the same size (the same tuning budget)")
        require(any(math.isclose(v, self.lr) for v in self.scaffold_lrs), self, ("scaffold_lrs", "lr"),
                "scaffold_lrs must hold the shared lr, so that tuning can only help SCAFFOLD")
        require(self.alpha != self.dense_alpha, self, ("alpha", "dense_alpha"),
                "the denser split must differ from the sparse-and-scarce one")
        require(self.tuning_seed not in self.seeds, self, ("tuning_seed", "seeds"), "the tuning seed must not be a reported seed")

    def spec(self, alpha: float | None = None) -> TaskSpec:
        """The sparse-and-scarce split (at ``alpha``, by default the chapter's), a validation share held out."""
        return TaskSpec(dataset=self.dataset, num_clients=self.num_clients, scheme="sparse_and_scarce",
                        alpha=self.alpha if alpha is None else alpha, usage=self.usage, hidden=self.hidden, model="mlp",
                        data_seed=0, validation_share=self.validation_share)

    def rule(self) -> PeriodRule | None:
        """SAFA's rule for adapting its period (``None`` when ``adaptive`` is off)."""
        return PeriodRule(retain=self.retain) if self.adaptive else None

    def grids(self) -> dict[str, list[dict[str, Any]]]:
        """Each tuned baseline's grid, as the :class:`SafaRun` fields each value sets."""
        sgd = LocalSGD(batch_size=self.batch_size, lr=self.lr, momentum=0.0)
        return {"fedprox": [{"mu": m} for m in self.mus], "feddyn": [{"feddyn_alpha": a} for a in self.feddyn_alphas],
                "scaffold": [{"sgd": replace(sgd, lr=v)} for v in self.scaffold_lrs]}

    def job(self, method: str, seed: int, alpha: float | None = None, **setting: Any) -> SafaRun:
        """One run of ``method`` on the split at ``alpha`` with the tuned ``setting`` (field -> value)."""
        fields: dict[str, Any] = {"sgd": LocalSGD(batch_size=self.batch_size, lr=self.lr, momentum=0.0), **setting}
        return SafaRun(method=method, spec=self.spec(alpha), tau=self.tau, rounds=self.rounds, seed=seed,
                       active_clients=self.active_clients, eval_every=self.eval_every, engine=self.engine,
                       device=self.device, lam=self.lam, mix=self.mix, period=self.period, period_rule=self.rule(),
                       progress=None if self.workers > 1 else f"{method} {setting} seed={seed}", **fields)


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


@dataclass(frozen=True, kw_only=True)
class SafaRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields and these.

    Attributes
    ----------
    alpha
        The split's label concentration.
    validation_accuracy
        Class-balanced accuracy of the final model on the held-out training samples (what tuning reads).
    periods
        ``(round, u)``: the period in force at each round (SAFA and FedDC; empty for the others).
    """

    alpha: float = math.nan
    validation_accuracy: float = math.nan
    periods: tuple[tuple[int, int], ...] = ()


RECORD_COLUMNS = ("method", "setting", "alpha", "seed", "accuracy", "budget_accuracy", "validation_accuracy")


def run_one(job: SafaRun) -> SafaRecord:
    """Run ``job`` and record it (``periods``: the ``u`` in force at each round, SAFA and FedDC only)."""
    makers = {"feddyn": make_feddyn_client_app, "scaffold": make_scaffold_client_app}
    app = makers.get(job.method, make_regularised_client_app)(job.spec, job.run_config)
    server = strategy(job)
    hist = job.simulate(server, app)
    assert hist.final_arrays is not None
    periods = tuple(sorted(server.periods.items())) if isinstance(server, SAFA) else ()
    return SafaRecord.of(job, RunSummary.of(hist), alpha=job.spec.alpha, periods=periods,
                         validation_accuracy=validation_accuracy(job.spec, hist.final_arrays))


TUNING_METRIC = "validation_accuracy"
"""What the grids are tuned on: class-balanced accuracy on the training samples no client holds (the task's
``validation_share``), never the test accuracy the claims compare."""


def tune(params: Params) -> tuple[tuple[Choice, ...], pd.DataFrame]:
    """Every value of each tuned baseline's grid on the tuning seed (sparse split); each keeps its best on validation.

    Returns
    -------
    choices : tuple of Choice
        One per tuned baseline (:func:`repro.federated.tuning.best_settings`).
    runs : DataFrame
        The tuning runs (:data:`RECORD_COLUMNS`).
    """
    jobs = [params.job(m, params.tuning_seed, **setting) for m, grid in params.grids().items() for setting in grid]
    runs = records_frame(execute(run_one, jobs, params.workers, desc="SAFA tuning"), RECORD_COLUMNS)
    return best_settings(runs, TUNING_METRIC), runs


def chosen_setting(params: Params, choices: tuple[Choice, ...], method: str) -> dict[str, Any]:
    """The :class:`SafaRun` fields of ``method``'s chosen value (empty for an untuned method)."""
    if method not in TUNED:
        return {}
    value = chosen(choices)[method]
    return next(g for g in params.grids()[method] if math.isclose(params.job(method, 0, **g).setting, value))


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the chapter's comparison produced.

    Attributes
    ----------
    final
        One row per reported run: :data:`RECORD_COLUMNS`.
    curves
        Test accuracy at each evaluated round, every reported run (``method, alpha, seed, round, accuracy``).
    periods
        The period ``u`` in force at every round of every SAFA and FedDC run (``method, alpha, seed, round,
        period``).
    choices, tuning
        The value each tuned baseline kept, and the tuning runs.
    alpha, dense_alpha
        The two splits' label concentrations.
    trivial
        Test accuracy of always predicting the majority class (percent): the task's trivial level.
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    periods: pd.DataFrame
    choices: tuple[Choice, ...]
    tuning: pd.DataFrame
    alpha: float
    dense_alpha: float
    trivial: float


def run(params: Params) -> Results:
    """Tune the baselines, then every method at its choice on the sparse split and FedAvg and SAFA on the denser one."""
    choices, tuning = tune(params)
    jobs = [params.job(m, s, **chosen_setting(params, choices, m)) for m in METHODS for s in params.seeds]
    jobs += [params.job(m, s, params.dense_alpha) for m in ("fedavg", "safa") for s in params.seeds]
    done = execute(run_one, jobs, params.workers, desc="SAFA comparison")
    periods = pd.DataFrame([{"method": r.method, "alpha": r.alpha, "seed": r.seed, "round": rnd, "period": u}
                            for r in done for rnd, u in r.periods], columns=["method", "alpha", "seed", "round", "period"])
    return Results(final=records_frame(done, RECORD_COLUMNS), curves=curves_frame(done, ("method", "alpha", "seed")),
                   periods=periods, choices=choices, tuning=tuning, alpha=params.alpha, dense_alpha=params.dense_alpha,
                   trivial=majority_accuracy(params.spec()))


def accuracy_at(results: Results, alpha: float) -> dict[str, pd.Series]:
    """Every method's accuracy at the budget on the split at ``alpha``, indexed by seed."""
    f = results.final[np.isclose(results.final.alpha, alpha)]
    return {m: g.set_index("seed").budget_accuracy for m, g in f.groupby("method")}


def strongest_baseline(results: Results) -> str:
    """The tuned baseline of :data:`BASELINES` with the highest mean accuracy at the budget on the sparse split.

    SAFA's main claim is judged against it; picking it on the compared accuracy can only favour the baselines.
    """
    acc = accuracy_at(results, results.alpha)
    return max(BASELINES, key=lambda m: float(acc[m].mean()))


def gain_over_fedavg(results: Results) -> pd.DataFrame:
    """SAFA minus FedAvg per seed on each split (points), and per seed the largest of them (``max``)."""
    table = pd.DataFrame({f"α = {a:g}": accuracy_at(results, a)["safa"] - accuracy_at(results, a)["fedavg"]
                          for a in (results.alpha, results.dense_alpha)})
    return table.assign(max=table.max(axis=1))


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence on the sparse-and-scarce split, baselines tuned, every arm with its accuracy per seed.

    The paper's 17.86% is "up to": a maximum over its configurations.  ``acc_gain_vs_fedavg`` is therefore, per
    seed, the largest of SAFA's gains over FedAvg across the chapter's configurations (the two splits), and its
    arms are both methods on both splits.
    """
    sparse, dense = accuracy_at(results, results.alpha), accuracy_at(results, results.dense_alpha)
    seeds = sorted(sparse["fedavg"].index)
    best = strongest_baseline(results)

    def arms(**series: pd.Series) -> dict[str, list[float]]:
        return {name: [float(v[s]) for s in seeds] for name, v in series.items()}

    def gain(a: pd.Series, b: pd.Series, **arm: pd.Series) -> Evidence:
        return Evidence(values=[float(a[s] - b[s]) for s in seeds], arms=arms(**arm), trivial=results.trivial)

    top = gain_over_fedavg(results)["max"]
    return {
        "acc_gain_vs_fedavg": Evidence(values=[float(top[s]) for s in seeds], trivial=results.trivial,
                                       arms=arms(safa=sparse["safa"], fedavg=sparse["fedavg"], safa_dense=dense["safa"],
                                                 fedavg_dense=dense["fedavg"])),
        "acc_gain_vs_best_baseline": gain(sparse["safa"], sparse[best], safa=sparse["safa"], **{best: sparse[best]}),
        "acc_gain_vs_feddc": gain(sparse["safa"], sparse["feddc"], safa=sparse["safa"], feddc=sparse["feddc"]),
        "fedprox_gain_vs_fedavg": gain(sparse["fedprox"], sparse["fedavg"], fedprox=sparse["fedprox"],
                                       fedavg=sparse["fedavg"]),
    }


def final_periods(results: Results) -> pd.Series:
    """SAFA's period at the last round of each seed on the sparse split."""
    p = results.periods
    runs = p[(p.method == "safa") & np.isclose(p.alpha, results.alpha)]
    return runs.sort_values("round").groupby("seed").period.last()


def tuning_summary(results: Results) -> pd.DataFrame:
    """Per tuned baseline: validation and test accuracy at every grid value on the tuning seed, and the choice."""
    return tuning_summary_table(results.tuning, results.choices, LABELS, TUNING_METRIC)


# ----- figures and table ------------------------------------------------------------------
LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "feddyn": "FedDyn", "scaffold": "SCAFFOLD",
          "feddc": "FedDC (daisy chain)", "safa": "SAFA"}
_COLOURS = {"fedavg": "tab:gray", "fedprox": "tab:orange", "feddyn": "tab:purple", "scaffold": "tab:brown",
            "feddc": "tab:green", "safa": "tab:blue"}


def accuracy_curves(results: Results) -> Figure:
    """Test accuracy against rounds per method at its chosen setting, one panel per split (mean; band: min to max)."""
    curves, alphas = results.curves, [results.alpha, results.dense_alpha]
    fig, axes = plt.subplots(1, len(alphas), figsize=(5.6 * len(alphas), 3.8), squeeze=False, sharey=True)
    for ax, alpha in zip(axes[0], alphas):
        sel_a = curves[np.isclose(curves.alpha, alpha)]
        for m in LABELS:
            sel = sel_a[sel_a.method == m]
            if sel.empty:
                continue
            accuracy_band(ax, sel, None, _COLOURS[m], LABELS[m])
        ax.axhline(results.trivial, color="k", lw=0.8, ls=":")
        ax.set_title(f"label concentration α = {alpha:g}")
        ax.set_xlabel("round")
    axes[0][0].set_ylabel("test accuracy (%)")
    axes[0][0].legend(loc="lower right", fontsize=8)  # the first panel shows every method
    fig.tight_layout()
    return fig


def period_curves(results: Results) -> Figure:
    """SAFA's period ``u`` at every round, one step line per seed, one panel per label concentration.

    FedDC's fixed ``u`` is dotted; later seeds are drawn lighter and thinner over earlier ones, so that seeds with the
    same ``u`` stay visible.  The pulls fall on rounds that are multiples of the ``u`` in force.
    """
    periods, alphas = results.periods, [results.alpha, results.dense_alpha]
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


def summary_table(results: Results) -> pd.DataFrame:
    """Accuracy at the budget and final accuracy per split, method and tuned setting, mean ± sd over seeds."""
    final = results.final
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


