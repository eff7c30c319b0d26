"""Aggregation cost of the federated strategies, per round, against Flower's FedAvg.

Each strategy runs a few rounds of the same small task on the in-process
engine; only the server's ``aggregate_train`` is timed (client training and,
for the activation policies, the probes sent from ``configure_train`` are
excluded).  ``make bench`` imports :func:`run`.
"""

from __future__ import annotations

import time
from typing import Callable

from flwr.clientapp import ClientApp
from repro.federated.activation import ActivatedFedAvg, MultiMetricActivation, make_probing_client_app
from repro.federated.cadis import CADIS, make_kd_client_app
from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated
from repro.federated.feddrl import DDPGWeights, make_loss_reporting_client_app
from repro.federated.feddyn import FedDyn, make_feddyn_client_app
from repro.federated.fedlama import FedLAMA
from repro.federated.fedluar import FedLUAR, TopKSparsified
from repro.federated.regularised import make_regularised_client_app
from repro.federated.safa import SAFA
from repro.federated.scaffold import SCAFFOLD, make_scaffold_client_app
from repro.federated.strategies import SeededFedAvg, SeededFedProx
from repro.federated.task import TaskSpec
from repro.federated.weighting import FlowerPolicyFedAvg

SPEC = TaskSpec(dataset="digits", num_clients=16, alpha=0.5, hidden=(256, 128, 64))
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.9).config(2)
ROUNDS = 6
ACTIVE = 8


def aggregation_seconds(factory: Callable[[], SeededFedAvg], app: Callable[[TaskSpec], ClientApp] = make_client_app,
                        rounds: int = ROUNDS) -> float:
    """Mean wall time of one ``aggregate_train`` call over a short run of the strategy ``factory`` builds."""
    strategy = factory()
    inner = strategy.aggregate_train
    spent: list[float] = []

    def timed(server_round, replies):
        t = time.perf_counter()
        out = inner(server_round, replies)
        spent.append(time.perf_counter() - t)
        return out

    strategy.aggregate_train = timed  # type: ignore[method-assign]
    run_federated(strategy, app(SPEC), SPEC.num_clients, initial_arrays(SPEC, 0), rounds,
                  central_evaluator(SPEC), [rounds])
    return sum(spent) / len(spent)


STRATEGIES: dict[str, tuple[Callable[[], SeededFedAvg], Callable[[TaskSpec], ClientApp]]] = {
    "FedAvg (Flower)": (lambda: SeededFedAvg(ACTIVE, LOCAL, seed=0), make_client_app),
    "FedLAMA phi=2": (lambda: FedLAMA(ACTIVE, LOCAL, seed=0, phi=2), make_client_app),
    "FedLUAR delta=2": (lambda: FedLUAR(ACTIVE, LOCAL, seed=0, delta=2), make_client_app),
    "FedLUAR drop delta=2": (lambda: FedLUAR(ACTIVE, LOCAL, seed=0, delta=2, mode="drop"), make_client_app),
    "top-k keep=0.2": (lambda: TopKSparsified(ACTIVE, LOCAL, seed=0, keep=0.2), make_client_app),
    "FedProx mu=0.01": (lambda: SeededFedProx(ACTIVE, LOCAL, seed=0, mu=0.01), make_regularised_client_app),
    "SAFA (K models, importance)": (lambda: SAFA(ACTIVE, LOCAL, seed=0, period=3), make_regularised_client_app),
    "multi-metric activation": (lambda: ActivatedFedAvg(ACTIVE, LOCAL, seed=0, policy=MultiMetricActivation(1.0),
                                                        candidates=12), make_probing_client_app),
}

# FedDRL (the agent acts and trains 10 steps a round once its buffer holds a batch) and CADIS (clustering)
STRATEGIES["FedDRL (DDPG weights)"] = (
    lambda: FlowerPolicyFedAvg(ACTIVE, LOCAL, DDPGWeights(ACTIVE, updates=10, batch_size=4, seed=0), seed=0),
    make_loss_reporting_client_app)
STRATEGIES["CADIS (clustered aggregation)"] = (
    lambda: CADIS(ACTIVE, LOCAL, SPEC.num_clients, f"fc{len(SPEC.hidden)}.weight", seed=0), make_kd_client_app)

# FedDyn (server state h) and SCAFFOLD (server control variate; twice the arrays each way)
STRATEGIES["FedDyn alpha=0.01"] = (
    lambda: FedDyn(ACTIVE, LOCAL, SPEC.num_clients, alpha=0.01, seed=0), make_feddyn_client_app)
STRATEGIES["SCAFFOLD (control variates)"] = (
    lambda: SCAFFOLD(ACTIVE, LOCAL, SPEC.num_clients, seed=0), make_scaffold_client_app)


def run() -> list[tuple[str, float, str]]:
    """One row per strategy: seconds per aggregation and the ratio to FedAvg's."""
    times = {name: min(aggregation_seconds(f, app) for _ in range(2)) for name, (f, app) in STRATEGIES.items()}
    base = times["FedAvg (Flower)"]
    return [(f"federated aggregate_train: {name}", t, f"{t / base:.2f}x FedAvg") for name, t in times.items()]


if __name__ == "__main__":
    for name, seconds, ratio in run():
        print(f"{name:45s} {seconds * 1e3:8.2f} ms  {ratio}")
