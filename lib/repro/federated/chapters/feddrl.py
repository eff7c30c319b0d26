"""The FedDRL chapter: FedAvg, FedProx and FedDRL's agent on a cluster-skewed split, every client every round.

FedProx's ``mu`` is tuned over a grid (every value for every seed); :func:`choices`
keeps, through :mod:`repro.federated.tuning`, the value with the best mean
accuracy on the training samples no client holds, a validation set no claim reads.
FedDRL runs once, at its set values, so FedProx gets at least its tuning budget.

:class:`Params` holds the chapter's parameters; :func:`run` runs one
:class:`FedDrlRun` per method, setting and seed through :func:`run_one` into a
:class:`FedDrlRecord` and returns the :class:`Results`; :func:`claims` gives
the ledger's evidence; the cluster-weight figure is the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.engine import RunSummary, seed_differences
from repro.federated.feddrl import DDPGSettings, DDPGWeights, make_loss_reporting_client_app
from repro.federated.planted_params import PlantedClusterParams
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import majority_accuracy, planted_clusters
from repro.federated.tuning import Choice, best_settings, chosen, keep_best, validation_accuracy
from repro.federated.weighting import FlowerPolicyFedAvg
from repro.results import Evidence

METHODS = ("fedavg", "fedprox", "feddrl")
TUNING_METRIC = "validation_accuracy"
"""What FedProx's grid is tuned on: the final model's accuracy on the held-out training samples."""


@dataclass(frozen=True, kw_only=True)
class Params(PlantedClusterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``feddrl.yaml``).

    The task, local SGD and FedProx grid fields, their checks and builders are :class:`PlantedClusterParams`'s.
    """

    rounds: int
    beta: float
    sigma: float
    updates: int
    seeds: tuple[int, ...]
    eval_every: int
    engine: str
    device: str
    workers: int


@dataclass(frozen=True, kw_only=True)
class FedDrlRun(FederatedRun):
    """One run of the comparison (every client every round); the shared fields are :class:`FederatedRun`'s.

    Attributes
    ----------
    mu
        FedProx's proximal weight.
    beta, sigma, updates
        The agent's reward weight of the loss spread, exploration noise and gradient steps per round.
    """

    mu: float = 0.01
    beta: float = 1.0
    sigma: float = 0.1
    updates: int = 10

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {"fedprox": "mu"}


@dataclass(frozen=True, kw_only=True)
class FedDrlRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields and these.

    Attributes
    ----------
    validation_accuracy
        :func:`repro.federated.tuning.validation_accuracy` of the final model.
    cluster_weights
        FedDRL only: ``(round, weight of planted cluster 0, weight of cluster 1, ...)`` per round.
    """

    validation_accuracy: float
    cluster_weights: tuple[tuple[float, ...], ...] = ()


def run_one(job: FedDrlRun) -> FedDrlRecord:
    """Run ``job`` with every client every round."""
    local, k = job.local, job.clients_per_round
    if job.method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(k, local, seed=job.seed)
    elif job.method == "fedprox":
        strat = SeededFedProx(k, local, seed=job.seed, mu=job.mu)
    else:
        agent = DDPGWeights(k, beta=job.beta, updates=job.updates, seed=job.seed,
                            settings=DDPGSettings(sigma=job.sigma))
        strat = FlowerPolicyFedAvg(k, local, agent, seed=job.seed)
    hist = job.simulate(strat, make_loss_reporting_client_app(job.spec, job.run_config))
    weights: tuple[tuple[float, ...], ...] = ()
    if isinstance(strat, FlowerPolicyFedAvg):
        groups = planted_clusters(job.spec)
        weights = tuple((float(rd), *(float(sum(w[p] for p in w if groups[p] == g)) for g in range(groups.max() + 1)))
                        for rd, w in sorted(strat.weights_used.items()))
    assert hist.final_arrays is not None
    return FedDrlRecord.of(job, RunSummary.of(hist, job.spec),
                           validation_accuracy=validation_accuracy(job.spec, hist.final_arrays), cluster_weights=weights)


def jobs(params: Params) -> list[FedDrlRun]:
    """FedAvg, FedProx at every value of ``mus``, and FedDRL, for every seed."""
    spec, sgd = params.spec(), params.sgd()
    grid = {"fedprox": [float(m) for m in params.mus]}
    return [FedDrlRun(method=m, spec=spec, sgd=sgd, tau=params.tau, rounds=params.rounds, seed=s,
                      eval_every=params.eval_every, engine=params.engine, device=params.device, beta=params.beta,
                      sigma=params.sigma, updates=params.updates, mu=mu)
            for m in METHODS for mu in grid.get(m, [0.0]) for s in params.seeds]


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the comparison produced.

    Attributes
    ----------
    final
        ``method, setting`` (FedProx's ``mu``; NaN for the others), ``seed, accuracy, budget_accuracy,
        client_acc_std, validation_accuracy``, one row per run.
    curves
        Accuracy at each evaluated round, every run.
    weights
        FedDRL's total weight per planted cluster (``seed, round, cluster, weight``).
    tuned
        FedProx's chosen ``mu`` (:func:`choices`).
    cluster_sizes
        Clients per planted cluster.
    trivial
        Test accuracy of always predicting the majority class (percent).
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    weights: pd.DataFrame
    tuned: tuple[Choice, ...]
    cluster_sizes: tuple[int, ...]
    trivial: float

    @property
    def best_mu(self) -> float:
        """FedProx's tuned proximal weight."""
        return chosen(self.tuned)["fedprox"]

    def selected(self, frame: pd.DataFrame | None = None) -> pd.DataFrame:
        """``frame`` (default: the final table) with FedProx at its tuned ``mu`` only."""
        return keep_best(self.final if frame is None else frame, self.tuned)


