"""Drivers and figures of the cluster-skew chapters (FedDRL, CADIS).

Each ``*_run`` is one seeded federated run returning a record; each
``*_sweep`` spreads the methods and seeds over worker processes with
:func:`repro.fl.runs.parallel_map`; each ``*_claims`` turns the records into
the per-seed values the chapter's ledger records.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.metrics import adjusted_rand_score

from repro.fl.engine import run_federated
from repro.fl.experiments import LocalSGD, central_evaluator, eval_schedule, initial_arrays
from repro.fl.runs import parallel_map
from repro.fl.strategies import SeededFedAvg
from repro.fl.task import TaskSpec, load_task_data


def planted_clusters(spec: TaskSpec) -> np.ndarray:
    """The planted group of every client of a ``cluster_skew`` task."""
    if spec.scheme != "cluster_skew":
        raise ValueError(f"spec.scheme must be 'cluster_skew', got {spec.scheme!r}")
    return np.repeat(np.arange(len(spec.cluster_sizes)), spec.cluster_sizes)


def per_client_accuracy(spec: TaskSpec, arrays) -> np.ndarray:
    """Test accuracy (percent) of a global model on each client's label distribution.

    Client ``i``'s accuracy is the test accuracy per class weighted by the
    client's own training label histogram, i.e. how well the model serves that client.
    """
    import torch

    from repro.fl.client import from_arrayrecord
    from repro.fl.task import build_model
    from repro.models import set_weights
    from repro.partition import label_histogram

    ds, parts = load_task_data(spec)
    model = build_model(spec, seed=0)
    set_weights(model, from_arrayrecord(arrays))
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(ds.x_test)).argmax(1).numpy()
    per_class = np.array([(pred[ds.y_test == c] == c).mean() if (ds.y_test == c).any() else 0.0
                          for c in range(ds.num_classes)])
    h = label_histogram(ds.y_train, list(parts), ds.num_classes).astype(float)
    return 100.0 * (h @ per_class) / h.sum(1)


def _summary(method: str, seed: int, hist, spec: TaskSpec) -> dict:
    client_acc = per_client_accuracy(spec, hist.final_arrays)
    return {"method": method, "seed": seed, "accuracy": hist.final_accuracy,
            "budget_accuracy": float(np.mean(hist.accuracy[-3:])), "client_acc_std": float(client_acc.std()),
            "curve": list(zip(hist.rounds, hist.accuracy))}


# ----- FedDRL ------------------------------------------------------------------------
FEDDRL_METHODS = ("fedavg", "fedprox", "feddrl")


def feddrl_run(method: str, spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, seed: int, mu: float = 0.01,
               beta: float = 1.0, sigma: float = 0.1, updates: int = 10, eval_every: int = 10,
               engine: str = "inprocess") -> dict:
    """One run of FedDRL's comparison (every client every round, as the agent needs).

    Returns
    -------
    dict
        ``method, seed, accuracy`` (final), ``budget_accuracy`` (mean of the last
        three evaluations), ``client_acc_std``, ``curve`` and, for FedDRL, the
        per-round weights of each planted cluster (``cluster_weights``).
    """
    from repro.fl.feddrl import DDPGWeights, make_loss_reporting_client_app
    from repro.fl.safa import SeededFedProx
    from repro.fl.weighting import FlowerPolicyFedAvg

    local, k = sgd.config(tau), spec.num_clients
    if method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(k, local, seed=seed)
    elif method == "fedprox":
        strat = SeededFedProx(k, local, seed=seed, mu=mu)
    elif method == "feddrl":
        strat = FlowerPolicyFedAvg(k, local, DDPGWeights(k, beta=beta, updates=updates, sigma=sigma, seed=seed),
                                   seed=seed)
    else:
        raise ValueError(f"method must be one of {FEDDRL_METHODS}, got {method!r}")
    hist = run_federated(strat, make_loss_reporting_client_app(spec), k, initial_arrays(spec, seed), rounds,
                         central_evaluator(spec), eval_schedule(rounds, eval_every), engine=engine)
    out = _summary(method, seed, hist, spec)
    if method == "feddrl":
        groups = planted_clusters(spec)
        out["cluster_weights"] = [(rd, *(sum(w[p] for p in w if groups[p] == g) for g in range(groups.max() + 1)))
                                  for rd, w in sorted(strat.weights_used.items())]
    return out


def _feddrl_job(job: tuple) -> dict:
    return feddrl_run(*job)


def feddrl_sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, seeds: list[int], mu: float, beta: float,
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
    jobs = [(m, spec, sgd, tau, rounds, s, mu, beta, sigma, updates, eval_every, engine)
            for m in FEDDRL_METHODS for s in seeds]
    done = parallel_map(_feddrl_job, jobs, workers if engine == "inprocess" else 1, desc="FedDRL comparison")
    cols = ("method", "seed", "accuracy", "budget_accuracy", "client_acc_std")
    final = pd.DataFrame([{c: r[c] for c in cols} for r in done])
    curves = pd.DataFrame([{"method": r["method"], "seed": r["seed"], "round": rd, "accuracy": a}
                           for r in done for rd, a in r["curve"]])
    weights = pd.DataFrame([{"seed": r["seed"], "round": row[0], "cluster": g, "weight": w}
                            for r in done if r["method"] == "feddrl" for row in r["cluster_weights"]
                            for g, w in enumerate(row[1:])])
    return final, curves, weights


def _gain(final: pd.DataFrame, method: str, base: str, col: str = "budget_accuracy") -> list[float]:
    a, b = (final[final.method == m].set_index("seed")[col] for m in (method, base))
    return [float(a[s] - b[s]) for s in sorted(b.index)]


def feddrl_claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the FedDRL chapter's claims."""
    return {"acc_gain_vs_fedavg": _gain(final, "feddrl", "fedavg"),
            "acc_gain_vs_fedprox": _gain(final, "feddrl", "fedprox"),
            "client_std_change_vs_fedavg": _gain(final, "feddrl", "fedavg", "client_acc_std")}


