"""The CADIS chapter (cluster-skew-kd): CADIS, its two parts, an oracle and the baselines on a cluster-skewed split.

FedProx's ``mu`` is tuned over a grid (every value for every seed); :func:`choices`
keeps, through :mod:`repro.federated.tuning`, the value with the best mean
accuracy on the training samples no client holds, a validation set no claim reads.
CADIS runs once, at its set values, so FedProx gets at least its tuning budget.

:class:`Params` holds the chapter's parameters; :func:`run` runs one
:class:`CadisRun` per method, setting and seed through :func:`run_one` into a
:class:`CadisRecord` and returns the :class:`Results`; :func:`claims` gives the
ledger's evidence.  CADIS itself follows the authors' code
(:mod:`repro.federated.cadis`); the threshold figure is the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, cast

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from sklearn.metrics import adjusted_rand_score

from repro.federated.cadis import CADIS, ClusterEqualWeights, ClusterRule, cluster_labels, cluster_matrix, make_kd_client_app
from repro.federated.engine import RunSummary, seed_differences
from repro.federated.planted_params import PlantedClusterParams
from repro.federated.regularised import make_regularised_client_app
from repro.federated.runs import FederatedRun, RunRecord, curves_frame, execute, records_frame
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import majority_accuracy, planted_clusters
from repro.federated.tuning import Choice, best_settings, chosen, keep_best, validation_accuracy
from repro.federated.weighting import FlowerPolicyFedAvg
from repro.params import require
from repro.results import Evidence

METHODS = ("fedavg", "fedprox", "cluster-agg", "kd", "cadis", "oracle-agg")
NEEDED = ("fedavg", "fedprox", "cadis")
"""The methods the claims compare."""
TUNING_METRIC = "validation_accuracy"
"""What FedProx's grid is tuned on: the final model's accuracy on the held-out training samples."""
THRESHOLDS = tuple(np.round(np.arange(0.05, 1.0, 0.05), 2))
"""The thresholds at which :func:`threshold_figure` re-reads the final similarity memory."""


@dataclass(frozen=True, kw_only=True)
class Params(PlantedClusterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``cluster-skew-kd.yaml``).

    The task, local SGD and FedProx grid fields, their checks and builders are :class:`PlantedClusterParams`'s.
    """

    active_clients: int
    rounds: int
    kd_mu: float
    threshold: float
    threshold_growth: bool
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    eval_every: int
    engine: str
    device: str
    workers: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts (the shared ones first)."""
        super().checks()
        require(self.active_clients <= sum(self.cluster_sizes), self, ("active_clients", "cluster_sizes"),
                "active_clients must not exceed the number of clients (the sum of cluster_sizes)")
        require(all(m in self.methods for m in NEEDED), self, "methods",
                f"methods must include {', '.join(NEEDED)} (the claims compare them)")

    def rule(self) -> ClusterRule:
        """CADIS's threshold rule."""
        return ClusterRule(threshold=self.threshold, grow=self.threshold_growth)


@dataclass(frozen=True, kw_only=True)
class CadisRun(FederatedRun):
    """One run of the comparison and ablation; the shared fields are :class:`FederatedRun`'s.

    ``method`` is ``fedavg``, ``fedprox``, ``cluster-agg`` (CADIS's aggregation
    alone), ``kd`` (FedAvg with the KD client), ``cadis`` (both) or
    ``oracle-agg`` (cluster-equal aggregation over the planted clusters).

    Attributes
    ----------
    mu
        FedProx's proximal weight.
    kd_mu
        Weight of the relational distillation term.
    rule
        CADIS's threshold rule.
    """

    mu: float = 0.01
    kd_mu: float = 1.0
    rule: ClusterRule = field(default_factory=ClusterRule)

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {"fedprox": "mu"}


