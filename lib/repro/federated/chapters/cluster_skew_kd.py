"""The CADIS chapter (cluster-skew-kd): CADIS, its two parts, an oracle and the baselines on a cluster-skewed split.

:class:`CadisRun` is one seeded run, :func:`run` executes it, :func:`sweep`
runs every method and seed, :func:`claims` gives the ledger's per-seed
values.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from sklearn.metrics import adjusted_rand_score

from repro.federated.cadis import CADIS, ClusterEqualWeights, make_kd_client_app
from repro.federated.client import LocalSGD
from repro.federated.engine import (
    RunSummary,
    central_evaluator,
    eval_schedule,
    initial_arrays,
    run_federated,
    seed_differences,
)
from repro.federated.regularised import make_regularised_client_app
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, planted_clusters
from repro.federated.weighting import FlowerPolicyFedAvg
from repro.parallel import parallel_map

METHODS = ("fedavg", "fedprox", "cluster-agg", "kd", "cadis", "oracle-agg")


@dataclass(frozen=True)
class CadisRun:
    """One run of the comparison and ablation; field names are the chapter's parameters.

    Attributes
    ----------
    method
        ``fedavg``, ``fedprox``, ``cluster-agg`` (CADIS's aggregation alone),
        ``kd`` (FedAvg with the KD client), ``cadis`` (both) or ``oracle-agg``
        (cluster-equal aggregation over the planted clusters).
    spec, sgd, tau, rounds, active_clients, seed
        Task, local training, local steps, rounds, clients per round, run seed.
    mu
        FedProx's proximal weight.
    kd_mu, temperature, threshold
        Weight and temperature of the distillation term; CADIS's clustering threshold.
    eval_every, engine
        Evaluation period (rounds) and engine.
    """

    method: str
    spec: TaskSpec
    sgd: LocalSGD
    tau: int
    rounds: int
    active_clients: int
    seed: int
    mu: float = 0.01
    kd_mu: float = 1.0
    temperature: float = 2.0
    threshold: float = 0.5
    eval_every: int = 10
    engine: str = "inprocess"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"parameter 'methods': must be among {METHODS}, got {self.method!r}")


def run(job: CadisRun) -> dict:
    """One run's record: the same fields as the FedDRL chapter's run record, plus ``ari``.

    ``ari`` is the adjusted Rand index of the clustering the server ends with,
    over all clients, against the planted groups (NaN for methods that do not cluster).
    """
    spec = job.spec
    local, last = job.sgd.config(job.tau), f"fc{len(spec.hidden)}.weight"
    groups = planted_clusters(spec)
    run_config = {"seed": job.seed}
    app = make_kd_client_app(spec, run_config)
    if job.method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(job.active_clients, local, seed=job.seed)
    elif job.method == "fedprox":
        strat = SeededFedProx(job.active_clients, local, seed=job.seed, mu=job.mu)
        app = make_regularised_client_app(spec, run_config)
    elif job.method == "kd":
        strat = SeededFedAvg(job.active_clients, {**local, "kd-mu": job.kd_mu, "kd-temperature": job.temperature},
                             seed=job.seed)
    elif job.method in ("cluster-agg", "cadis"):
        strat = CADIS(job.active_clients, local, spec.num_clients, last, threshold=job.threshold,
                      kd_mu=job.kd_mu if job.method == "cadis" else 0.0, kd_temperature=job.temperature,
                      seed=job.seed)
    else:
        strat = FlowerPolicyFedAvg(job.active_clients, local,
                                   ClusterEqualWeights(dict(enumerate(int(g) for g in groups))), seed=job.seed)
    hist = run_federated(strat, app, spec.num_clients, initial_arrays(spec, job.seed), job.rounds,
                         central_evaluator(spec), eval_schedule(job.rounds, job.eval_every), engine=job.engine)
    summary = RunSummary.of(hist, spec)
    ari = float("nan")
    if isinstance(strat, CADIS):
        ari = float(adjusted_rand_score(groups, strat.remembered_clusters(list(range(spec.num_clients)))))
    return {"method": job.method, "seed": job.seed, "accuracy": summary.accuracy,
            "budget_accuracy": summary.budget_accuracy, "client_acc_std": summary.client_acc_std,
            "curve": list(summary.curve), "ari": ari}


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active_clients: int, seeds: list[int], mu: float,
          kd_mu: float, temperature: float, threshold: float, eval_every: int,
          methods: tuple[str, ...] = METHODS, engine: str = "inprocess",
          workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method of ``methods`` for every seed.

    Returns
    -------
    final : DataFrame
        ``method, seed, accuracy, budget_accuracy, client_acc_std, ari``.
    curves : DataFrame
        Accuracy at each evaluated round.
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"parameter 'methods': must be among {METHODS}, got {sorted(unknown)}")
    jobs = [CadisRun(m, spec, sgd, tau, rounds, active_clients, s, mu, kd_mu, temperature, threshold, eval_every,
                     engine) for m in methods for s in seeds]
    done = parallel_map(run, jobs, workers if engine == "inprocess" else 1, desc="CADIS comparison")
    cols = ("method", "seed", "accuracy", "budget_accuracy", "client_acc_std", "ari")
    final = pd.DataFrame([{c: r[c] for c in cols} for r in done])
    curves = pd.DataFrame([{"method": r["method"], "seed": r["seed"], "round": rd, "accuracy": a}
                           for r in done for rd, a in r["curve"]])
    return final, curves


def claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims (needs the ``fedavg``, ``fedprox`` and ``cadis`` runs)."""
    missing = {"fedavg", "fedprox", "cadis"} - set(final.method)
    if missing:
        raise ValueError(f"parameter 'methods': must include {sorted(missing)} to compute the claims")
    cadis = final[final.method == "cadis"].set_index("seed")
    return {"acc_gain_vs_fedavg": seed_differences(final, "cadis", "fedavg"),
            "acc_gain_vs_fedprox": seed_differences(final, "cadis", "fedprox"),
            "cluster_ari": [float(cadis.ari[s]) for s in sorted(cadis.index)]}