# ----- CADIS --------------------------------------------------------------------------
CADIS_METHODS = ("fedavg", "fedprox", "cluster-agg", "kd", "cadis", "oracle-agg")


def cadis_run(method: str, spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, seed: int,
              mu: float = 0.01, kd_mu: float = 1.0, temperature: float = 2.0, threshold: float = 0.5,
              eval_every: int = 10, engine: str = "inprocess") -> dict:
    """One run of CADIS's comparison and ablation.

    ``method``: ``fedavg``, ``fedprox``, ``cluster-agg`` (CADIS's aggregation
    alone), ``kd`` (FedAvg with the KD client), ``cadis`` (both) or
    ``oracle-agg`` (cluster-equal aggregation over the planted clusters).

    Returns
    -------
    dict
        As :func:`feddrl_run`, plus ``ari`` (adjusted Rand index of the
        clustering the server ends with, over all clients, against the planted
        groups; NaN for methods that do not cluster).
    """
    from repro.fl.cadis import CADIS, ClusterEqualWeights, make_kd_client_app
    from repro.fl.safa import SeededFedProx, make_regularised_client_app
    from repro.fl.weighting import FlowerPolicyFedAvg

    local, last = sgd.config(tau), f"fc{len(spec.hidden)}.weight"
    groups = planted_clusters(spec)
    app = make_kd_client_app(spec)
    if method == "fedavg":
        strat: SeededFedAvg = SeededFedAvg(active, local, seed=seed)
    elif method == "fedprox":
        strat, app = SeededFedProx(active, local, seed=seed, mu=mu), make_regularised_client_app(spec)
    elif method == "kd":
        strat = SeededFedAvg(active, {**local, "kd-mu": kd_mu, "kd-temperature": temperature}, seed=seed)
    elif method in ("cluster-agg", "cadis"):
        strat = CADIS(active, local, spec.num_clients, last, threshold=threshold,
                      kd_mu=kd_mu if method == "cadis" else 0.0, kd_temperature=temperature, seed=seed)
    elif method == "oracle-agg":
        strat = FlowerPolicyFedAvg(active, local, ClusterEqualWeights(dict(enumerate(int(g) for g in groups))),
                                   seed=seed)
    else:
        raise ValueError(f"method must be one of {CADIS_METHODS}, got {method!r}")
    hist = run_federated(strat, app, spec.num_clients, initial_arrays(spec, seed), rounds, central_evaluator(spec),
                         eval_schedule(rounds, eval_every), engine=engine)
    out = _summary(method, seed, hist, spec)
    out["ari"] = float("nan")
    if method in ("cluster-agg", "cadis"):
        out["ari"] = float(adjusted_rand_score(groups, strat.remembered_clusters(list(range(spec.num_clients)))))
    return out


def _cadis_job(job: tuple) -> dict:
    return cadis_run(*job)