@dataclass(frozen=True, kw_only=True)
class CadisRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields and these.

    Attributes
    ----------
    validation_accuracy
        :func:`repro.federated.tuning.validation_accuracy` of the final model.
    ari
        Adjusted Rand index of the server's final groups, over all clients, against the planted ones
        (NaN for methods that do not cluster).
    similarity
        For the clustering methods, the final scaled mean similarity of every pair of clients.
    """

    validation_accuracy: float
    ari: float = float("nan")
    similarity: tuple[tuple[float, ...], ...] = ()


def run_one(job: CadisRun) -> CadisRecord:
    """Run ``job``."""
    spec, local, k = job.spec, job.local, job.clients_per_round
    groups = planted_clusters(spec)
    run_config = dict(job.run_config)
    app = make_kd_client_app(spec, run_config)
    if job.method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(k, local, seed=job.seed)
    elif job.method == "fedprox":
        strat = SeededFedProx(k, local, seed=job.seed, mu=job.mu)
        app = make_regularised_client_app(spec, run_config)
    elif job.method == "kd":
        strat = SeededFedAvg(k, {**local, "kd-mu": job.kd_mu}, seed=job.seed)
    elif job.method in ("cluster-agg", "cadis"):
        strat = CADIS(k, local, spec.num_clients, f"fc{len(spec.hidden)}.weight", rule=job.rule,
                      kd_mu=job.kd_mu if job.method == "cadis" else 0.0, seed=job.seed)
    else:
        strat = FlowerPolicyFedAvg(k, local, ClusterEqualWeights(dict(enumerate(int(g) for g in groups))),
                                   seed=job.seed)
    hist = job.simulate(strat, app)
    ari, similarity = float("nan"), cast(tuple[tuple[float, ...], ...], ())
    if isinstance(strat, CADIS):
        ari = float(adjusted_rand_score(groups, strat.final_clusters()))
        similarity = tuple(tuple(float(v) for v in row) for row in strat.scaled_similarity())
    assert hist.final_arrays is not None
    return CadisRecord.of(job, RunSummary.of(hist, spec), validation_accuracy=validation_accuracy(spec, hist.final_arrays),
                          ari=ari, similarity=similarity)


def jobs(params: Params) -> list[CadisRun]:
    """Every method of ``params.methods`` for every seed, FedProx at every value of ``mus``."""
    spec, sgd, rule = params.spec(), params.sgd(), params.rule()
    grid = {"fedprox": [float(m) for m in params.mus]}
    return [CadisRun(method=m, spec=spec, sgd=sgd, tau=params.tau, rounds=params.rounds, seed=s,
                     active_clients=params.active_clients, eval_every=params.eval_every, engine=params.engine,
                     device=params.device, kd_mu=params.kd_mu, rule=rule, mu=mu)
            for m in params.methods for mu in grid.get(m, [0.0]) for s in params.seeds]


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the comparison produced.

    Attributes
    ----------
    final
        ``method, setting`` (FedProx's ``mu``; NaN for the others), ``seed, accuracy, budget_accuracy,
        client_acc_std, validation_accuracy, ari``, one row per run.
    curves
        Accuracy at each evaluated round, every run.
    tuned
        FedProx's chosen ``mu`` (:func:`choices`).
    similarity
        ``seed -> `` CADIS's final scaled similarity of every pair of clients.
    planted
        Every client's planted cluster.
    trivial
        Test accuracy of always predicting the majority class (percent).
    threshold
        The threshold CADIS started from (the claims' ARI is read at the one it ended with).
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    tuned: tuple[Choice, ...]
    similarity: dict[int, np.ndarray]
    planted: np.ndarray
    trivial: float
    threshold: float

    @property
    def best_mu(self) -> float:
        """FedProx's tuned proximal weight."""
        return chosen(self.tuned)["fedprox"]

    def selected(self, frame: pd.DataFrame | None = None) -> pd.DataFrame:
        """``frame`` (default: the final table) with FedProx at its tuned ``mu`` only."""
        return keep_best(self.final if frame is None else frame, self.tuned)


def run(params: Params) -> Results:
    """Every method for every seed, FedProx tuned over ``mus`` on the held-out validation set."""
    done = execute(run_one, jobs(params), params.workers, desc="CADIS comparison")
    final = records_frame(done, ("method", "setting", "seed", "accuracy", "budget_accuracy", "client_acc_std",
                                 "validation_accuracy", "ari"))
    spec = params.spec()
    return Results(final=final, curves=curves_frame(done, ("method", "setting", "seed")), tuned=choices(final),
                   similarity={r.seed: np.array(r.similarity) for r in done if r.method == "cadis"},
                   planted=planted_clusters(spec), trivial=majority_accuracy(spec), threshold=params.threshold)


def choices(final: pd.DataFrame) -> tuple[Choice, ...]:
    """FedProx's best ``mu`` (see :func:`repro.federated.tuning.best_settings`)."""
    return best_settings(final, TUNING_METRIC)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence, FedProx at its tuned ``mu``, each accuracy claim with its arms' accuracy per seed."""
    missing = set(NEEDED) - set(results.final.method)
    if missing:
        raise ValueError(f"parameter 'methods': must include {sorted(missing)} to compute the claims")
    sel = results.selected()

    def arms(*methods: str) -> dict[str, list[float]]:
        return {m: [float(v) for v in sel[sel.method == m].sort_values("seed").budget_accuracy] for m in methods}

    cadis = sel[sel.method == "cadis"].set_index("seed")
    return {
        "acc_gain_vs_fedavg": Evidence(values=seed_differences(sel, "cadis", "fedavg"), arms=arms("cadis", "fedavg"),
                                       trivial=results.trivial),
        "acc_gain_vs_fedprox": Evidence(values=seed_differences(sel, "cadis", "fedprox"),
                                        arms=arms("cadis", "fedprox"), trivial=results.trivial),
        "cluster_ari": [float(cadis.ari[s]) for s in sorted(cadis.index)],
    }


def ari_at(results: Results, threshold: float) -> list[float]:
    """Per seed, the ARI of the groups CADIS's final similarity memory gives at ``threshold`` (no new run)."""
    return [float(adjusted_rand_score(results.planted, cluster_labels(cluster_matrix(s, threshold))))
            for _, s in sorted(results.similarity.items())]


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


def component_gains(results: Results) -> dict[str, float]:
    """Mean accuracy at the budget of every method against FedAvg's (points), FedProx at its tuned ``mu``."""
    acc = results.selected().groupby("method").budget_accuracy.mean()
    return {m: float(acc[m] - acc["fedavg"]) for m in acc.index if m != "fedavg"}


def threshold_figure(results: Results) -> Figure:
    """ARI of the groups the final similarity memory gives at every threshold (mean over seeds and each seed).

    The threshold is a constant of the method (the authors start at 0.975 and grow it to 0.985); the
    memory a run ends with is re-read at every threshold, without new runs, so the figure shows
    where the clustering holds on this task.
    """
    fig, ax = plt.subplots(figsize=(6.0, 3.2))
    values = np.array([ari_at(results, t) for t in THRESHOLDS])
    ax.plot(THRESHOLDS, values.mean(axis=1), marker="o", color="black", label="mean over seeds")
    for col in values.T:
        ax.plot(THRESHOLDS, col, color="0.6", lw=0.8)
    ax.axvline(results.threshold, color="#1565c0", ls=":", lw=1, label=f"the run's threshold {results.threshold:g}")
    ax.set_xlabel("threshold on the scaled mean similarity")
    ax.set_ylabel("ARI against the planted clusters")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
