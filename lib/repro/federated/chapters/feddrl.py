"""The FedDRL chapter: FedAvg, FedProx and FedDRL's agent on a cluster-skewed split, every client every round.

:class:`FedDrlRun` is one seeded run, :func:`run` executes it, :func:`sweep`
runs every method and seed, :func:`claims` gives the ledger's per-seed
values; the cluster-weight figure is the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import pandas as pd

from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary, seed_differences
from repro.federated.feddrl import DDPGWeights, make_loss_reporting_client_app
from repro.federated.runs import FederatedRun, execute, run_tables, summary_record
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, planted_clusters
from repro.federated.weighting import FlowerPolicyFedAvg

METHODS = ("fedavg", "fedprox", "feddrl")


@dataclass(frozen=True)
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


def run(job: FedDrlRun) -> dict:
    """One run's record.

    Returns
    -------
    dict
        :func:`repro.federated.runs.summary_record`'s fields and, for FedDRL, the
        per-round weights of each planted cluster (``cluster_weights``).
    """
    local, k = job.local, job.clients_per_round
    if job.method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(k, local, seed=job.seed)
    elif job.method == "fedprox":
        strat = SeededFedProx(k, local, seed=job.seed, mu=job.mu)
    else:
        agent = DDPGWeights(k, beta=job.beta, updates=job.updates, sigma=job.sigma, seed=job.seed)
        strat = FlowerPolicyFedAvg(k, local, agent, seed=job.seed)
    hist = job.simulate(strat, make_loss_reporting_client_app(job.spec, {"seed": job.seed}))
    out = summary_record(job, RunSummary.of(hist, job.spec))
    if isinstance(strat, FlowerPolicyFedAvg):
        groups = planted_clusters(job.spec)
        out["cluster_weights"] = [(rd, *(sum(w[p] for p in w if groups[p] == g) for g in range(groups.max() + 1)))
                                  for rd, w in sorted(strat.weights_used.items())]
    return out


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, seeds: list[int], mu: float, beta: float,
          sigma: float, updates: int, eval_every: int, engine: str = "inprocess",
          workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """FedAvg, FedProx and FedDRL for every seed.

    Returns
    -------
    final : DataFrame
        ``method, seed, accuracy, budget_accuracy, client_acc_std``.
    curves : DataFrame
        Accuracy at each evaluated round.
    weights : DataFrame
        FedDRL's total weight per planted cluster, per round and seed.
    """
    jobs = [FedDrlRun(m, spec, sgd, tau, rounds, s, eval_every=eval_every, engine=engine, mu=mu, beta=beta,
                      sigma=sigma, updates=updates) for m in METHODS for s in seeds]
    done = execute(run, jobs, workers, desc="FedDRL comparison")
    final, curves = run_tables(done, ("method", "seed", "accuracy", "budget_accuracy", "client_acc_std"))
    weights = pd.DataFrame([{"seed": r["seed"], "round": row[0], "cluster": g, "weight": w}
                            for r in done if r["method"] == "feddrl" for row in r["cluster_weights"]
                            for g, w in enumerate(row[1:])])
    return final, curves, weights


def claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims."""
    return {"acc_gain_vs_fedavg": seed_differences(final, "feddrl", "fedavg"),
            "acc_gain_vs_fedprox": seed_differences(final, "feddrl", "fedprox"),
            "client_std_change_vs_fedavg": seed_differences(final, "feddrl", "fedavg", "client_acc_std")}


def cluster_weight_plot(weights: pd.DataFrame, sizes: tuple[int, ...]) -> plt.Figure:
    """FedDRL's total aggregation weight per planted cluster over the rounds, against the clients' share."""
    fig, ax = plt.subplots(figsize=(7, 3.0))
    for g, d in weights.groupby("cluster"):
        s = d.groupby("round").weight.mean()
        line, = ax.plot(s.index, s.values, label=f"cluster {g} ({sizes[g]} clients)")
        ax.axhline(sizes[g] / sum(sizes), color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("round")
    ax.set_ylabel("total weight")
    ax.set_title("FedDRL's weight per planted cluster (dotted: FedAvg's)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