def cadis_sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active: int, seeds: list[int], mu: float,
                kd_mu: float, temperature: float, threshold: float, eval_every: int,
                methods: tuple[str, ...] = CADIS_METHODS, engine: str = "inprocess",
                workers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method of :data:`CADIS_METHODS` for every seed.

    Returns
    -------
    final : DataFrame
        ``method, seed, accuracy, budget_accuracy, client_acc_std, ari``.
    curves : DataFrame
        Accuracy at each evaluated round.
    """
    unknown = set(methods) - set(CADIS_METHODS)
    if unknown:
        raise ValueError(f"methods must be among {CADIS_METHODS}, got {sorted(unknown)}")
    jobs = [(m, spec, sgd, tau, rounds, active, s, mu, kd_mu, temperature, threshold, eval_every, engine)
            for m in methods for s in seeds]
    done = parallel_map(_cadis_job, jobs, workers if engine == "inprocess" else 1, desc="CADIS comparison")
    cols = ("method", "seed", "accuracy", "budget_accuracy", "client_acc_std", "ari")
    final = pd.DataFrame([{c: r[c] for c in cols} for r in done])
    curves = pd.DataFrame([{"method": r["method"], "seed": r["seed"], "round": rd, "accuracy": a}
                           for r in done for rd, a in r["curve"]])
    return final, curves


def cadis_claims(final: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the CADIS chapter's claims (needs the ``fedavg``, ``fedprox`` and ``cadis`` runs)."""
    missing = {"fedavg", "fedprox", "cadis"} - set(final.method)
    if missing:
        raise ValueError(f"methods must include {sorted(missing)} to compute the claims")
    cadis = final[final.method == "cadis"].set_index("seed")
    return {"acc_gain_vs_fedavg": _gain(final, "cadis", "fedavg"),
            "acc_gain_vs_fedprox": _gain(final, "cadis", "fedprox"),
            "cluster_ari": [float(cadis.ari[s]) for s in sorted(cadis.index)]}


# ----- figures and tables ------------------------------------------------------------
LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "feddrl": "FedDRL", "cluster-agg": "cluster-equal aggregation",
          "kd": "KD regulariser", "cadis": "CADIS", "oracle-agg": "oracle clusters"}


def skew_curves(curves: pd.DataFrame, title: str) -> plt.Figure:
    """Test accuracy against rounds per method: mean over seeds, min-max band."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    styles = ("-", "--", "-.", ":")
    for i, (method, g) in enumerate(curves.groupby("method", sort=False)):
        s = g.groupby("round").accuracy
        ax.plot(s.mean().index, s.mean().values, ls=styles[i % len(styles)], label=LABELS.get(method, method))
        ax.fill_between(s.mean().index, s.min().values, s.max().values, alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def skew_table(final: pd.DataFrame) -> pd.DataFrame:
    """Per method: accuracy at the budget and final (mean ± sd), and the spread of per-client accuracy."""
    rows = []
    for method, g in final.groupby("method", sort=False):
        row = {"method": LABELS.get(method, method),
               "accuracy at budget (%)": f"{g.budget_accuracy.mean():.1f} ± {g.budget_accuracy.std(ddof=0):.1f}",
               "final accuracy (%)": f"{g.accuracy.mean():.1f} ± {g.accuracy.std(ddof=0):.1f}",
               "per-client accuracy sd": f"{g.client_acc_std.mean():.1f}"}
        if "ari" in final and final.ari.notna().any():
            row["ARI vs planted"] = f"{g.ari.mean():.2f}" if g.ari.notna().any() else "–"
        rows.append(row)
    return pd.DataFrame(rows)


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


def cluster_skew_heatmap(spec: TaskSpec) -> plt.Figure:
    """The task's client x class label histogram (clients grouped by planted cluster)."""
    from repro.partition import label_histogram

    ds, parts = load_task_data(spec)
    h = label_histogram(ds.y_train, list(parts), ds.num_classes)
    fig, ax = plt.subplots(figsize=(7, 2.4))
    ax.imshow(h.T, aspect="auto", cmap="Greens")
    for b in np.cumsum(spec.cluster_sizes)[:-1]:
        ax.axvline(b - 0.5, color="k", lw=1)
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.grid(False)
    ax.set_title(f"cluster-skewed split: groups of {', '.join(map(str, spec.cluster_sizes))} clients")
    fig.tight_layout()
    return fig


__all__ = ["feddrl_run", "feddrl_sweep", "feddrl_claims", "cadis_run", "cadis_sweep",
           "cadis_claims", "skew_curves", "skew_table", "cluster_weight_plot", "cluster_skew_heatmap",
           "planted_clusters", "per_client_accuracy"]
