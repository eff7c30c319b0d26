"""The FedDRL chapter: FedAvg, FedProx and FedDRL's agent on a cluster-skewed split, every client every round.

FedProx's ``mu`` is tuned over a grid (every value for every seed); :func:`choices`
keeps, through :mod:`repro.federated.tuning`, the value with the best mean
accuracy on the training samples no client holds, a validation set no claim reads.
FedDRL runs once, at its set values, so FedProx gets at least its tuning budget.

:class:`FedDrlRun` is one seeded run, :func:`run` executes it, :func:`sweep`
runs every method and seed, :func:`claims` gives the ledger's per-seed
values; the cluster-weight figure is the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary, seed_differences
from repro.federated.feddrl import DDPGWeights, make_loss_reporting_client_app
from repro.federated.runs import FederatedRun, execute, run_tables, summary_record
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, planted_clusters
from repro.federated.tuning import Choice, best_settings, keep_best, validation_accuracy
from repro.federated.weighting import FlowerPolicyFedAvg

METHODS = ("fedavg", "fedprox", "feddrl")
TUNING_METRIC = "validation_accuracy"
"""What FedProx's grid is tuned on: the final model's accuracy on the held-out training samples."""


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


def run(job: FedDrlRun) -> dict:
    """One run's record.

    Returns
    -------
    dict
        :func:`repro.federated.runs.summary_record`'s fields, ``validation_accuracy``
        (:func:`repro.federated.tuning.validation_accuracy` of the final model) and, for FedDRL,
        the per-round weights of each planted cluster (``cluster_weights``).
    """
    local, k = job.local, job.clients_per_round
    if job.method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(k, local, seed=job.seed)
    elif job.method == "fedprox":
        strat = SeededFedProx(k, local, seed=job.seed, mu=job.mu)
    else:
        agent = DDPGWeights(k, beta=job.beta, updates=job.updates, sigma=job.sigma, seed=job.seed)
        strat = FlowerPolicyFedAvg(k, local, agent, seed=job.seed)
    hist = job.simulate(strat, make_loss_reporting_client_app(job.spec, job.run_config))
    out = summary_record(job, RunSummary.of(hist, job.spec),
                         validation_accuracy=validation_accuracy(job.spec, hist.final_arrays))
    if isinstance(strat, FlowerPolicyFedAvg):
        groups = planted_clusters(job.spec)
        out["cluster_weights"] = [(rd, *(sum(w[p] for p in w if groups[p] == g) for g in range(groups.max() + 1)))
                                  for rd, w in sorted(strat.weights_used.items())]
    return out


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, seeds: list[int], mus: Sequence[float], beta: float,
          sigma: float, updates: int, eval_every: int, engine: str = "inprocess",
          workers: int = 1, device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """FedAvg, FedProx at every value of ``mus``, and FedDRL, for every seed.

    Returns
    -------
    final : DataFrame
        ``method, setting`` (FedProx's ``mu``; NaN for the others), ``seed, accuracy, budget_accuracy,
        client_acc_std, validation_accuracy``.
    curves : DataFrame
        Accuracy at each evaluated round, every run.
    weights : DataFrame
        FedDRL's total weight per planted cluster, per round and seed.
    """
    grid = {"fedprox": [{"mu": float(m)} for m in mus]}
    jobs = [
        FedDrlRun(
            method=m,
            spec=spec,
            sgd=sgd,
            tau=tau,
            rounds=rounds,
            seed=s,
            eval_every=eval_every,
            engine=engine,
            device=device,
            beta=beta,
            sigma=sigma,
            updates=updates,
            **t,
        )
        for m in METHODS
        for t in grid.get(m, [{}])
        for s in seeds
    ]
    done = execute(run, jobs, workers, desc="FedDRL comparison")
    final, curves = run_tables(
        done,
        ("method", "setting", "seed", "accuracy", "budget_accuracy", "client_acc_std", "validation_accuracy"),
        keys=("method", "setting", "seed"),
    )
    weights = pd.DataFrame(
        [
            {"seed": r["seed"], "round": row[0], "cluster": g, "weight": w}
            for r in done
            if r["method"] == "feddrl"
            for row in r["cluster_weights"]
            for g, w in enumerate(row[1:])
        ]
    )
    return final, curves, weights


def choices(final: pd.DataFrame) -> tuple[Choice, ...]:
    """FedProx's best ``mu`` (see :func:`repro.federated.tuning.best_settings`)."""
    return best_settings(final, TUNING_METRIC)


def claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims, FedProx at its tuned ``mu``."""
    sel = keep_best(final, choices(final))
    return {
        "acc_gain_vs_fedavg": seed_differences(sel, "feddrl", "fedavg"),
        "acc_gain_vs_fedprox": seed_differences(sel, "feddrl", "fedprox"),
        "client_std_change_vs_fedavg": seed_differences(sel, "feddrl", "fedavg", "client_acc_std"),
    }


def cluster_weight_plot(weights: pd.DataFrame, sizes: tuple[int, ...]) -> Figure:
    """FedDRL's total aggregation weight per planted cluster over the rounds, against the clients' share."""
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
