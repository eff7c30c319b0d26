"""The FedDRL chapter: FedAvg, FedProx and FedDRL's agent on a cluster-skewed split, every client every round.

:class:`FedDrlRun` is one seeded run, :func:`run` executes it, :func:`sweep`
runs every method and seed, :func:`claims` gives the ledger's per-seed
values; the cluster-weight figure is the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import pandas as pd

from repro.federated.client import LocalSGD
from repro.federated.engine import (
    RunSummary,
    central_evaluator,
    eval_schedule,
    initial_arrays,
    run_federated,
    seed_differences,
)
from repro.federated.feddrl import DDPGWeights, make_loss_reporting_client_app
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, planted_clusters
from repro.federated.weighting import FlowerPolicyFedAvg
from repro.parallel import parallel_map

METHODS = ("fedavg", "fedprox", "feddrl")


@dataclass(frozen=True)
class FedDrlRun:
    """One run of the comparison; field names are the chapter's parameters.

    Attributes
    ----------
    method
        ``fedavg``, ``fedprox`` or ``feddrl``.
    spec, sgd, tau, rounds, seed
        Task (every client trains every round), local training, local steps, rounds, run seed.
    mu
        FedProx's proximal weight.
    beta, sigma, updates
        The agent's reward weight of the loss spread, exploration noise and gradient steps per round.
    eval_every, engine
        Evaluation period (rounds) and engine.
    """

    method: str
    spec: TaskSpec
    sgd: LocalSGD
    tau: int
    rounds: int
    seed: int
    mu: float = 0.01
    beta: float = 1.0
    sigma: float = 0.1
    updates: int = 10
    eval_every: int = 10
    engine: str = "inprocess"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"parameter 'method': must be one of {METHODS}, got {self.method!r}")


def run(job: FedDrlRun) -> dict:
    """One run's record.

    Returns
    -------
    dict
        ``method, seed, accuracy`` (final), ``budget_accuracy`` (mean of the last
        three evaluations), ``client_acc_std``, ``curve`` and, for FedDRL, the
        per-round weights of each planted cluster (``cluster_weights``).
    """
    local, k = job.sgd.config(job.tau), job.spec.num_clients
    if job.method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(k, local, seed=job.seed)
    elif job.method == "fedprox":
        strat = SeededFedProx(k, local, seed=job.seed, mu=job.mu)
    else:
        agent = DDPGWeights(k, beta=job.beta, updates=job.updates, sigma=job.sigma, seed=job.seed)
        strat = FlowerPolicyFedAvg(k, local, agent, seed=job.seed)
    hist = run_federated(strat, make_loss_reporting_client_app(job.spec, {"seed": job.seed}), k,
                         initial_arrays(job.spec, job.seed), job.rounds, central_evaluator(job.spec),
                         eval_schedule(job.rounds, job.eval_every), engine=job.engine)
    summary = RunSummary.of(hist, job.spec)
    out = {"method": job.method, "seed": job.seed, "accuracy": summary.accuracy,
           "budget_accuracy": summary.budget_accuracy, "client_acc_std": summary.client_acc_std,
           "curve": list(summary.curve)}
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
    jobs = [FedDrlRun(m, spec, sgd, tau, rounds, s, mu, beta, sigma, updates, eval_every, engine)
            for m in METHODS for s in seeds]
    done = parallel_map(run, jobs, workers if engine == "inprocess" else 1, desc="FedDRL comparison")
    cols = ("method", "seed", "accuracy", "budget_accuracy", "client_acc_std")
    final = pd.DataFrame([{c: r[c] for c in cols} for r in done])
    curves = pd.DataFrame([{"method": r["method"], "seed": r["seed"], "round": rd, "accuracy": a}
                           for r in done for rd, a in r["curve"]])
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
