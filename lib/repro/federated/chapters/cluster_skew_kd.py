"""The CADIS chapter (cluster-skew-kd): CADIS, its two parts, an oracle and the baselines on a cluster-skewed split.

:class:`CadisRun` is one seeded run, :func:`run` executes it, :func:`sweep`
runs every method and seed, :func:`claims` gives the ledger's per-seed
values.

FedProx's ``mu`` is tuned over a grid (every value for every seed); :func:`choices`
keeps, through :mod:`repro.federated.tuning`, the value with the best mean
accuracy on the training samples no client holds, a validation set no claim reads.
CADIS runs once, at its set values, so FedProx gets at least its tuning budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import pandas as pd
from sklearn.metrics import adjusted_rand_score

from repro.federated.cadis import CADIS, ClusterEqualWeights, make_kd_client_app
from repro.federated.client import LocalSGD
from repro.federated.engine import RunSummary, seed_differences
from repro.federated.regularised import make_regularised_client_app
from repro.federated.runs import FederatedRun, execute, run_tables, summary_record
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec, planted_clusters
from repro.federated.tuning import Choice, best_settings, keep_best, validation_accuracy
from repro.federated.weighting import FlowerPolicyFedAvg

METHODS = ("fedavg", "fedprox", "cluster-agg", "kd", "cadis", "oracle-agg")
TUNING_METRIC = "validation_accuracy"
"""What FedProx's grid is tuned on: the final model's accuracy on the held-out training samples."""


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
    kd_mu, temperature, threshold
        Weight and temperature of the distillation term; CADIS's clustering threshold.
    """

    mu: float = 0.01
    kd_mu: float = 1.0
    temperature: float = 2.0
    threshold: float = 0.5

    methods: ClassVar[tuple[str, ...]] = METHODS
    tuned: ClassVar[dict[str, str]] = {"fedprox": "mu"}


def run(job: CadisRun) -> dict:
    """One run's record: :func:`repro.federated.runs.summary_record`'s fields, ``validation_accuracy`` and ``ari``.

    ``validation_accuracy`` is :func:`repro.federated.tuning.validation_accuracy` of the final model.

    ``ari`` is the adjusted Rand index of the clustering the server ends with,
    over all clients, against the planted groups (NaN for methods that do not cluster).
    """
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
        strat = SeededFedAvg(k, {**local, "kd-mu": job.kd_mu, "kd-temperature": job.temperature}, seed=job.seed)
    elif job.method in ("cluster-agg", "cadis"):
        strat = CADIS(k, local, spec.num_clients, f"fc{len(spec.hidden)}.weight", threshold=job.threshold,
                      kd_mu=job.kd_mu if job.method == "cadis" else 0.0, kd_temperature=job.temperature,
                      seed=job.seed)
    else:
        strat = FlowerPolicyFedAvg(k, local, ClusterEqualWeights(dict(enumerate(int(g) for g in groups))),
                                   seed=job.seed)
    hist = job.simulate(strat, app)
    ari = float("nan")
    if isinstance(strat, CADIS):
        ari = float(adjusted_rand_score(groups, strat.remembered_clusters(list(range(spec.num_clients)))))
    return summary_record(job, RunSummary.of(hist, spec),
                          validation_accuracy=validation_accuracy(spec, hist.final_arrays), ari=ari)


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active_clients: int, seeds: list[int],
          mus: Sequence[float], kd_mu: float, temperature: float, threshold: float, eval_every: int,
          methods: tuple[str, ...] = METHODS, engine: str = "inprocess",
          workers: int = 1, device: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method of ``methods`` for every seed, FedProx at every value of ``mus``.

    Returns
    -------
    final : DataFrame
        ``method, setting`` (FedProx's ``mu``; NaN for the others), ``seed, accuracy, budget_accuracy,
        client_acc_std, validation_accuracy, ari``.
    curves : DataFrame
        Accuracy at each evaluated round, every run.
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"parameter 'methods': must be among {METHODS}, got {sorted(unknown)}")
    grid = {"fedprox": [{"mu": float(m)} for m in mus]}
    jobs = [
        CadisRun(
            method=m,
            spec=spec,
            sgd=sgd,
            tau=tau,
            rounds=rounds,
            seed=s,
            active_clients=active_clients,
            eval_every=eval_every,
            engine=engine,
            device=device,
            kd_mu=kd_mu,
            temperature=temperature,
            threshold=threshold,
            **t,
        )
        for m in methods
        for t in grid.get(m, [{}])
        for s in seeds
    ]
    done = execute(run, jobs, workers, desc="CADIS comparison")
    return run_tables(
        done,
        ("method", "setting", "seed", "accuracy", "budget_accuracy", "client_acc_std", "validation_accuracy", "ari"),
        keys=("method", "setting", "seed"),
    )


def choices(final: pd.DataFrame) -> tuple[Choice, ...]:
    """FedProx's best ``mu`` (see :func:`repro.federated.tuning.best_settings`)."""
    return best_settings(final, TUNING_METRIC)


def claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims, FedProx at its tuned ``mu`` (needs ``fedavg``, ``fedprox``, ``cadis``)."""
    missing = {"fedavg", "fedprox", "cadis"} - set(final.method)
    if missing:
        raise ValueError(f"parameter 'methods': must include {sorted(missing)} to compute the claims")
    sel = keep_best(final, choices(final))
    cadis = sel[sel.method == "cadis"].set_index("seed")
    return {
        "acc_gain_vs_fedavg": seed_differences(sel, "cadis", "fedavg"),
        "acc_gain_vs_fedprox": seed_differences(sel, "cadis", "fedprox"),
        "cluster_ari": [float(cadis.ari[s]) for s in sorted(cadis.index)],
    }