def run(params: Params) -> Results:
    """Every method for every seed, FedProx tuned over ``mus`` on the held-out validation set."""
    done = execute(run_one, jobs(params), params.workers, desc="FedDRL comparison")
    final = records_frame(done, ("method", "setting", "seed", "accuracy", "budget_accuracy", "client_acc_std",
                                 "validation_accuracy"))
    weights = pd.DataFrame([{"seed": r.seed, "round": row[0], "cluster": g, "weight": w}
                            for r in done if r.method == "feddrl" for row in r.cluster_weights
                            for g, w in enumerate(row[1:])])
    return Results(final=final, curves=curves_frame(done, ("method", "setting", "seed")), weights=weights,
                   tuned=choices(final), cluster_sizes=params.cluster_sizes, trivial=majority_accuracy(params.spec()))


def choices(final: pd.DataFrame) -> tuple[Choice, ...]:
    """FedProx's best ``mu`` (see :func:`repro.federated.tuning.best_settings`)."""
    return best_settings(final, TUNING_METRIC)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence, FedProx at its tuned ``mu``, with each compared arm's accuracy at the budget per seed."""
    sel = results.selected()

    def arms(*methods: str) -> dict[str, list[float]]:
        return {m: [float(v) for v in sel[sel.method == m].sort_values("seed").budget_accuracy] for m in methods}

    def evidence(values: list[float], *methods: str) -> Evidence:
        return Evidence(values=values, arms=arms(*methods), trivial=results.trivial)

    return {
        "acc_gain_vs_fedavg": evidence(seed_differences(sel, "feddrl", "fedavg"), "feddrl", "fedavg"),
        "acc_gain_vs_fedprox": evidence(seed_differences(sel, "feddrl", "fedprox"), "feddrl", "fedprox"),
        "client_std_change_vs_fedavg": evidence(seed_differences(sel, "feddrl", "fedavg", "client_acc_std"),
                                                "feddrl", "fedavg"),
    }


def tuning_text(results: Results) -> str:
    """FedProx's validation accuracy per ``mu``, the winner and its test accuracy against FedAvg, in words."""
    final, best = results.final, results.best_mu
    grid = final[final.method == "fedprox"].groupby("setting")[["validation_accuracy", "budget_accuracy"]].mean()
    avg = final[final.method == "fedavg"].budget_accuracy.mean()
    return (f"**Tuning.** FedProx's mean validation accuracy over {final.seed.nunique()} seed(s), per μ: "
            + ", ".join(f"μ = {m:g}: {v:.1f}%" for m, v in grid.validation_accuracy.items())
            + f". **μ = {best:g} won**; its test accuracy at the budget was {grid.budget_accuracy[best]:.1f}% "
            f"(the best μ on test would have been {grid.budget_accuracy.idxmax():g}), "
            f"{grid.budget_accuracy[best] - avg:+.1f} points against FedAvg's.")


def largest_cluster_weight(results: Results) -> tuple[int, float, float]:
    """The largest planted cluster, the agent's mean weight for it in the last round, and FedAvg's weight for it."""
    w = results.weights
    last = w[w["round"] == w["round"].max()].groupby("cluster").weight.mean()
    big = int(np.argmax(results.cluster_sizes))
    return big, float(last[big]), results.cluster_sizes[big] / sum(results.cluster_sizes)


def cluster_weight_plot(results: Results) -> Figure:
    """FedDRL's total aggregation weight per planted cluster over the rounds, against the clients' share."""
    weights, sizes = results.weights, results.cluster_sizes
    fig, ax = plt.subplots(figsize=(7, 3.0))
    for g, d in weights.groupby("cluster"):
        s = d.groupby("round").weight.mean()
        (line,) = ax.plot(s.index, s.values, label=f"cluster {g} ({sizes[g]} clients)")
        ax.axhline(sizes[g] / sum(sizes), color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("round")
    ax.set_ylabel("total weight")
    ax.set_title("FedDRL's weight per planted cluster (dotted: FedAvg's)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
